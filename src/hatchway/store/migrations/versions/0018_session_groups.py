"""SSO sessions keep the person's groups (the ``groups_claim`` at sign-in): approvals routed to a
group (``engine/tools/operations/approvals.py``) are offered to its members.

Revision ID: 0018_session_groups
Revises: 0015_sessions
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_session_groups"
down_revision = "0015_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sso_sessions", sa.Column("groups", sa.JSON))


def downgrade() -> None:
    op.drop_column("sso_sessions", "groups")
