"""Table definitions. Alembic migrations under ``migrations/`` create them; keep the two in step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


class Organization(Base):
    __tablename__ = "organizations"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    key_prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    role: Mapped[str] = mapped_column(String(16), default="app")
    """``app``, ``viewer``, ``admin`` or ``platform`` (principal.Role; 0013_access)."""
    description: Mapped[str | None] = mapped_column(String(512), default=None)
    allowed_models: Mapped[list[Any] | None] = mapped_column(default=None)
    """Public model names (``agent:<name>`` included) the key may call; null: any."""
    allowed_mcp_endpoints: Mapped[list[Any] | None] = mapped_column(default=None)
    """``/mcp/<name>`` endpoints the key may use; null: any."""
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    """The key stops working at this time (a rotated key: the end of its grace period)."""
    replaced_by: Mapped[str | None] = mapped_column(String(40), default=None)
    """The key that replaced this one in a rotation."""


class RequestLog(Base):
    """One record per request: the foundation fills the summary, the loop adds rounds and steps."""

    __tablename__ = "request_logs"
    __table_args__ = (
        Index("ix_request_logs_org_id_id", "org_id", "id"),
        Index("ix_request_logs_created_at", "created_at"),  # retention purge (0005_observability)
        Index("ix_request_logs_org_id_created_at", "org_id", "created_at"),  # GET /v1/usage (0009_spend)
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    key_id: Mapped[str | None] = mapped_column(String(40))
    key_name: Mapped[str | None] = mapped_column(String(128))
    on_behalf_of: Mapped[str | None] = mapped_column(String(256))
    route: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(256))
    agent: Mapped[str | None] = mapped_column(String(128))
    plugin_source: Mapped[str | None] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(32))
    http_status: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    latency_ms: Mapped[float] = mapped_column(Float)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    total_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    """USD, by the price table; null when a model call's price is unknown (0009_spend)."""
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    max_rounds_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    has_tool_calls: Mapped[bool] = mapped_column(Boolean, default=False)
    steps: Mapped[list[Any]] = mapped_column(default=list)
    error: Mapped[str | None] = mapped_column(Text)
    response_id: Mapped[str | None] = mapped_column(String(64))
    parent_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
