"""The agent loop seen from outside: MCP tool rounds, a fan-out of parallel tools, hosted subagents.

Requests go one after the other (concurrency 1) to a scripted upstream whose every response takes
exactly the model latency, and MCP tools (official SDK) that take exactly the tool latency, so::

    gateway overhead = total − Σ model time − Σ tool time (tools of one round run in parallel)
    per tool round   = (overhead of N rounds − overhead of a plain chat) / N

Model time is the upstream's fixed latency; tool time is ``tools/call`` measured alone first, from
the official MCP client on an open session (p50): the MCP server's own cost (the SDK's streamable
HTTP server takes a few ms beyond its sleep) is not the gateway's.

- ``tools-N`` (N = 1, 3): N rounds of one MCP tool call, then an answer (N + 1 model calls);
- ``fanout-8``: one round of 8 calls of a 200 ms tool at once (ideal: the round takes 200 ms);
- ``agent:fan``: the parent asks for 8 hosted ``spawn_subagent`` calls at once; each child is one
  500 ms model call (ideal: the round takes 500 ms).

LiteLLM runs MCP tools from the Responses API (``{"type": "mcp", "server_url": "litellm_proxy"}``):
it executes the tool calls of the model's first response, makes one follow-up call and returns
that, whatever it asks for (so a second tool round comes back to the client unexecuted), and runs
the calls of a round one after the other. It has no hosted subagents.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from bench.common import summary


def litellm_mcp_tool(server: str) -> dict[str, str]:
    """LiteLLM's MCP gateway as a Responses API tool, narrowed to one of its ``mcp_servers`` (as a
    Hatchway plugin binds one server): ``litellm_proxy`` alone would list every server's tools."""
    return {
        "type": "mcp",
        "server_label": "litellm",
        "server_url": f"litellm_proxy/mcp/{server}",
        "require_approval": "never",
    }


@dataclass
class Latencies:
    model_ms: float
    tool_ms: float
    fan_tool_ms: float
    child_ms: float
    first_model_ms: float = 0.0
    """The model call measured alone from this bench's own client: the first call of a run is
    subtracted at this figure, so the bench client's cost (the same towards the gateway) cancels out;
    later calls are the gateway's own and are subtracted at the fixed ``model_ms``."""

    def first(self) -> float:
        return self.first_model_ms or self.model_ms


async def _mcp_calls(url: str, n: int) -> list[float]:
    from mcp import Client

    out = []
    async with Client(url) as client:
        for i in range(n + 5):
            started = time.perf_counter()
            await client.call_tool("lookup", {"q": "x"})
            if i >= 5:
                out.append((time.perf_counter() - started) * 1000)
    return out


def direct_times(model_url: str, mcp_url: str, n: int) -> dict[str, dict[str, float]]:
    """The model call alone (the scripted upstream, model ``plain``) and the MCP tool call alone."""
    import asyncio

    with httpx.Client(timeout=30) as client:
        model, _ = _timed(client, model_url, _chat("plain"), n, 10)
    return {"model_call": summary(model), "tool_call": summary(asyncio.run(_mcp_calls(mcp_url, n)))}


def _timed(client: httpx.Client, url: str, body: dict, n: int, warmup: int) -> tuple[list[float], dict]:
    out, last = [], {}
    for i in range(warmup + n):
        started = time.perf_counter()
        response = client.post(url, json=body)
        elapsed = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        last = response.json()
        if i >= warmup:
            out.append(elapsed)
    return out, last


def _overhead(samples: list[float], known_ms: float) -> dict[str, float]:
    return summary([s - known_ms for s in samples])


def _function_calls_left(response: dict) -> int:
    """Function calls a Responses API answer hands back to the client (not executed)."""
    return sum(1 for item in response.get("output", []) if item.get("type") == "function_call")


