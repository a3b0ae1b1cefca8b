"""A2A tasks (``a2a/store.py``): each names the stored response answering for it.

Revision ID: 0019_a2a_tasks
Revises: 0003_responses
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_a2a_tasks"
down_revision = "0003_responses"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "a2a_tasks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("agent", sa.String(128), nullable=False),
        sa.Column("context_id", sa.String(128), nullable=False),
        sa.Column("end_user", sa.String(256)),
        sa.Column("response_id", sa.String(64)),
        sa.Column("refusal", sa.JSON),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_a2a_tasks_context", "a2a_tasks", ["org_id", "agent", "context_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_a2a_tasks_context", table_name="a2a_tasks")
    op.drop_table("a2a_tasks")
