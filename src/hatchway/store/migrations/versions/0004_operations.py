"""Operations: durable transactional operations (pending confirmations, evidence, verdicts).

Revision ID: 0004_operations
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0004_operations"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

_AWAITING = sa.text("status = 'AWAITING_CONFIRMATION'")


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("agent", sa.String(128), nullable=False),
        sa.Column("session_key", sa.Text),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("status_reason", sa.Text),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("server", sa.String(128), nullable=False),
        sa.Column("operation_type", sa.String(32), nullable=False),
        sa.Column("policy", sa.JSON, nullable=False),
        sa.Column("call_id", sa.String(256)),
        sa.Column("response_id", sa.String(64)),
        sa.Column("arguments", sa.JSON, nullable=False),
        sa.Column("resolved_arguments", sa.JSON),
        sa.Column("arguments_digest", sa.String(64)),
        sa.Column("confirmation_message", sa.Text),
        sa.Column("pre_validation", sa.JSON),
        sa.Column("requested_by", sa.String(256)),
        sa.Column("confirmed_by", sa.String(256)),
        sa.Column("confirmed_via", sa.String(16)),
        sa.Column("executor", sa.String(300)),
        sa.Column("lease_expires_at", UTCDateTime()),
        sa.Column("verdict", sa.JSON),
        sa.Column("items", sa.JSON),
        sa.Column("result", sa.JSON),
        sa.Column("error", sa.JSON),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("confirmed_at", UTCDateTime()),
        sa.Column("started_at", UTCDateTime()),
        sa.Column("completed_at", UTCDateTime()),
    )
    op.create_index("ix_operations_org_id_id", "operations", ["org_id", "id"])
    op.create_index("ix_operations_session", "operations", ["org_id", "agent", "session_key", "status"])
    op.create_index("ix_operations_status", "operations", ["status"])
    op.create_index(
        "ux_operations_one_pending",
        "operations",
        ["org_id", "agent", "session_key"],
        unique=True,
        sqlite_where=_AWAITING,
        postgresql_where=_AWAITING,
    )


def downgrade() -> None:
    op.drop_table("operations")
