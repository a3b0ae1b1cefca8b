"""MCP tasks (``engine/tools/mcp/task_ledger.py``): a run's upstream tasks and the endpoint's tasks.

Revision ID: 0021_mcp_tasks
Revises: 0020_a2a_push_configs
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_mcp_tasks"
down_revision = "0020_a2a_push_configs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_tasks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("side", sa.String(16), nullable=False),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("end_user", sa.String(256)),
        sa.Column("endpoint", sa.String(128)),
        sa.Column("server_id", sa.String(128), nullable=False),
        sa.Column("server_ref", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("call_key", sa.String(64)),
        sa.Column("response_id", sa.String(64)),
        sa.Column("upstream_task_id", sa.String(256)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_message", sa.Text),
        sa.Column("result", sa.JSON),
        sa.Column("error", sa.JSON),
        sa.Column("input_requests", sa.JSON),
        sa.Column("state", sa.JSON),
        sa.Column("poll_interval_ms", sa.Integer),
        sa.Column("resumes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_mcp_tasks_call", "mcp_tasks", ["org_id", "call_key"])
    op.create_index("ix_mcp_tasks_response", "mcp_tasks", ["response_id"])
    op.create_index("ix_mcp_tasks_open", "mcp_tasks", ["org_id", "side", "status"])


def downgrade() -> None:
    op.drop_table("mcp_tasks")
