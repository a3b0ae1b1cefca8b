"""Background responses on the job queue: the stored request of each queued response.

Revision ID: 0006_response_jobs
Revises: 0003_responses
"""

import sqlalchemy as sa
from alembic import op

from hatchway.store.tables import UTCDateTime

revision = "0006_response_jobs"
down_revision = "0003_responses"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "response_jobs",
        sa.Column(
            "response_id",
            sa.String(64),
            sa.ForeignKey("responses.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("key_id", sa.String(40)),
        sa.Column("key_name", sa.String(128)),
        sa.Column("sealed_headers", sa.LargeBinary),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("response_jobs")
