"""Prometheus metrics: one ``CollectorRegistry`` per gateway, fed by the ASGI middleware and the run log.

The HTTP series come from ``MetricsMiddleware`` (route template, method, status). Everything about
runs (model, rounds, tokens, tool calls, cache hits) is read from the request-log record each run
produces, so nothing is counted twice and the loop carries no metrics code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hatchway.store.log_sink import DROP_REASONS
from hatchway.store.logs import Record

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)
_MAX_LABEL_VALUES = 200
LIMITS_FAILURES = (("admit", "admitted"), ("admit", "refused"), ("settle", "deferred"))
"""``hatchway_limits_redis_failures_total``'s ``step`` and ``outcome`` (``limits/repairs.py``)."""
OTHER = "other"
INLINE = "inline"
HOSTED = "hatchway"
"""The server label of the gateway's own tools (``spawn_subagent``)."""


class BoundedLabel:
    """Keeps a label's values few: the first ``limit`` distinct values, then ``other``.

    Model and tool names come from clients and models; without a bound one caller could create
    a series per request.
    """

    def __init__(self, limit: int = _MAX_LABEL_VALUES) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        value = (value or "none")[:128]
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(value)
        return value


class Metrics:
    """The gateway's series; ``exposition()`` renders them for ``GET /metrics``.

    Label values are names the operator chose, never a client's: a model label is a configured
    model, an ``agent:<name>`` or ``<provider>/*`` (the rest is ``other``), and the servers and tools
    of plugins sent inline in a request are ``inline``. So no organisation can spend the label budget
    another one's real names need, nor read another's chosen strings off ``/metrics``.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        known_models: Iterable[str] = (),
        providers: Iterable[str] = (),
        servers: Iterable[str] = (),
    ) -> None:
        self.known_models = frozenset(known_models)
        self.servers = frozenset(servers) | {HOSTED}
        """The configured MCP servers' ids (and the gateway's own tools'): a tool is labelled by its
        name only when its call was resolved to one of them."""
        self.providers = frozenset(providers)
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "hatchway_http_requests", "HTTP requests served.", ["route", "method", "status"], registry=r
        )
        self.http_latency = Histogram(
            "hatchway_http_request_duration_seconds",
            "Time to serve an HTTP request (to the last byte of a stream).",
            ["route", "method", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.runs = Counter(
            "hatchway_runs",
            "Requests that ran a model (one per run log record).",
            ["route", "model", "status"],
            registry=r,
        )
        self.run_latency = Histogram(
            "hatchway_run_duration_seconds",
            "Run latency, by route, model and status.",
            ["route", "model", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rounds = Histogram(
            "hatchway_run_rounds",
            "Model rounds per run.",
            ["route", "model"],
            buckets=_ROUND_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("hatchway_tokens", "Tokens, summed over rounds.", ["model", "type"], registry=r)
        self.cost = Counter(
            "hatchway_cost_usd",
            "What model calls cost in USD by the price table (calls of unknown price count nothing).",
            ["model"],
            registry=r,
        )
        self.unpriced_runs = Counter(
            "hatchway_unpriced_runs",
            "Runs with a model call of unknown price (no genai-prices match, no models[].price).",
            ["model"],
            registry=r,
        )
        self.tool_calls = Counter(
            "hatchway_tool_calls", "Tool calls run by the gateway.", ["server", "tool", "outcome"], registry=r
        )
        self.tool_cache_hits = Counter(
            "hatchway_tool_cache_hits",
            "Tool calls answered from the tool result cache.",
            ["server", "tool"],
            registry=r,
        )
        self.guard_findings = Counter(
            "hatchway_guard_findings",
            "Tool results a guard flagged (engine/guards), by what matched and what was done.",
            ["detector", "kind", "action"],
            registry=r,
        )
        self.runs_in_flight = Gauge(
            "hatchway_runs_in_flight", "Runs in progress on this process.", registry=r
        )
        self.run_records_dropped = Counter(
            "hatchway_run_records_dropped",
            "Run records that could not be stored: refused by the database even cleaned, the database "
            "unreachable with no spool, the spool full or unwritable, or a writer error.",
            ["reason"],
            registry=r,
        )
        for reason in DROP_REASONS:  # every series exported from the start, at 0
            self.run_records_dropped.labels(reason)
        self.run_records_spooled = Counter(
            "hatchway_run_records_spooled",
            "Run records written to the local spool while the database was unreachable.",
            registry=r,
        )
        self.run_records_replayed = Counter(
            "hatchway_run_records_replayed",
            "Run records stored from the local spool once the database answered again.",
            registry=r,
        )
        self.responses_requeued = Counter(
            "hatchway_responses_requeued",
            "Queued background responses enqueued again because their job was missing from Redis.",
            registry=r,
        )
        self.limits_redis_failures = Counter(
            "hatchway_limits_redis_failures",
            "Calls of the limits to Redis that failed (refused, timed out, an error), by step and what "
            "was done: a request admitted unchecked or refused (limits.on_redis_failure), a settle deferred.",
            ["step", "outcome"],
            registry=r,
        )
        for step, outcome in LIMITS_FAILURES:  # every series exported from the start, at 0
            self.limits_redis_failures.labels(step, outcome)
        self._model = BoundedLabel()
        self._tool = BoundedLabel()
        self._server = BoundedLabel()
        self._http_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._children: dict[tuple[Any, ...], Any] = {}

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        """One HTTP request; both children under one key, so every request costs one lookup
        (``_child`` would take two: measured 1.1 vs 1.6 µs per request)."""
        key = (route, method, status)
        children = self._http_children.get(key)
        if children is None:
            labels = (route, method, str(status))
            children = (self.http_requests.labels(*labels), self.http_latency.labels(*labels))
            self._http_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def _tool_labels(self, step: dict[str, Any], inline: bool) -> tuple[str, str]:
        """(server, tool) of a tool step: an inline plugin's are ``inline``; a name a model or an
        endpoint's caller made up (not resolved to a configured server, or refused as unknown) is
        ``other``, so no caller spends the label budget another organisation's real tools need."""
        if inline:
            return INLINE, INLINE
        server = step.get("server")
        if server not in self.servers or step.get("error_code") == "unknown_tool":
            return OTHER, OTHER
        return self._server(server), self._tool(str(step.get("tool") or step.get("name") or ""))

    def observe_record(self, record: Record) -> None:
        """One run's record: counts, latency, rounds, tokens, cost and its tool calls."""
        model = self._model_label(record.model)
        route = record.route
        child = self._child
        child(self.runs, route, model, record.status).inc()
        child(self.run_latency, route, model, record.status).observe((record.latency_ms or 0) / 1000)
        if record.rounds:
            child(self.rounds, route, model).observe(record.rounds)
        if record.prompt_tokens:
            child(self.tokens, model, "input").inc(record.prompt_tokens)
        if record.completion_tokens:
            child(self.tokens, model, "output").inc(record.completion_tokens)
        if record.cost_usd:
            child(self.cost, model).inc(record.cost_usd)
        elif record.cost_usd is None:
            child(self.unpriced_runs, model).inc()
        inline = record.plugin_source == INLINE
        for step in record.steps or ():
            if step.get("type") == "tool_description":  # a guard's finding in a server's description
                for finding in step["guard"]["findings"]:
                    child(self.guard_findings, finding["detector"], finding["kind"], finding["action"]).inc()
            if step.get("type") != "tool_call":
                continue
            server, tool = self._tool_labels(step, inline)
            child(self.tool_calls, server, tool, str(step.get("outcome") or "ok")).inc()
            if step.get("cached"):
                child(self.tool_cache_hits, server, tool).inc()
            guard = step.get("guard")
            for finding in guard["findings"] if guard else ():  # fixed vocabularies: bounded labels
                action = str(finding.get("action") or guard["action"])
                child(self.guard_findings, finding["detector"], finding["kind"], action).inc()

    def records_dropped(self, reason: str, count: int) -> None:
        """The run-log sink's tally (``store/log_sink.py`` ``RecordTally``)."""
        self.run_records_dropped.labels(reason).inc(count)

    def records_spooled(self, count: int) -> None:
        self.run_records_spooled.inc(count)

    def records_replayed(self, count: int) -> None:
        self.run_records_replayed.inc(count)

    def limits_redis_failed(self, step: str, outcome: str) -> None:
        """The limits' tally of Redis failures (``limits/repairs.py`` ``Failures``)."""
        self.limits_redis_failures.labels(step, outcome).inc()

    def responses_requeued_by(self, count: int) -> None:
        """The requeue pass's tally (``responses/requeue.py``)."""
        self.responses_requeued.inc(count)

    def _model_label(self, model: str | None) -> str:
        if model in self.known_models:
            return self._model(model)
        provider, slash, _ = (model or "").partition("/")
        if slash and provider in self.providers:
            return f"{provider}/*"
        return OTHER

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: prometheus-client's lookup (a lock, label checks)
        costs more than the update it precedes, once per record per series."""
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = metric.labels(*labels)
            if len(self._children) < 16 * _MAX_LABEL_VALUES:  # label values are bounded; so is this
                self._children[key] = found
        return found

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
