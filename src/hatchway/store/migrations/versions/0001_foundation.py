"""Foundation: organisations, API keys, request logs.

Revision ID: 0001_foundation
Revises:
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "organizations",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "org_id", sa.String(40), sa.ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_api_keys_org_id", "api_keys", ["org_id"])
    op.create_table(
        "request_logs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("key_id", sa.String(40)),
        sa.Column("key_name", sa.String(128)),
        sa.Column("on_behalf_of", sa.String(256)),
        sa.Column("route", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256)),
        sa.Column("agent", sa.String(128)),
        sa.Column("plugin_source", sa.String(256)),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=False),
        sa.Column("finish_reason", sa.String(32)),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("total_tokens", sa.Integer, nullable=False),
        sa.Column("rounds", sa.Integer, nullable=False),
        sa.Column("max_rounds_hit", sa.Boolean, nullable=False),
        sa.Column("has_tool_calls", sa.Boolean, nullable=False),
        sa.Column("steps", sa.JSON, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("response_id", sa.String(64)),
        sa.Column("parent_id", sa.String(64)),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_request_logs_org_id_id", "request_logs", ["org_id", "id"])


def downgrade() -> None:
    op.drop_table("request_logs")
    op.drop_table("api_keys")
    op.drop_table("organizations")
