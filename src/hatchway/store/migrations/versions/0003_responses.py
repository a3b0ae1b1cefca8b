"""Responses API: stored responses (chains, background runs, delegation) and their items.

Revision ID: 0003_responses
Revises: 0001_foundation
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0003_responses"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(40), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("usage", sa.JSON),
        sa.Column("error", sa.JSON),
        sa.Column("incomplete_details", sa.JSON),
        sa.Column("previous_response_id", sa.String(64)),
        sa.Column("parent_response_id", sa.String(64)),
        sa.Column("call_id", sa.String(128)),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("background", sa.Boolean, nullable=False),
        sa.Column("on_behalf_of", sa.String(256)),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_expires_at", UTCDateTime()),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("completed_at", UTCDateTime()),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_responses_org_id", "responses", ["org_id"])
    op.create_index("ix_responses_status_lease", "responses", ["status", "lease_expires_at"])
    op.create_index("ix_responses_parent", "responses", ["parent_response_id"])
    op.create_table(
        "response_items",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "response_id", sa.String(64), sa.ForeignKey("responses.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_response_items_response", "response_items", ["response_id", "direction", "position"])


def downgrade() -> None:
    op.drop_table("response_items")
    op.drop_table("responses")
