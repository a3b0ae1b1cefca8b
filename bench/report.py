"""The results of `make bench`: the performance targets judged, a Markdown report, PNG charts, JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TARGETS = ("direct", "hatchway", "litellm")
LOADS = ("c1", "c16", "c64", "rate")


def added_latency(load: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """target → load → {p50, p99}: its latency minus the direct one under the same load."""
    direct = load.get("direct", {})
    out: dict[str, dict[str, dict[str, float]]] = {}
    for target, runs in load.items():
        if target == "direct":
            continue
        out[target] = {
            name: {q: run[q] - direct[name][q] for q in ("p50", "p90", "p99")}
            for name, run in runs.items()
            if name in direct
        }
    return out


def _check(name: str, ok: bool | None, shown: str) -> dict[str, Any]:
    return {"target": name, "pass": ok, "measured": shown}


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One line per performance target (added latency, throughput and memory against LiteLLM, idle
    gaps, the agent loop's overhead); ``pass`` is None where it could not be measured."""
    load, added, rss = results["load"], results["added"], results["rss_mib"]
    agentic, idle = results.get("agentic", {}), results.get("idle", {})
    hw, ll = load.get("hatchway", {}), load.get("litellm", {})
    checks = []
    a = added.get("hatchway", {}).get("c1", {}).get("p50")
    checks.append(
        _check("added p50 ≤ 1 ms at c=1", None if a is None else a <= 1.0, f"{a:.2f} ms" if a else "-")
    )
    if "c64" in hw and "c64" in ll:
        ratio = hw["c64"]["rps"] / ll["c64"]["rps"]
        ok = ratio >= 10 and hw["c64"]["p99"] < ll["c64"]["p99"]
        shown = f"{ratio:.1f}× req/s; p99 {hw['c64']['p99']:.1f} vs {ll['c64']['p99']:.1f} ms"
        checks.append(_check("≥ 10× LiteLLM req/s at c=64, lower p99", ok, shown))
    else:
        checks.append(_check("≥ 10× LiteLLM req/s at c=64, lower p99", None, "LiteLLM not run"))
    if rss.get("litellm") and rss.get("hatchway"):
        ratio = rss["hatchway"] / rss["litellm"]
        shown = f"{rss['hatchway']:.0f} vs {rss['litellm']:.0f} MiB ({ratio:.2f}×)"
        checks.append(_check("peak RSS ≤ ⅓ of LiteLLM's", ratio <= 1 / 3, shown))
    else:
        checks.append(_check("peak RSS ≤ ⅓ of LiteLLM's", None, "LiteLLM not run"))
    if "hatchway" in idle:
        h5 = idle["hatchway"]["5xx"]
        shown = f"Hatchway {h5} of {idle['hatchway']['requests']}"
        if "litellm" in idle:
            shown += f" (LiteLLM {idle['litellm']['5xx']} of {idle['litellm']['requests']})"
        checks.append(_check("0 5xx after idle gaps", h5 == 0, shown))
    hagent = agentic.get("hatchway", {})
    if hagent:
        per = max(hagent["tools_1"]["per_round_p50"], hagent["tools_3"]["per_round_p50"])
        shown = (
            f"{hagent['tools_1']['per_round_p50']:.2f} ms (1 round), "
            f"{hagent['tools_3']['per_round_p50']:.2f} ms (3 rounds), p50, "
            "beyond a plain chat's overhead, per round; "
            f"each further round {hagent['marginal_round_p50']:.2f} ms"
        )
        checks.append(_check("≤ 3 ms gateway overhead per tool round", per <= 3.0, shown))
        fan = hagent["fanout_8"]["round_wall"]["p50"]
        checks.append(_check("8 × 200 ms tools in ≤ 260 ms", fan <= 260, f"{fan:.1f} ms p50 (ideal 200)"))
        sub = hagent["subagents_8"]["round_wall"]["p50"]
        checks.append(_check("8 × 500 ms subagents in ≤ 650 ms", sub <= 650, f"{sub:.1f} ms p50 (ideal 500)"))
    return checks


# -- Markdown ------------------------------------------------------------------------------------


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _load_table(results: dict[str, Any]) -> list[str]:
    s = results["settings"]
    lines = [
        f"Pass-through chat completion (non-streaming), upstream latency {s['latency_ms']:g} ms, "
        f"closed loop: wrk 1 thread, {s['seconds']:g} s per run; fixed rate: {s['rate']:g} req/s open loop "
        f"(Python/aiohttp generator, latency from the scheduled send time), {s['rate_seconds']:g} s.",
        "",
        _row(
            [
                "target",
                "load",
                "req/s",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "added p50",
                "added p99",
                "non-2xx",
                "socket err",
            ]
        ),
        _row(["---"] * 2 + ["---:"] * 8),
    ]
    for target in TARGETS:
        runs = results["load"].get(target, {})
        added = results["added"].get(target, {})
        for name in LOADS:
            if name not in runs:
                continue
            r = runs[name]
            ad = added.get(name)
            label = f"{s['rate']:g} req/s" if name == "rate" else f"c={name[1:]}"
            lines.append(
                _row(
                    [
                        target,
                        label,
                        f"{r['rps']:.0f}",
                        f"{r['p50']:.2f}",
                        f"{r['p90']:.2f}",
                        f"{r['p99']:.2f}",
                        f"{ad['p50']:+.2f}" if ad else "",
                        f"{ad['p99']:+.2f}" if ad else "",
                        str(r["non_2xx"]),
                        str(r["socket_errors"]),
                    ]
                )
            )
    return lines