async def _interleaved(
    base: str, key: str, model_url: str, mcp_url: str, n: int, warmup: int = 10
) -> dict[str, list[float]]:
    """Each iteration times, back to back: the model call alone, the MCP tool call alone, then a
    plain chat, 1 tool round and 3 tool rounds through the gateway (aiohttp, one connection each).

    Interleaved because this 2-core machine drifts: measured in separate phases, the same build
    gave 1.3 to 3.9 ms per round from run to run; interleaved, every case sees the same machine.
    """
    import aiohttp
    from mcp import Client

    out: dict[str, list[float]] = {k: [] for k in ("model", "tool", "plain", "tools-1", "tools-3")}
    auth = {"authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as session, Client(mcp_url) as mcp:

        async def post(url: str, model: str, headers: dict[str, str]) -> float:
            started = time.perf_counter()
            async with session.post(url, json=_chat(model), headers=headers) as response:
                await response.read()
                response.raise_for_status()
            return (time.perf_counter() - started) * 1000

        for i in range(warmup + n):
            sample = {"model": await post(model_url, "plain", {})}
            started = time.perf_counter()
            await mcp.call_tool("lookup", {"q": "x"})
            sample["tool"] = (time.perf_counter() - started) * 1000
            for model in ("plain", "tools-1", "tools-3"):
                sample[model] = await post(f"{base}/v1/chat/completions", model, auth)
            if i >= warmup:
                for name, ms in sample.items():
                    out[name].append(ms)
    return out


def hatchway(
    base: str, key: str, lat: Latencies, n: int, fan_n: int, *, model_url: str, mcp_url: str
) -> dict[str, object]:
    import asyncio

    headers = {"authorization": f"Bearer {key}"}
    out: dict[str, object] = {}
    timed = asyncio.run(_interleaved(base, key, model_url, mcp_url, n))
    model_alone, tool_alone = summary(timed["model"])["p50"], summary(timed["tool"])["p50"]
    out["alone"] = {"model_call": summary(timed["model"]), "tool_call": summary(timed["tool"])}
    plain = timed["plain"]
    out["plain"] = {"total": summary(plain), "overhead": _overhead(plain, model_alone)}
    base_overhead = out["plain"]["overhead"]
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        for rounds in (1, 3):
            samples = timed[f"tools-{rounds}"]
            known = model_alone + rounds * (lat.model_ms + tool_alone)
            overhead = _overhead(samples, known)
            # what a tool round adds to a plain chat's overhead, per round
            out[f"tools_{rounds}"] = {
                "rounds": rounds,
                "total": summary(samples),
                "overhead": overhead,
                "per_round_p50": (overhead["p50"] - base_overhead["p50"]) / rounds,
                "per_round_p99": (overhead["p99"] - base_overhead["p50"]) / rounds,
            }
        # each further round: what 3 rounds cost beyond 1, per added round
        out["marginal_round_p50"] = (
            out["tools_3"]["overhead"]["p50"] - out["tools_1"]["overhead"]["p50"]
        ) / 2
        samples, _ = _timed(client, "/v1/responses", _responses("tools-1"), n, 10)
        out["responses_tools_1"] = {
            "total": summary(samples),
            "overhead": _overhead(samples, lat.first() + lat.model_ms + lat.tool_ms),
        }
        samples, _ = _timed(client, "/v1/chat/completions", _chat("fanout-8"), fan_n, 2)
        out["fanout_8"] = _round_wall(samples, lat, lat.fan_tool_ms)
        samples, last = _timed(client, "/v1/responses", {"model": "agent:fan", "input": "fan out"}, fan_n, 2)
        calls = [i for i in last.get("output", []) if i.get("name") == "spawn_subagent"]
        out["subagents_8"] = {**_round_wall(samples, lat, lat.child_ms), "children": len(calls)}
    return out


def litellm(base: str, key: str, lat: Latencies, n: int, fan_n: int) -> dict[str, object]:
    headers = {"authorization": f"Bearer {key}"}
    out: dict[str, object] = {}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        samples, _ = _timed(client, "/v1/responses", _responses("plain"), n, 10)
        out["plain_responses"] = {"total": summary(samples), "overhead": _overhead(samples, lat.first())}
        samples, last = _timed(client, "/v1/responses", _responses("tools-1", mcp="bench"), n, 10)
        out["responses_tools_1"] = {
            "total": summary(samples),
            "overhead": _overhead(samples, lat.first() + lat.model_ms + lat.tool_ms),
            "per_round_p50": summary(samples)["p50"]
            - (lat.first() + lat.model_ms + lat.tool_ms)
            - out["plain_responses"]["overhead"]["p50"],
            "unexecuted_calls_returned": _function_calls_left(last),
        }
        response = client.post("/v1/responses", json=_responses("tools-3", mcp="bench"))
        left = _function_calls_left(response.json()) if response.status_code == 200 else None
        out["responses_tools_3"] = {
            "supported": response.status_code == 200 and left == 0,
            "status": response.status_code,
            "unexecuted_calls_returned": left,
            "note": "runs one tool round, then returns the model's next tool call to the client unexecuted",
        }
        fanout = _responses("fanout-8", mcp="fan")
        samples, last = _timed(client, "/v1/responses", fanout, min(fan_n, 5), 1)
        executed = _executed_results(last)
        out["fanout_8"] = {**_round_wall(samples, lat, lat.fan_tool_ms), "tools_executed": executed}
    out["subagents_8"] = {"supported": False, "note": "no hosted subagents"}
    return out


def _executed_results(response: dict) -> int:
    """How many tool results LiteLLM reports in its ``tool_execution_results`` output item."""
    import json

    for item in response.get("output", []):
        if item.get("type") == "tool_execution_results":
            try:
                return len(json.loads(item["content"][0]["text"]))
            except (KeyError, IndexError, ValueError):
                return -1
    return 0


def _round_wall(samples: list[float], lat: Latencies, ideal_ms: float) -> dict[str, object]:
    """The fan-out round's wall time: total − the two model calls around it."""
    wall = summary([s - lat.first() - lat.model_ms for s in samples])
    return {"total": summary(samples), "round_wall": wall, "ideal_ms": ideal_ms}


def _chat(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "look it up"}]}


def _responses(model: str, *, mcp: str | None = None) -> dict:
    body: dict = {"model": model, "input": "look it up"}
    if mcp:
        body["tools"] = [litellm_mcp_tool(mcp)]
    return body
