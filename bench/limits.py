"""What ``limits:`` costs on the pass-through hot path: ``Limiter.admit`` + ``Limiter.settle`` in
process, then the latency it adds to a pass-through chat completion at concurrency 1.

    python -m bench.limits [--iterations 3000] [--requests 750] [--latency-ms 20] [--no-redis]

1. Micro, in process, concurrency 1: ``await limiter.admit(Requester(...), reserve_tokens=...)``
   then ``await limiter.settle(admission, tokens, cost)``, timed call by call, for: no limits; in
   process with ``requests_per_minute``, ``tokens_per_minute`` and ``concurrent_runs`` at key
   (``keys."*"``) and organisation (``defaults``) scope, amounts so large nothing is refused; the
   same on Redis (its own key prefix, its keys deleted after); and in process with
   ``budget_usd_per_day`` at both scopes too (a seed returning 0.0, as if the request log were
   empty). Between two calls the event loop idles ``--gap-ms`` (as a server's does between two
   requests), outside the timed part; the CPU per request is measured over the whole loop with
   every thread of the process (Redis's own CPU is not counted).
2. End to end: a fixed-latency upstream and, each its own ``hatchway serve`` (one worker, SQLite),
   a gateway without ``limits:``, one with the limits above in process, and, with Redis, one with
   ``redis_url`` and no limits and one with ``redis_url`` and the limits (so the Redis pair differs
   by the limits only). Requests go one after the other (concurrency 1), one to each gateway in
   turn, each on its own keep-alive connection, so a drift of the machine's speed falls on all of
   them alike; the added p50 is the p50 of all of a gateway's requests minus its baseline's,
   printed with the range of the same difference over ``--rounds`` consecutive blocks (the noise).

Prints both tables and the target (≤ 0.1 ms p50 added at concurrency 1 in process); writes nothing
unless ``--json PATH``. About 100 s at the defaults on 2 cores. The Redis is ``--redis-url``
(``HATCHWAY_TEST_REDIS_URL``, else redis://127.0.0.1:6379/0); when it does not answer, its rows are
skipped.
Run it as a module (``python -m bench.limits``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import passthrough_settings, percentile
from bench.passthrough import BODY
from bench.stack import Server, Stack, running, start_serve, start_upstream
from hatchway.config.settings import LimitsSettings, LimitValues
from hatchway.limits.limiter import Limiter
from hatchway.limits.scopes import Requester, reserved_tokens
from hatchway.principal import Principal

TARGET_MS = 0.1
"""Added p50 at concurrency 1 with the limits in process, end to end."""
HUGE = 1_000_000_000
"""Every count limit's amount: never reached, so nothing is refused."""
HUGE_USD = 1e9
USED_TOKENS = 11
"""What the bench upstream's completion reports (10 prompt + 1 completion): under the reservation,
so ``settle`` hits no window (as for most requests, whose body over-estimates their input)."""
COST_USD = 0.0001
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def limit_values(budget: bool = False) -> LimitValues:
    return LimitValues(
        requests_per_minute=HUGE,
        tokens_per_minute=HUGE,
        concurrent_runs=HUGE,
        budget_usd_per_day=HUGE_USD if budget else None,
    )


def limits_settings(budget: bool = False) -> LimitsSettings:
    """The three limits at key scope (every key) and organisation scope (every organisation)."""
    values = limit_values(budget)
    return LimitsSettings(defaults=values, keys={"*": values})


# -- 1. micro: admit + settle ---------------------------------------------------------------------


@dataclass
class Case:
    name: str
    make: Callable[[], Awaitable[tuple[Limiter, Callable[[], Awaitable[None]]]]]
    """A limiter and what to do when done with it (close it, delete its Redis keys)."""


async def _memory(settings: LimitsSettings, **kwargs: Any) -> tuple[Limiter, Callable[[], Awaitable[None]]]:
    limiter = Limiter(settings, **kwargs)
    return limiter, limiter.close


async def _no_spend(_limit: Any, _since: Any) -> float:
    return 0.0


async def _redis(url: str) -> tuple[Limiter, Callable[[], Awaitable[None]]]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    prefix = f"hatchway-bench-limits-{uuid.uuid4().hex[:8]}:"
    limiter = Limiter(limits_settings(), redis=client, prefix=prefix)

    async def done() -> None:
        try:
            await delete_keys(client, prefix)
        finally:
            await limiter.close()

    return limiter, done


