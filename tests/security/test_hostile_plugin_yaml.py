"""An inline plugin built to be expensive to parse is refused within bounds (LLM10 unbounded consumption).

Each hostile ``hatchway-mcp-plugin`` header is answered 400 ``invalid_plugin`` naming the limit it
passed — nesting depth, node count, Python's integer digits — quickly, for little of the server's CPU,
without delaying anyone else's request, and a repeat of it is answered without parsing it again.
Measured on ``hatchway serve`` as its own process: its CPU time, read from /proc.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.security.conftest import SharedGateway
from tests.support.agent_loop import USER
from tests.support.replicas import ServeProcess

HEADER = "hatchway-mcp-plugin"
TOO_DEEP = "nested deeper than 64 levels"


def brackets(n: int) -> str:
    """``agent: [[[…]]]``: PyYAML's pure-Python scanner costs about O(n × 1,024) on it."""
    return 'version: "1"\nagent: ' + "[" * n + "]" * n


def flat_list(n: int) -> str:
    """Valid YAML of ``n`` scalars, refused by validation only (an unknown key)."""
    return 'version: "1"\nagent: {max_rounds: 1}\nextra: [' + ",".join(["1"] * n) + "]"


HOSTILE = {
    "6,000 brackets (12 KB)": (brackets(6_000), TOO_DEEP),
    "16,000 brackets (32 KB)": (brackets(16_000), TOO_DEEP),
    "16,000 block sequences on one line": ('version: "1"\nagent:\n' + "- " * 16_000 + "1", TOO_DEEP),
    "100 indented mappings": ('version: "1"\n' + "".join(" " * i + "a:\n" for i in range(100)), TOO_DEEP),
    "15,000 scalars in one list": (flat_list(15_000), "more than 10,000 nodes"),
    "an integer of 5,000 digits": ('version: "1"\nagent:\n  max_rounds: ' + "9" * 5_000, "5000 digits"),
}


def encoded(text: str) -> str:
    assert len(text.encode()) <= 32 * 1024  # within the size limit: the other limits are what is tested
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def gateway(default_gateway: SharedGateway) -> tuple[ServeProcess, str]:
    return default_gateway.process, default_gateway.new_key()


def post_plugin(gateway: tuple[ServeProcess, str], text: str, timeout: float = 2.0) -> tuple[str, float]:
    """Send ``text`` as the inline plugin; the 400's message (asserting its code) and the seconds taken."""
    process, key = gateway
    started = time.monotonic()
    response = httpx.post(
        f"{process.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}", HEADER: encoded(text)},
        json={"model": "gpt-4o", "messages": USER},
        timeout=timeout,
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_plugin" and error["param"] == HEADER, error
    return error["message"], elapsed


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_header_is_a_400_naming_the_limit_it_passed(gateway, name: str) -> None:
    text, limit = HOSTILE[name]
    message, elapsed = post_plugin(gateway, text)
    assert limit in message and message.startswith(f"{HEADER} header: line "), message
    assert elapsed < 2.0, f"{name} took {elapsed:.2f}s to refuse"  # generous: the limits answer in ms


def healthz_during(url: str, work: Callable[[], None]) -> list[float]:
    """Run ``work`` in a thread while asking ``/healthz`` over and over; each answer's latency."""
    done = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    latencies = []
    thread = threading.Thread(target=run)
    with httpx.Client(base_url=url, timeout=5.0) as client:
        thread.start()
        while not latencies or not done.is_set():
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.monotonic() - started)
    thread.join()
    if failures:
        raise failures[0]
    return latencies


def test_hostile_headers_never_delay_another_request(gateway) -> None:
    process, _ = gateway
    messages = []

    def attack() -> None:
        for n in (6_000, 16_000):
            messages.append(post_plugin(gateway, brackets(n))[0])
        for n in range(8_000, 7_990, -1):  # the costliest to refuse (tens of ms each): built, then validated
            messages.append(post_plugin(gateway, flat_list(n))[0])

    latencies = healthz_during(process.url, attack)

    assert [TOO_DEEP in m for m in messages[:2]] == [True, True] and len(messages) == 12
    # /healthz answers in a few milliseconds; 0.5 s only absorbs a loaded test machine. A parse on the
    # event loop held every /healthz for its whole length (14.6 s for the 12 KB header).
    assert max(latencies) < 0.5, f"/healthz waited {max(latencies):.2f}s during the attack"


def test_five_32_kb_bombs_cost_the_server_little_cpu(gateway) -> None:
    process, _ = gateway
    before = process.cpu_seconds()
    for n in range(16_000, 15_995, -1):  # five distinct headers: a repeat would not be parsed again
        post_plugin(gateway, brackets(n))
    spent = process.cpu_seconds() - before
    # Each parse stops within its 100 ms CPU budget (in practice at level 65, in about 2 ms); 1 s for
    # five leaves room for the requests' own work, a slow machine and the clock's 10 ms ticks. Before
    # the limits, one such header cost the server some 40 s.
    assert spent < 1.0, f"five 32 KB bracket headers cost the server {spent:.2f}s of CPU"


def test_a_repeated_rejected_header_is_answered_without_parsing_it_again(gateway) -> None:
    process, _ = gateway
    # Valid YAML of 9,000 nodes, refused only once built and validated: the costliest rejection.
    repeated = flat_list(9_000)
    first, _ = post_plugin(gateway, repeated)

    before = process.cpu_seconds()
    for n in range(8_990, 8_975, -1):
        post_plugin(gateway, flat_list(n))
    fresh = process.cpu_seconds() - before
    before = process.cpu_seconds()
    repeats = [post_plugin(gateway, repeated)[0] for _ in range(15)]
    remembered = process.cpu_seconds() - before

    assert repeats == [first] * 15 and "extra: unknown key" in first
    # Fifteen repeats cost only their requests' own work; fifteen fresh headers add fifteen parses.
    assert remembered < fresh / 3, f"15 repeats cost {remembered:.2f}s of CPU, 15 fresh headers {fresh:.2f}s"


def test_a_plugin_with_thousands_of_problems_gets_a_short_answer(gateway) -> None:
    text = 'version: "1"\nmcp_servers:\n' + "".join(f"  - {{id: s{i}, url: bad}}\n" for i in range(1_000))
    message, _ = post_plugin(gateway, text)
    assert message.count("must be an http(s) URL") == 20 and message.endswith("and 980 more problems")
