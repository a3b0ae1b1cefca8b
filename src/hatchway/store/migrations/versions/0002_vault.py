"""Vault: per-organisation data keys wrapped by the master key, and sealed secrets.

Revision ID: 0002_vault
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0002_vault"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vault_data_keys",
        sa.Column(
            "org_id", sa.String(40), sa.ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("wrapped_key", sa.LargeBinary, nullable=False),
        sa.Column("master_key_id", sa.String(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("rewrapped_at", UTCDateTime(), nullable=True),
    )
    op.create_table(
        "vault_secrets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "org_id", sa.String(40), sa.ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary, nullable=False),
        sa.Column("allowed_hosts", sa.JSON, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("org_id", "name", name="uq_vault_secrets_org_id_name"),
    )


def downgrade() -> None:
    op.drop_table("vault_secrets")
    op.drop_table("vault_data_keys")
