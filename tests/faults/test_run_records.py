"""Run records are never lost: not to a bad value in another request's record, not to a database
outage while requests are answered, not to a gateway stopped (or killed) during a longer outage.

Faults are injected for real: values PostgreSQL refuses, sent by a client or an upstream, and a TCP
proxy between the gateway and PostgreSQL that cuts every connection.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hatchway.ids import new_id
from hatchway.observability.metrics import Metrics
from hatchway.store.db import Database
from hatchway.store.logs import LogQuery, LogRecord, LogWriter, RequestLogStore
from hatchway.store.spool import RecordSpool, database_key
from tests.support.gateway import OrgKey, RunningGateway, create_org_key
from tests.support.metrics import scrape, value
from tests.support.outage_proxy import OutageProxy
from tests.support.replicas import Replicas, eventually
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

pytestmark = pytest.mark.postgres

GOOD = 40


def chat(url: str, key: str, model: str = "gpt-4o", text: str = "hi") -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def records(url: str, key: str) -> list[dict[str, Any]]:
    """The organisation's run records (``GET /v1/logs`` flushes this replica's writer first)."""
    response = httpx.get(
        f"{url}/v1/logs", params={"limit": 200}, headers={"authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


# -- a bad value among good records -------------------------------------------------------------------

BAD_REQUESTS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], None]]] = {
    # a client's 300-character model name (the column holds 256): answered 404, recorded cut short
    "a 300-character model name": (
        {"model": "m" * 300},
        lambda r: r["model"] == "m" * 255 + "…" and r["http_status"] == 404,
    ),
    # a NUL in a client's model name (PostgreSQL refuses \x00 in text)
    "a NUL in the model name": (
        {"model": "gpt-4o\x00evil"},
        lambda r: r["model"] == "gpt-4o\ufffdevil" and r["http_status"] == 404,
    ),
    # an upstream's finish_reason longer than its column (32): answered 200, recorded cut short
    "a 40-character finish_reason": (
        {"text": "odd upstream"},
        lambda r: r["finish_reason"] == "x" * 31 + "…" and r["http_status"] == 200,
    ),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_one_bad_value_loses_no_other_record_of_any_organisation(
    case: str, gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM, pg_database_url: str
) -> None:
    gateway = gateway_factory(database_url=pg_database_url)
    other = gateway.new_org()
    gate = threading.Event()

    def script(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "odd upstream":
            return Reply("fine", finish_reason="x" * 40)  # the fault: longer than its column
        return Reply("ok", gate=gate)

    llm.handler = script
    request, landed_as = BAD_REQUESTS[case]
    with ThreadPoolExecutor(GOOD) as pool:
        good = [pool.submit(chat, gateway.url, gateway.key) for _ in range(GOOD)]
        wait_until(lambda: len(llm.requests) == GOOD, timeout=30, message="every good request upstream")
        gate.set()  # the 40 answer together: their records and the bad one share one insert
        chat(gateway.url, other.key, **request)
        assert [f.result().status_code for f in good] == [200] * GOOD

    assert len(records(gateway.url, gateway.key)) == GOOD
    [stored] = records(gateway.url, other.key)
    assert landed_as(stored), stored


# -- a database outage while requests are answered ------------------------------------------------


def test_a_six_second_database_outage_loses_no_record_of_a_request_answered_200(
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    pg_database_url: str,
    proxy: OutageProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the default spool directory is relative: keep it out of the tree
    gateway = gateway_factory(database_url=proxy.url(pg_database_url))
    llm.default = Reply("ok")
    assert chat(gateway.url, gateway.key).status_code == 200  # the key is known: no database needed
    assert len(records(gateway.url, gateway.key)) == 1

    restored = proxy.cut_for(6.0)
    answered = [chat(gateway.url, gateway.key) for _ in range(10)]
    # The writer is retrying (its reconnections are being reset) when the next ten are answered.
    wait_until(lambda: proxy.refused >= 3, timeout=10, message="the log writer to retry")
    answered += [chat(gateway.url, gateway.key) for _ in range(10)]
    assert not restored.is_set(), "the requests should have been answered during the outage"
    assert [r.status_code for r in answered] == [200] * 20

    assert restored.wait(30)
    ids = {r.headers["x-hatchway-request-id"] for r in answered}
    wait_until(
        lambda: {r["id"] for r in records(gateway.url, gateway.key)} >= ids,
        timeout=30,
        interval=0.2,
        message="the outage's records to land",
    )
    assert len(records(gateway.url, gateway.key)) == 21


# -- an outage longer than the retry budget, across a restart ---------------------------------------


def spooled_lines(spool: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in spool.glob("*.jsonl"))


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_records_spooled_through_a_long_outage_land_after_a_restart(
    stop: str, llm: ScriptedLLM, pg_database_url: str, proxy: OutageProxy, tmp_path: Path
) -> None:
    url = proxy.url(pg_database_url)
    org: OrgKey = asyncio.run(create_org_key(url))
    spool = tmp_path / "spool"
    config = {
        "database_url": url,
        "master_key_file": str(tmp_path / "master.key"),
        "providers": [{"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 10}],
        "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o-2024"}],
        "run_records": {"retry_seconds": 0.5, "spool_dir": str(spool)},
    }
    llm.default = Reply("ok")
    replicas = Replicas(tmp_path, config)
    try:
        first = replicas.serve("first")
        assert chat(first.url, org.key).status_code == 200  # the key is known: no database needed
        assert len(records(first.url, org.key)) == 1

        proxy.cut()  # for longer than the retry budget: until after the restart
        answered = [chat(first.url, org.key) for _ in range(20)]
        assert [r.status_code for r in answered] == [200] * 20
        if stop == "SIGKILL":  # once the spool holds them: a kill loses nothing fsync'd
            eventually(lambda: spooled_lines(spool) == 20, 30, "the records to be spooled", replicas)
            first.kill()
        else:  # at once: whatever is still in memory is spooled on the way out
            code = first.terminate()  # uvicorn re-raises the signal once it has shut down cleanly
            assert code in (0, -signal.SIGTERM) and "Application shutdown complete" in first.log(), code
        assert spooled_lines(spool) == 20

        proxy.restore()
        second = replicas.serve("second")
        ids = {r.headers["x-hatchway-request-id"] for r in answered}
        eventually(
            lambda: {r["id"] for r in records(second.url, org.key)} >= ids,
            30,
            "the spooled records to land",
            replicas,
        )
        assert len(records(second.url, org.key)) == 21
        eventually(
            lambda: spooled_lines(spool) == 0 and not list(spool.glob("*.jsonl")), 10, "an empty spool"
        )
        assert value(scrape(second), "hatchway_run_records_replayed_total") == 20
        assert value(scrape(second), "hatchway_run_records_dropped_total", reason="unreachable") == 0
    finally:
        replicas.stop()


# -- what is dropped is counted, and logged without its content --------------------------------------


def run_record(org_id: str, **values: Any) -> LogRecord:
    base = {"id": new_id("log"), "org_id": org_id, "route": "chat.completions", "status": "ok"}
    return LogRecord(**(base | {"http_status": 200, "latency_ms": 1.0} | values))


@pytest.mark.anyio
async def test_a_record_refused_even_cleaned_is_dropped_alone_counted_and_logged_without_content(
    pg_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(pg_database_url)
    await db.migrate()
    metrics = Metrics()
    writer = LogWriter(db, tally=metrics)
    writer.start()
    org = new_id("org")
    for _ in range(10):
        writer.submit(run_record(org))
    writer.submit(run_record(org, id=None, error="the content: card 4111 1111 1111 1111"))  # no id: refused
    await writer.flush()

    assert len(await RequestLogStore(db).list(org, LogQuery(limit=100))) == 10
    assert metrics.run_records_dropped.labels("refused")._value.get() == 1
    assert "run record None dropped: the database refused it, and again once cleaned" in caplog.text
    assert "4111" not in caplog.text
    await writer.close()
    await db.close()


@pytest.mark.anyio
async def test_a_full_spool_drops_and_counts_what_does_not_fit_and_keeps_the_rest(
    pg_database_url: str, proxy: OutageProxy, tmp_path: Path
) -> None:
    db = Database(proxy.url(pg_database_url))
    await db.migrate()
    metrics = Metrics()
    spool = RecordSpool(tmp_path, database_key(db.url), max_bytes=4096)
    writer = LogWriter(db, retry_seconds=0, spool=spool, tally=metrics)
    writer.start()
    org = new_id("org")
    proxy.cut()
    for _ in range(20):
        writer.submit(run_record(org))
    await writer.flush()  # spooled or dropped: nothing is waiting any more

    kept = metrics.run_records_spooled._value.get()
    assert 0 < kept < 20 and sum(len(p.read_bytes().splitlines()) for p in tmp_path.iterdir()) == kept
    assert metrics.run_records_dropped.labels("spool_full")._value.get() == 20 - kept
    proxy.restore()
    with anyio.fail_after(30):  # replayed by the next probe (rows first, then the count of them)
        while (
            len(await RequestLogStore(db).list(org, LogQuery(limit=100))) < kept
            or metrics.run_records_replayed._value.get() < kept
        ):
            await anyio.sleep(0.1)
    assert metrics.run_records_replayed._value.get() == kept
    await writer.close()
    await db.close()