def _resources(results: dict[str, Any]) -> list[str]:
    lines = [
        _row(["process", "peak RSS (VmHWM) MiB", "CPU ms per request at c=64"]),
        _row(["---", "---:", "---:"]),
    ]
    for name, mib in results["rss_mib"].items():
        cpu = results.get("cpu_ms_per_request", {}).get(name)
        lines.append(_row([name, f"{mib:.0f}", f"{cpu:.2f}" if cpu is not None else ""]))
    return lines


def _agentic_table(results: dict[str, Any]) -> list[str]:
    agentic = results.get("agentic", {})
    if not agentic:
        return []
    s = results["settings"]
    direct = results.get("agentic_direct", {})
    measured = ""
    if direct:
        measured = (
            f" Measured alone (p50): model call {direct['model_call']['p50']:.2f} ms (the bench's client; "
            f"subtracted for a run's first model call, the fixed {s['model_latency_ms']:g} ms for the "
            f"gateway's later calls), MCP tools/call "
            f"{direct['tool_call']['p50']:.2f} ms (official client, open session; subtracted as tool time)."
        )
    alone = agentic.get("hatchway", {}).get("alone")
    if alone:
        measured += (
            f" Hatchway's chat rows are measured interleaved (each iteration: model call alone, tool call "
            f"alone, plain, 1 round, 3 rounds; aiohttp client), against their own alone figures: model "
            f"call {alone['model_call']['p50']:.2f} ms, tool call {alone['tool_call']['p50']:.2f} ms."
        )
    lines = [
        f"Agent loop, one request at a time; model latency {s['model_latency_ms']:g} ms per call, MCP tool "
        f"{s['tool_latency_ms']:g} ms (fan-out tools 200 ms, subagent children 500 ms). "
        f"Overhead = total − model time − tool time; per tool round = (overhead − a plain chat's "
        f"overhead) ÷ rounds.{measured}",
        "",
        _row(
            ["case", "gateway", "total p50 ms", "overhead p50 ms", "overhead p99 ms", "per tool round p50 ms"]
        ),
        _row(["---", "---"] + ["---:"] * 4),
    ]
    hw, ll = agentic.get("hatchway", {}), agentic.get("litellm", {})

    def row(case: str, gw: str, r: dict[str, Any] | None, per: str = "") -> None:
        if r is None:
            return
        if r.get("supported") is False:
            lines.append(_row([case, gw, "not supported", "", "", r.get("note", "")]))
            return
        o = r["overhead"]
        lines.append(_row([case, gw, f"{r['total']['p50']:.2f}", f"{o['p50']:.2f}", f"{o['p99']:.2f}", per]))

    row("plain (1 model call), chat", "hatchway", hw.get("plain"))
    for n in (1, 3):
        r = hw.get(f"tools_{n}")
        row(f"{n} MCP tool round(s), chat", "hatchway", r, f"{r['per_round_p50']:.2f}" if r else "")
    r = hw.get("responses_tools_1")
    row("1 MCP tool round, Responses", "hatchway", r)
    row("plain (1 model call), Responses", "litellm", ll.get("plain_responses"))
    r = ll.get("responses_tools_1")
    row("1 MCP tool round, Responses", "litellm", r, f"{r['per_round_p50']:.2f}" if r else "")
    row("3 MCP tool rounds, Responses", "litellm", ll.get("responses_tools_3"))
    lines += ["", _row(["fan-out", "gateway", "round wall p50 ms", "p99 ms", "ideal ms", "note"])]
    lines.append(_row(["---", "---", "---:", "---:", "---:", "---"]))
    for key, case in (("fanout_8", "8 parallel MCP tools × 200 ms"), ("subagents_8", "8 subagents × 500 ms")):
        for gw, data in (("hatchway", hw), ("litellm", ll)):
            r = data.get(key)
            if r is None:
                continue
            if r.get("supported") is False:
                lines.append(_row([case, gw, "not supported", "", "", r.get("note", "")]))
                continue
            note = f"{r['tools_executed']} tools run one after the other" if "tools_executed" in r else ""
            if "children" in r:
                note = f"{r['children']} children"
            w = r["round_wall"]
            lines.append(_row([case, gw, f"{w['p50']:.1f}", f"{w['p99']:.1f}", f"{r['ideal_ms']:g}", note]))
    return lines


