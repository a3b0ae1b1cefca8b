"""Spend: each run record's cost in USD (null when a model call's price is unknown), and the index
``GET /v1/usage`` sums an organisation's records over a time range with.

Revision ID: 0009_spend
Revises: 0005_observability
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_spend"
down_revision = "0005_observability"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("request_logs", sa.Column("cost_usd", sa.Float))
    op.create_index("ix_request_logs_org_id_created_at", "request_logs", ["org_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_request_logs_org_id_created_at", table_name="request_logs")
    op.drop_column("request_logs", "cost_usd")
