"""A2A push notifications that outlive their replica (``a2a/push_configs.py``): the state a config
was last told for good, and how long the replica that claimed a notification holds it.

Revision ID: 0022_a2a_push_deliveries
Revises: 0021_mcp_tasks
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_a2a_push_deliveries"
down_revision = "0021_mcp_tasks"
branch_labels = None
depends_on = None


UNTOLD = sa.text("delivered IS NULL OR delivered <> notified")


def upgrade() -> None:
    op.add_column("a2a_push_configs", sa.Column("delivered", sa.String(200)))
    op.add_column("a2a_push_configs", sa.Column("claim_expires_at", sa.DateTime(timezone=True)))
    # The sweep reads only configs not told yet: told ones (most, forever) stay out of the index.
    op.create_index(
        "ix_a2a_push_configs_untold",
        "a2a_push_configs",
        ["created_at"],
        sqlite_where=UNTOLD,
        postgresql_where=UNTOLD,
    )


def downgrade() -> None:
    op.drop_index("ix_a2a_push_configs_untold", "a2a_push_configs")
    with op.batch_alter_table("a2a_push_configs") as batch:
        batch.drop_column("claim_expires_at")
        batch.drop_column("delivered")
