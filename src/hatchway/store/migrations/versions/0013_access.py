"""Access: each API key's role and restrictions (allowed models and MCP endpoints, expiry, description)
and the key a rotation replaced it with.

Keys made before this revision become ``admin`` keys (the server default): until now every key could
do everything in its organisation, and an upgrade must not lock a running deployment out of its own
secrets and dashboard; the README's changelog says so and how to narrow them. New keys are ``app``
keys unless another role is asked for (the ORM sets it).

Revision ID: 0013_access
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0013_access"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="admin"))
        batch.add_column(sa.Column("description", sa.String(512)))
        batch.add_column(sa.Column("allowed_models", sa.JSON))
        batch.add_column(sa.Column("allowed_mcp_endpoints", sa.JSON))
        batch.add_column(sa.Column("expires_at", UTCDateTime()))
        batch.add_column(sa.Column("replaced_by", sa.String(40)))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        for column in ("replaced_by", "expires_at", "allowed_mcp_endpoints", "allowed_models", "description"):
            batch.drop_column(column)
        batch.drop_column("role")
