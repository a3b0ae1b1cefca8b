"""Tool-definition pins (``store/tool_pins.py``): each upstream tool's approved and last seen definition.

Revision ID: 0011_tool_pins
Revises: 0010_limit_overrides
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_tool_pins"
down_revision = "0010_limit_overrides"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_pins",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("server", sa.String(128), primary_key=True),
        sa.Column("tool", sa.String(256), primary_key=True),
        sa.Column("approved_hash", sa.String(64), nullable=True),
        sa.Column("approved", sa.JSON, nullable=True),
        sa.Column("seen_hash", sa.String(64), nullable=False),
        sa.Column("seen", sa.JSON, nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tool_pins")