async def delete_keys(client: Any, prefix: str) -> int:
    """Every key holding ``prefix`` (the limiter's, and the job queue's ``saq:<prefix>responses…``)."""
    keys = [key async for key in client.scan_iter(match=f"*{prefix}*", count=1000)]
    if keys:
        await client.delete(*keys)
    return len(keys)


async def redis_answers(url: str) -> str | None:
    """None when Redis at ``url`` answers a PING, else why not."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        await client.ping()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await client.aclose()


def micro_cases(redis_url: str | None) -> list[Case]:
    cases = [
        Case("no limits", lambda: _memory(LimitsSettings())),
        Case("in process", lambda: _memory(limits_settings())),
    ]
    if redis_url:
        cases.append(Case("Redis", lambda: _redis(redis_url)))
    cases.append(
        Case("in process + budget", lambda: _memory(limits_settings(budget=True), spent_since=_no_spend))
    )
    return cases


@dataclass
class Samples:
    admit: list[float]
    settle: list[float]
    total: list[float]
    cpu_s: float = 0.0


async def _calls(limiter: Limiter, who: Requester, reserve: int, n: int, gap_s: float, into: Samples) -> None:
    clock = time.perf_counter_ns
    cpu = time.process_time()  # every thread of this process: the memory storage's expiry too
    for _ in range(n):
        t0 = clock()
        admission = await limiter.admit(who, reserve_tokens=reserve)
        t1 = clock()
        await limiter.settle(admission, USED_TOKENS, COST_USD)
        t2 = clock()
        into.admit.append((t1 - t0) / 1000)
        into.settle.append((t2 - t1) / 1000)
        into.total.append((t2 - t0) / 1000)
        await asyncio.sleep(gap_s)
    into.cpu_s += time.process_time() - cpu


async def micro(iterations: int, rounds: int, gap_ms: float, warmup: int, redis_url: str | None) -> dict:
    """Each case ``iterations`` admit + settle calls, in ``rounds`` turns across the cases."""
    who = Requester(Principal(org_id="org_bench", org_name="bench", key_id="key_bench", key_name="bench"))
    reserve = reserved_tokens(None, len(BODY))
    cases = micro_cases(redis_url)
    limiters: dict[str, tuple[Limiter, Callable[[], Awaitable[None]]]] = {}
    samples = {c.name: Samples([], [], []) for c in cases}
    per_round = max(1, iterations // rounds)
    try:
        for case in cases:
            limiters[case.name] = await case.make()
            await _calls(limiters[case.name][0], who, reserve, warmup, gap_ms / 1000, Samples([], [], []))
        for r in range(rounds):
            order = cases[r % len(cases) :] + cases[: r % len(cases)]
            for case in order:
                await _calls(
                    limiters[case.name][0], who, reserve, per_round, gap_ms / 1000, samples[case.name]
                )
    finally:
        for _, done in limiters.values():
            await done()
    out: dict[str, Any] = {
        "iterations": per_round * rounds,
        "rounds": rounds,
        "gap_ms": gap_ms,
        "reserve_tokens": reserve,
        "used_tokens": USED_TOKENS,
        "cost_usd": COST_USD,
        "window_entries_at_end": warmup + per_round * rounds,
        "cases": {},
    }
    for name, s in samples.items():
        n = len(s.total)
        out["cases"][name] = {
            "admit_p50_us": percentile(s.admit, 50),
            "settle_p50_us": percentile(s.settle, 50),
            "p50_us": percentile(s.total, 50),
            "p99_us": percentile(s.total, 99),
            "mean_us": statistics.fmean(s.total),
            "cpu_us_per_call": s.cpu_s / n * 1e6,
        }
    base = out["cases"]["no limits"]["cpu_us_per_call"]
    for figures in out["cases"].values():
        figures["cpu_us_added"] = figures["cpu_us_per_call"] - base
    return out


def print_micro(result: dict) -> None:
    print(
        f"1. Limiter.admit + settle, concurrency 1, {result['iterations']} calls per row in "
        f"{result['rounds']} rounds, loop idle {result['gap_ms']:g} ms between calls "
        f"(reserve {result['reserve_tokens']}, used {result['used_tokens']} tokens; "
        f"{result['window_entries_at_end']} requests in the window at the end)"
    )
    print(
        f"{'limits':<21} {'admit p50':>9} {'settle p50':>10} {'p50 µs':>8} {'p99 µs':>8} "
        f"{'CPU µs/call':>11} {'CPU added':>9}"
    )
    for name, c in result["cases"].items():
        print(
            f"{name:<21} {c['admit_p50_us']:>9.1f} {c['settle_p50_us']:>10.1f} {c['p50_us']:>8.1f} "
            f"{c['p99_us']:>8.1f} {c['cpu_us_per_call']:>11.1f} {c['cpu_us_added']:>9.1f}"
        )
    print(
        "  CPU: the whole loop's (idle gaps included, hence the no-limits row), every thread of this "
        "process; not Redis's own"
    )


# -- 2. end to end --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gateway:
    name: str
    baseline: str | None
    """The gateway it is compared with (None: it is a baseline)."""
    limits: bool
    redis: bool


def gateways(redis: bool) -> list[Gateway]:
    out = [Gateway("no limits", None, False, False), Gateway("in process", "no limits", True, False)]
    if redis:
        out += [
            Gateway("Redis, no limits", None, False, True),
            Gateway("Redis", "Redis, no limits", True, True),
        ]
    return out


def start_gateway(stack: Stack, gw: Gateway, upstream: Server, redis_url: str | None, prefix: str) -> str:
    """``hatchway serve`` for ``gw``; returns its API key."""
    config = passthrough_settings("", upstream.base)
    del config["database_url"]  # its own SQLite (``start_serve``)
    if gw.limits:
        config["limits"] = limits_settings().model_dump(exclude_none=True)
    if gw.redis:
        config |= {"redis_url": redis_url, "redis_prefix": prefix}
    return start_serve(stack, gw.name, config)


def _check_limited(url: str, headers: dict[str, str], limited: bool) -> None:
    """The limits are applied where configured (OpenAI's rate-limit headers), and only there."""
    response = httpx.post(url, content=BODY, headers=headers, timeout=30.0)
    response.raise_for_status()
    has = "x-ratelimit-limit-requests" in response.headers
    if has != limited:
        raise RuntimeError(f"{url}: x-ratelimit headers {'missing' if limited else 'present'}")


def end_to_end(requests: int, rounds: int, latency_ms: float, redis_url: str | None) -> dict:
    prefix = f"hatchway-bench-limits-{uuid.uuid4().hex[:8]}:"
    gws = gateways(redis_url is not None)
    per_round = max(1, requests // rounds)
    try:
        with tempfile.TemporaryDirectory(prefix="hatchway-bench-") as tmp, running(Path(tmp)) as stack:
            upstream = start_upstream(stack, "upstream", latency_ms)
            targets: dict[str, tuple[str, dict[str, str]]] = {}
            for gw in gws:
                key = start_gateway(stack, gw, upstream, redis_url, prefix)
                url = f"{stack.servers[gw.name].base}/v1/chat/completions"
                headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
                _check_limited(url, headers, gw.limits)
                targets[gw.name] = (url, headers)
            samples = asyncio.run(interleaved(targets, per_round * rounds, warmup=50))
    finally:
        if redis_url is not None:
            asyncio.run(_delete_all(redis_url, prefix))
    out: dict[str, Any] = {
        "requests": per_round * rounds,
        "rounds": rounds,
        "upstream_latency_ms": latency_ms,
        "gateways": {},
    }
    for gw in gws:
        s = samples[gw.name]
        round_p50 = [percentile(s[i : i + per_round], 50) for i in range(0, len(s), per_round)]
        figures: dict[str, Any] = {
            "p50_ms": percentile(s, 50),
            "p90_ms": percentile(s, 90),
            "p99_ms": percentile(s, 99),
            "mean_ms": statistics.fmean(s),
            "round_p50_ms": round_p50,
        }
        if gw.baseline is not None:
            base = out["gateways"][gw.baseline]
            figures["baseline"] = gw.baseline
            figures["added_p50_ms"] = figures["p50_ms"] - base["p50_ms"]
            figures["added_p99_ms"] = figures["p99_ms"] - base["p99_ms"]
            figures["round_added_p50_ms"] = [
                a - b for a, b in zip(round_p50, base["round_p50_ms"], strict=True)
            ]
        out["gateways"][gw.name] = figures
    return out


Target = tuple[str, dict[str, str]] | tuple[str, dict[str, str], bytes]
"""(url, headers) of a target, and the body posted to it when it is not ``BODY``."""


async def interleaved(targets: dict[str, Target], n: int, warmup: int) -> dict[str, list[float]]:
    """Concurrency 1 across all the gateways: one request to each in turn (the first of each turn
    moving along), ``n`` each, each gateway on its own keep-alive connection; latencies in ms. Turns
    this short spread any drift of the machine's speed evenly over the gateways."""
    names = list(targets)
    out: dict[str, list[float]] = {name: [] for name in names}
    clients = {name: httpx.AsyncClient(timeout=30.0) for name in names}
    bodies = {name: target[2] if len(target) > 2 else BODY for name, target in targets.items()}
    try:
        for name in names:
            url, headers = targets[name][0], targets[name][1]
            for _ in range(warmup):
                (await clients[name].post(url, content=bodies[name], headers=headers)).raise_for_status()
        for i in range(n):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                url, headers = targets[name][0], targets[name][1]
                started = time.perf_counter()
                response = await clients[name].post(url, content=bodies[name], headers=headers)
                out[name].append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
    finally:
        for client in clients.values():
            await client.aclose()
    return out


async def _delete_all(url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await delete_keys(client, prefix)
    finally:
        await client.aclose()


def print_end_to_end(result: dict) -> None:
    print(
        f"2. POST /v1/chat/completions pass-through, concurrency 1, {result['requests']} requests per "
        f"gateway, one to each in turn, upstream latency {result['upstream_latency_ms']:g} ms"
    )
    print(
        f"{'gateway':<17} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7}  {'added p50':>9} "
        f"{'(blocks: min … max)':>21} {'added p99':>9}  vs"
    )
    for name, g in result["gateways"].items():
        line = f"{name:<17} {g['p50_ms']:>7.2f} {g['p90_ms']:>7.2f} {g['p99_ms']:>7.2f}"
        if "added_p50_ms" in g:
            rounds = g["round_added_p50_ms"]
            spread = f"({min(rounds):+.2f} … {max(rounds):+.2f})"
            line += f"  {g['added_p50_ms']:>+9.3f} {spread:>21} {g['added_p99_ms']:>+9.2f}  {g['baseline']}"
        print(line)


def judge(result: dict) -> dict[str, Any]:
    added = result["gateways"]["in process"]["added_p50_ms"]
    return {
        "target": f"limits in process add ≤ {TARGET_MS:g} ms p50 at concurrency 1 (end to end)",
        "measured": f"{added:+.3f} ms",
        "pass": added <= TARGET_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.limits",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--iterations", type=int, default=3000, help="micro: admit + settle calls per row")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="micro: loop idle between calls")
    parser.add_argument("--requests", type=int, default=750, help="end to end: requests per gateway")
    parser.add_argument(
        "--rounds", type=int, default=5, help="micro: turns across the rows; end to end: blocks for the noise"
    )
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the upstream's latency")
    parser.add_argument("--redis-url", default=os.environ.get("HATCHWAY_TEST_REDIS_URL") or DEFAULT_REDIS)
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis rows")
    parser.add_argument("--skip-micro", action="store_true", help="the end-to-end benchmark only")
    parser.add_argument("--skip-end-to-end", action="store_true", help="the micro benchmark only")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args()

    started = time.monotonic()
    redis_url: str | None = None if args.no_redis else args.redis_url
    if redis_url is not None and (why := asyncio.run(redis_answers(redis_url))) is not None:
        print(f"Redis at {redis_url} does not answer ({why}): no Redis rows")
        redis_url = None
    results: dict[str, Any] = {"redis": redis_url is not None}
    if not args.skip_micro:
        results["micro"] = asyncio.run(micro(args.iterations, args.rounds, args.gap_ms, 200, redis_url))
        print_micro(results["micro"])
        print()
    if not args.skip_end_to_end:
        results["end_to_end"] = end_to_end(args.requests, args.rounds, args.latency_ms, redis_url)
        print_end_to_end(results["end_to_end"])
        results["target"] = verdict = judge(results["end_to_end"])
        print()
        print(f"{'PASS' if verdict['pass'] else 'FAIL'}  {verdict['target']}: {verdict['measured']}")
    results["duration_s"] = time.monotonic() - started
    print(f"total {results['duration_s']:.0f} s")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"written: {args.json}")


if __name__ == "__main__":
    main()
