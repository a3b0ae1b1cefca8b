"""Stored items found by their id: the Responses API's ``item_reference`` input items.

Revision ID: 0007_item_lookup
Revises: 0006_response_jobs
"""

from alembic import op

revision = "0007_item_lookup"
down_revision = "0006_response_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_response_items_item", "response_items", ["item_id"])


def downgrade() -> None:
    op.drop_index("ix_response_items_item", table_name="response_items")
