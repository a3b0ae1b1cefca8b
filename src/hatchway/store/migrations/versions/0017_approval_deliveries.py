"""The delivery log of approval notifications (``engine/tools/operations/deliveries.py``).

Revision ID: 0017_approval_deliveries
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0017_approval_deliveries"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approval_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("operation_id", sa.String(40), nullable=False),
        sa.Column("webhook", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.String(300), nullable=True),
        sa.Column("claimed_by", sa.String(300), nullable=True),
        sa.Column("claim_expires_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_approval_deliveries_due", "approval_deliveries", ["status", "next_attempt_at"])
    op.create_index(
        "ix_approval_deliveries_operation", "approval_deliveries", ["org_id", "operation_id", "created_at"]
    )
    op.create_index("ix_approval_deliveries_org_id_id", "approval_deliveries", ["org_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_approval_deliveries_org_id_id", table_name="approval_deliveries")
    op.drop_index("ix_approval_deliveries_operation", table_name="approval_deliveries")
    op.drop_index("ix_approval_deliveries_due", table_name="approval_deliveries")
    op.drop_table("approval_deliveries")
