"""Approvals: who must approve an operation besides (or instead of) its end user, and each decision.

``operations.approval`` is the rule that applies to an operation (``engine/tools/operations/
approvals.py``); ``operation_approvals`` holds one row per approver, stage and arguments digest, so a
decision sent twice is one decision and a decision on other arguments does not count.
``operations.outcome_reported_at`` marks the outcome told to the requester's conversation.

Revision ID: 0016_approvals
Revises: 0012_operation_questions
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0016_approvals"
down_revision = "0012_operation_questions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("approval", sa.JSON))
    op.add_column("operations", sa.Column("outcome_reported_at", UTCDateTime()))
    op.create_table(
        "operation_approvals",
        sa.Column("operation_id", sa.String(40), primary_key=True),
        sa.Column("approver", sa.String(256), primary_key=True),
        sa.Column("stage", sa.Integer, primary_key=True),
        sa.Column("arguments_digest", sa.String(64), primary_key=True),
        sa.Column("decision", sa.String(16), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(300), nullable=False),
        sa.Column("decided_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("operation_approvals")
    op.drop_column("operations", "outcome_reported_at")
    op.drop_column("operations", "approval")
