"""Limits set with ``hatchway limits set`` (laid over hatchway.yaml's ``limits:``).

Revision ID: 0010_limit_overrides
Revises: 0009_spend
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_limit_overrides"
down_revision = "0009_spend"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "limit_overrides",
        sa.Column("table", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("values", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("limit_overrides")