def _idle_lines(results: dict[str, Any]) -> list[str]:
    idle = results.get("idle", {})
    if not idle:
        return []
    lines = [
        "Idle pooled upstream connection (upstream: uvicorn, keep-alive timeout 5 s); one request after each "
        "gap, on a fresh client connection.",
        "",
        _row(["gateway", "requests", "5xx", "other errors", "gaps (s)", "statuses"]),
        _row(["---", "---:", "---:", "---:", "---", "---"]),
    ]
    for name, r in idle.items():
        gaps = ", ".join(f"{g:g}" for g in r["gaps_s"])
        statuses = ", ".join(str(s) for s in r["statuses"])
        lines.append(_row([name, str(r["requests"]), str(r["5xx"]), str(r["other_errors"]), gaps, statuses]))
    return lines


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"# Hatchway benchmark, {results['started']}",
        "",
        f"- command: `{results['command']}`",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']:.1f} GiB, {m['os']}",
        f"- Python {m['python']}, LiteLLM {m.get('litellm') or 'not run'}, {m['wrk']}",
        f"- Hatchway: `hatchway serve`, 1 worker, SQLite; LiteLLM: proxy, 1 worker, no database; "
        "same upstream for both; everything on loopback on this machine; "
        f"run took {results['duration_s']:.0f} s",
        "",
        "## Performance targets",
        "",
    ]
    for c in results["targets"]:
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[c["pass"]]
        lines.append(f"- **{mark}** {c['target']}: {c['measured']}")
    up = results.get("upstream_alone", {})
    lines += ["", "## Pass-through load", ""]
    if up:
        lines.append(
            f"Upstream alone (wrk, c=64): {up['no_latency']['rps']:.0f} req/s with no latency; "
            f"{up['latency']['rps']:.0f} req/s at {results['settings']['latency_ms']:g} ms "
            f"(ideal {up['ideal_rps']:.0f}), so it is not what limits the gateways below."
        )
        lines.append("")
    lines += [*_load_table(results), "", *_resources(results)]
    for title, part in (
        ("Idle gaps", _idle_lines(results)),
        ("Agent loop and fan-out", _agentic_table(results)),
    ):
        if part:
            lines += ["", f"## {title}", "", *part]
    clients = results.get("http_clients")
    if clients:
        lines += ["", "## Upstream HTTP clients (against the upstream, c=64 then c=1)", ""]
        lines += [
            _row(["client", "req/s", "p50 ms", "p99 ms", "c=1 p50 ms", "c=1 CPU ms/request"]),
            _row(["---", "---:", "---:", "---:", "---:", "---:"]),
        ]
        for name, r in clients.items():
            c1 = [f"{r['c1_p50']:.2f}", f"{r['c1_cpu_ms']:.3f}"] if "c1_p50" in r else ["", ""]
            lines.append(_row([name, f"{r['rps']:.0f}", f"{r['p50']:.2f}", f"{r['p99']:.2f}", *c1]))
    for name, text in results.get("extras", {}).items():
        lines += ["", f"## {name}", "", "```", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


# -- charts --------------------------------------------------------------------------------------


def charts(results: dict[str, Any], stem: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    load = results["load"]
    present = [t for t in TARGETS if t in load]
    conc = [1, 16, 64]
    colors = {"direct": "#888888", "hatchway": "#1f77b4", "litellm": "#d62728"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for q, ax in zip(("p50", "p99"), axes[:2], strict=True):
        for t in present:
            ys = [load[t][f"c{c}"][q] for c in conc if f"c{c}" in load[t]]
            ax.plot(conc[: len(ys)], ys, marker="o", label=t, color=colors[t])
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("concurrency (wrk connections)")
        ax.set_ylabel(f"{q} latency, ms (log)")
        ax.set_title(f"{q} latency vs load")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes[2]
    width = 0.8 / max(1, len(present))
    for i, t in enumerate(present):
        ys = [load[t].get(f"c{c}", {}).get("rps", 0) for c in conc]
        xs = [j + (i - (len(present) - 1) / 2) * width for j in range(len(conc))]
        bars = ax.bar(xs, ys, width, label=t, color=colors[t])
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(conc)), [f"c={c}" for c in conc])
    ax.set_ylabel("requests / s")
    ax.set_title("throughput")
    ax.legend()
    s = results["settings"]
    fig.suptitle(
        f"Pass-through chat completion, upstream {s['latency_ms']:g} ms, 1 worker each, "
        f"{results['machine']['cores']} cores ({results['started']})"
    )
    fig.tight_layout()
    path = stem.with_suffix(".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write(results: dict[str, Any], directory: Path) -> tuple[Path, Path, list[Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / results["started"].replace(":", "")
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    md_path = stem.with_suffix(".md")
    md_path.write_text(markdown(results))
    try:
        pngs = charts(results, stem)
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no charts")
        pngs = []
    return json_path, md_path, pngs
