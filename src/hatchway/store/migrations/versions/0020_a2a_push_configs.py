"""A2A push notification configs (``a2a/push.py``): per task, the token and credentials sealed.

Revision ID: 0020_a2a_push_configs
Revises: 0019_a2a_tasks
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_a2a_push_configs"
down_revision = "0019_a2a_tasks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "a2a_push_configs",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("notified", sa.String(200)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("a2a_push_configs")
