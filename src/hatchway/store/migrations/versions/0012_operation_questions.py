"""Operations: each time a question was put to the user, and repeats of a recent execution.

``operation_questions`` binds a reply to the question it answers (``engine/tools/operations/turns.py``):
one row per time an operation's question was asked, keyed by the conversation and the user messages it
answered. ``operations.repeat_of`` names the recent execution a new operation would do again.

Revision ID: 0012_operation_questions
Revises: 0004_operations
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0012_operation_questions"
down_revision = "0004_operations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operation_questions",
        sa.Column("turn_key", sa.String(64), primary_key=True),
        sa.Column("operation_id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("asked_at", UTCDateTime(), nullable=False),
    )
    op.add_column("operations", sa.Column("repeat_of", sa.String(40)))


def downgrade() -> None:
    op.drop_column("operations", "repeat_of")
    op.drop_table("operation_questions")
