"""The tamper-evident audit trail (``audit/store.py``): entries chained by hash, signed heads and checkpoints.

Revision ID: 0014_audit
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0014_audit"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_entries",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("source", sa.String(128), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_entries_org_id_at", "audit_entries", ["org_id", "at"])
    op.create_table(
        "audit_heads",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_heads")
    op.drop_index("ix_audit_entries_org_id_at", table_name="audit_entries")
    op.drop_table("audit_entries")
