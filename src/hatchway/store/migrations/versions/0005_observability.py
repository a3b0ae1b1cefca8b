"""Observability: an index for the request-log retention purge (records older than N days).

Revision ID: 0005_observability
Revises: 0001_foundation
"""

from alembic import op

revision = "0005_observability"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_request_logs_created_at", "request_logs", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_request_logs_created_at", table_name="request_logs")
