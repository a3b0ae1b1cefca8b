"""Acting as the end user toward MCP servers: each end user's sealed OAuth grants, client
registrations, the pending authorizations the conversation's consent links stand for, and tools'
questions to the end user (MCP input requests) held across turns.

Revision ID: 0008_user_oauth
Revises: 0007_item_lookup
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0008_user_oauth"
down_revision = "0007_item_lookup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_oauth_grants",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("end_user", sa.String(256), primary_key=True),
        sa.Column("server_key", sa.String(64), primary_key=True),
        sa.Column("server_id", sa.String(128), nullable=False),
        sa.Column("server_url", sa.Text, nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("scopes", sa.Text),
        sa.Column("expires_at", UTCDateTime()),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "oauth_clients",
        sa.Column("org_id", sa.String(40), primary_key=True),
        sa.Column("server_key", sa.String(64), primary_key=True),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "oauth_consents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("end_user", sa.String(256), nullable=False),
        sa.Column("server_key", sa.String(64), nullable=False),
        sa.Column("server_id", sa.String(128), nullable=False),
        sa.Column("state_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("trusted", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_oauth_consents_org_id", "oauth_consents", ["org_id"])
    op.create_index("ix_oauth_consents_user_server", "oauth_consents", ["org_id", "end_user", "server_key"])
    op.create_table(
        "mcp_input_requests",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("end_user", sa.String(256)),
        sa.Column("server_id", sa.String(128), nullable=False),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("round", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_mcp_input_requests_org_id", "mcp_input_requests", ["org_id"])


def downgrade() -> None:
    op.drop_table("mcp_input_requests")
    op.drop_table("oauth_consents")
    op.drop_table("oauth_clients")
    op.drop_table("user_oauth_grants")
