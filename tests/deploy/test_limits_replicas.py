"""``limits:`` across two real ``hatchway serve`` replicas behind one address (deploy/nginx), on one
PostgreSQL and one Redis, with a ``hatchway worker`` for background responses: every count is one
count whichever replica a request lands on, and the official client's retries honour Retry-After.

Limits are set as an operator sets them, with ``hatchway limits set`` on the shared database.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.deploy.test_nginx import NGINX, needs_nginx, nginx_files
from tests.support import cli
from tests.support.backends import PG_URL, REDIS_URL
from tests.support.gateway import OrgKey, create_org_key
from tests.support.replicas import Replicas, eventually, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import answers_healthz, free_port, wait_until

WINDOW = 5
"""limits.window_seconds: the "minute" of the per-minute limits, short so a retry waits seconds."""
PRICED = [
    {
        "name": "gpt-4o",
        "provider": "upstream",
        "upstream_model": "gpt-4o-2024",
        "price": {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000},  # 1 USD per token
    }
]
LIMITS = {
    "rpm": ["requests_per_minute=10"],
    "tpm": ["tokens_per_minute=100"],
    "conc": ["concurrent_runs=1"],
    "budget": ["budget_usd_per_day=20"],  # a call is 11 + 7 tokens: 18 USD
    "bg": ["concurrent_background_runs=1"],
    "retry": ["requests_per_minute=1"],
}
USER = [{"role": "user", "content": "hi"}]


def _refusal(call: Any) -> openai.RateLimitError | None:
    try:
        call()
    except openai.RateLimitError as exc:
        return exc
    return None


@needs_nginx
@pytest.mark.redis
@pytest.mark.skipif(
    not (PG_URL and REDIS_URL), reason="needs HATCHWAY_TEST_DATABASE_URL and HATCHWAY_TEST_REDIS_URL"
)
def test_limits_hold_across_two_replicas_behind_one_address(
    tmp_path: Path, pg_database_url: str, llm: ScriptedLLM
) -> None:
    prefix = unique_redis_prefix()
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        models=PRICED,
        limits={"window_seconds": WINDOW, "refresh_seconds": 0.5},
    )
    replicas = Replicas(tmp_path, config)
    run = "-".join(uuid.uuid4().hex[:6] for _ in range(1))
    orgs: dict[str, OrgKey] = {
        name: asyncio.run(create_org_key(pg_database_url, f"{name}-{run}")) for name in [*LIMITS, "calm"]
    }
    for name, values in LIMITS.items():  # as the operator sets them: on the database the replicas share
        done = cli.run(
            ["limits", "set", "--org", orgs[name].org_name, *values, "--config", str(replicas.config_path)],
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
    nginx: subprocess.Popen[bytes] | None = None
    nginx_log = (tmp_path / "nginx.log").open("wb")
    clients: list[openai.OpenAI] = []

    def client(org: str, **options: Any) -> openai.OpenAI:
        options.setdefault("max_retries", 0)
        made = openai.OpenAI(base_url=f"{front}/v1", api_key=orgs[org].key, timeout=60, **options)
        clients.append(made)
        return made

    def chat(c: openai.OpenAI, **kwargs: Any) -> Any:
        return c.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER, **kwargs)

    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        replicas.worker("w")
        listen = free_port()
        run_dir, main = nginx_files(tmp_path, listen, [a.port, b.port])
        nginx = subprocess.Popen(
            [NGINX, "-p", str(run_dir), "-c", str(main), "-e", "stderr"], stderr=nginx_log
        )
        front = f"http://127.0.0.1:{listen}"
        wait_until(lambda: answers_healthz(front), timeout=120, interval=0.1, message="nginx to answer")
        llm.default = Reply(text="ok")

        # 10 requests per minute: 10 admitted (±0) whichever replica each lands on, the 11th refused.
        rpm = client("rpm")
        served_before = {r.name: _chat_requests(r.url) for r in (a, b)}
        answers = [chat(rpm) for _ in range(10)]
        assert [h.headers["x-ratelimit-remaining-requests"] for h in answers] == [
            str(9 - i) for i in range(10)
        ]
        refused = _refusal(lambda: chat(rpm))
        assert refused is not None and refused.code == "rate_limit_exceeded", replicas.logs()
        assert refused.param == f"limits.organisations.{orgs['rpm'].org_name}.requests_per_minute"
        assert 1 <= int(refused.response.headers["retry-after"]) <= WINDOW
        assert refused.response.headers["x-ratelimit-limit-requests"] == "10"
        assert refused.response.headers["x-ratelimit-remaining-requests"] == "0"
        for replica in (a, b):  # nginx sent requests to both replicas
            assert _chat_requests(replica.url) - served_before[replica.name] >= 3, replica.name

        # One organisation at its limit does not slow another: while rpm is refused over and over,
        # calm's requests are all answered, from their own count.
        stop = threading.Event()
        hammer = threading.Thread(
            target=lambda: [_refusal(lambda: chat(rpm)) for _ in iter(stop.is_set, True)]
        )
        hammer.start()
        try:
            calm = client("calm")
            calm_answers = [chat(calm).parse().choices[0].message.content for _ in range(10)]
        finally:
            stop.set()
            hammer.join(timeout=30)
        assert calm_answers == ["ok"] * 10

        # Tokens per minute: a request reserves max_tokens plus its input (then what it used, 18,
        # is counted); the next, whose reservation does not fit beside them, is refused.
        tpm = client("tpm")
        assert chat(tpm, max_tokens=60).headers["x-ratelimit-limit-tokens"] == "100"
        refused = _refusal(lambda: chat(tpm, max_tokens=90))
        assert refused is not None and refused.code == "tokens_limit_exceeded"
        assert (
            "x-ratelimit-remaining-tokens" in refused.response.headers
            or refused.response.headers["retry-after"]
        )

        # One run at a time: held on one replica, refused on whichever the next lands on.
        conc = client("conc")
        gate = threading.Event()
        llm.reply("held", gate=gate)
        held = threading.Thread(target=lambda: chat(conc))
        upstream_calls = len(llm.requests)
        held.start()
        try:
            eventually(lambda: len(llm.requests) > upstream_calls, 20, "the held run", replicas)
            for _ in range(2):  # round-robin: both replicas see the slot taken
                refused = _refusal(lambda: chat(conc))
                assert refused is not None and refused.code == "concurrency_limit_exceeded"
        finally:
            gate.set()
            held.join(timeout=30)
        eventually(lambda: _refusal(lambda: chat(conc)) is None, 20, "the slot to be free", replicas)

        # A daily budget: 18 USD a call against 20; the third call is refused, on either replica.
        budget = client("budget")
        chat(budget)
        chat(budget)
        refused = eventually(lambda: _refusal(lambda: chat(budget)), 20, "the budget to be spent", replicas)
        assert refused.code == "budget_exceeded"
        assert "x-hatchway-budget-reset" in refused.response.headers
        assert _refusal(lambda: chat(budget)).code == "budget_exceeded"  # the other replica too

        # Background responses: queued on one replica, run by the worker, hold their slot until
        # the worker ends them — a second is refused meanwhile, wherever it is sent.
        bg = client("bg")
        gate = threading.Event()
        llm.reply("background, held", gate=gate)
        first = bg.responses.create(model="gpt-4o", input="long", background=True)
        try:
            for _ in range(2):
                refused = _refusal(lambda: bg.responses.create(model="gpt-4o", input="more", background=True))
                assert refused is not None and refused.code == "concurrency_limit_exceeded", replicas.logs()
        finally:
            gate.set()
        eventually(lambda: bg.responses.retrieve(first.id).status == "completed", 60, "the first", replicas)
        second = eventually(
            lambda: (
                _refusal(lambda: bg.responses.create(model="gpt-4o", input="next", background=True)) is None
            ),
            20,
            "the worker to give the slot back",
            replicas,
        )
        assert second

        # The official client, with retries, honours Retry-After and succeeds once the window slides.
        statuses: list[int] = []
        hooks = {"response": [lambda response: statuses.append(response.status_code)]}
        retrying = client("retry", max_retries=3, http_client=httpx.Client(event_hooks=hooks))
        chat(retrying)  # the one request of the window
        started = time.monotonic()
        answer = chat(retrying).parse()
        waited = time.monotonic() - started
        assert answer.choices[0].message.content == "ok"
        assert statuses[0] == 200 and statuses[1:][-1] == 200 and 429 in statuses[1:], statuses
        assert waited >= 1.0  # it waited as Retry-After said, not the SDK's sub-second backoff
    finally:
        for made in clients:
            made.close()
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        nginx_log.close()
        replicas.stop()
        purge_redis(REDIS_URL, prefix)


def _chat_requests(url: str) -> float:
    from tests.deploy.test_nginx import _requests_served

    return _requests_served(httpx.get(f"{url}/metrics").text, "/v1/chat/completions")
