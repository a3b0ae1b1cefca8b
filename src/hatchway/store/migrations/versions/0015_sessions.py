"""SSO: signed-in people's sessions and the sign-ins under way (``access/sessions.py``,
``access/sso.py``).

Revision ID: 0015_sessions
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0015_sessions"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sso_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("grants", sa.JSON, nullable=False),
        sa.Column("platform", sa.Boolean, nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_sso_sessions_expires_at", "sso_sessions", ["expires_at"])
    op.create_table(
        "sso_logins",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("binding_hash", sa.String(64), nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("code_verifier", sa.String(128), nullable=False),
        sa.Column("redirect_uri", sa.String(2048), nullable=False),
        sa.Column("next_path", sa.String(512), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_sso_logins_expires_at", "sso_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_sso_logins_expires_at", table_name="sso_logins")
    op.drop_table("sso_logins")
    op.drop_index("ix_sso_sessions_expires_at", table_name="sso_sessions")
    op.drop_table("sso_sessions")
