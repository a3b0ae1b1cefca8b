"""Example MCP server for the ``contas`` agent: value-added services (VAS) and orders of an account.

Built with the official ``mcp`` SDK. It shows the multi-item contract of seed ``000``:

- ``validar_vas_subject(subject)`` — the validator, no side effects: expands
  ``"Produto A, Produto B e Produto C"`` into ``items[]`` with per-item eligibility,
  ``transaction_decision.resolved_arguments`` and a ``confirmation_message``;
- ``cancelar_vas_avulso(subject, items?)`` — executes every item and reports ``results[]``;
  "Produto B" passes validation but no longer exists in the backend, so it fails with ``not_found``;
- ``cancelar_vas_lote(items)`` — the same as a batch API taking a collection;
- ``validar_vas_para_lote(subject)`` — a validator that sends the execution to the batch API
  (``transaction_decision.target_tool``);
- ``cancelar_vas_fluxo(subject, items?)`` — workflow-backed: items under
  ``workflow.output.cancelar_vas_fluxo.results``, and a later notification step that fails;
- ``consultar_pedidos(ids)`` — read-only, several ids, per-item ``ok``;
- ``estatisticas()`` and ``GET /stats`` — how often each operation (idempotency key) executed.

Run it: ``python -m examples.contas_server --port 8765`` (streamable HTTP at ``/mcp``), or import
``create_app()`` as an ASGI app.
"""

from __future__ import annotations

import argparse
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

CATALOG = {"Produto A": "1001", "Produto B": "1002", "Produto C": "1003", "Produto D": "1004"}
GONE_AT_EXECUTION = frozenset({"Produto B"})
"""Known to the validator, but already gone when the cancellation runs."""
ORDERS = {"1001": "entregue", "1002": "em trânsito", "1003": "cancelado"}
IDEMPOTENCY_KEYS = ("idempotency_key", "io.hatchway/operation_id")

_SEPARATORS = re.compile(r"\s*(?:,|;|\be\b|\band\b|\by\b)\s*", re.IGNORECASE)


@dataclass
class ContasBackend:
    """The server's state: what was cancelled, and how often each operation executed."""

    executions: Counter[str] = field(default_factory=Counter)
    """Idempotency key (Hatchway's operation id) → number of primary-tool executions."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    gate: threading.Event | None = None
    """When set to an Event, cancellations wait for it (lets tests hold an execution in flight)."""
    started: threading.Event = field(default_factory=threading.Event)
    """Set when a cancellation starts executing."""
    hold_seconds: float = 0.0
    """How long each cancellation takes after it is recorded (a slow backend)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, tool: str, arguments: dict[str, Any], meta: Any, *, execution: bool) -> str:
        key = next((str(meta[k]) for k in IDEMPOTENCY_KEYS if meta and meta.get(k)), "-")
        with self.lock:
            self.calls.append({"tool": tool, "arguments": arguments, "idempotency_key": key})
            if execution:
                self.executions[key] += 1
        return key

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "executions": dict(self.executions),
                "total_executions": sum(self.executions.values()),
                "cancelled": list(self.cancelled),
                "calls": len(self.calls),
            }


def split_subject(subject: str) -> list[str]:
    """``"Produto A, Produto B e Produto C"`` → ``["Produto A", "Produto B", "Produto C"]``."""
    return [part.strip() for part in _SEPARATORS.split(subject or "") if part and part.strip()]


def _canonical(name: str) -> str:
    return next((known for known in CATALOG if known.casefold() == name.casefold()), name)


def _list_names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " e " + names[-1]


def validate_subject(subject: str) -> dict[str, Any]:
    """The validator's answer for ``subject`` (pure function, no side effects)."""
    names = [_canonical(n) for n in split_subject(subject)]
    items = [
        {"name": n, "id": CATALOG[n], "eligible": True}
        if n in CATALOG
        else {"name": n, "eligible": False, "reason": f"{n} não está contratado nesta conta"}
        for n in names
    ]
    actionable = [i for i in items if i["eligible"]]
    if not actionable:
        reason = "; ".join(i["reason"] for i in items) or "nenhum produto informado"
        return {"eligible": False, "status": "NOT_ELIGIBLE", "reason": reason, "items": items}
    chosen = [i["name"] for i in actionable]
    message = f"Você confirma o cancelamento de {_list_names(chosen)}?"
    skipped = [i for i in items if not i["eligible"]]
    if skipped:
        message += " Não serão cancelados: " + "; ".join(i["reason"] for i in skipped) + "."
    return {
        "eligible": True,
        "status": "PARTIALLY_ELIGIBLE" if skipped else "ELIGIBLE",
        "resolved_subject": ", ".join(chosen),
        "resolved_subjects": chosen,
        "items": items,
        "transaction_decision": {
            "resolved_arguments": {
                "subject": ", ".join(chosen),
                "items": [{"name": i["name"], "id": i["id"]} for i in actionable],
            },
            "confirmation_message": message,
        },
    }


def _targets(subject: str | None, items: list[Any] | None) -> list[dict[str, Any]]:
    if items:
        return [{"name": i} if isinstance(i, str) else dict(i) for i in items]
    return [{"name": _canonical(n)} for n in split_subject(subject or "")]


def build_server(backend: ContasBackend) -> MCPServer:
    """The MCP server over ``backend``."""
    mcp = MCPServer("contas", instructions="VAS e pedidos de uma conta.", log_level="WARNING")

    async def cancel(tool: str, targets: list[dict[str, Any]], ctx: Context) -> list[dict[str, Any]]:
        backend.record(tool, {"items": targets}, ctx.request_context.meta, execution=True)
        backend.started.set()
        if backend.gate is not None:
            await anyio.to_thread.run_sync(backend.gate.wait, 30.0)
        if backend.hold_seconds:
            await anyio.sleep(backend.hold_seconds)
        results = []
        for target in targets:
            name = str(target.get("name", ""))
            if name in GONE_AT_EXECUTION or name not in CATALOG:
                failed = {"name": name, "id": target.get("id") or CATALOG.get(name), "success": False}
                results.append(failed | {"error": "not_found"})
                continue
            with backend.lock:
                backend.cancelled.append(name)
            results.append({"name": name, "id": CATALOG[name], "success": True})
        return results

    @mcp.tool()
    def validar_vas_subject(subject: str, ctx: Context) -> dict[str, Any]:
        """Pré-valida o cancelamento de um ou mais VAS (sem efeitos): expande o subject em itens."""
        backend.record("validar_vas_subject", {"subject": subject}, ctx.request_context.meta, execution=False)
        return validate_subject(subject)

    @mcp.tool()
    def validar_vas_para_lote(subject: str, ctx: Context) -> dict[str, Any]:
        """Como validar_vas_subject, mas encaminha a execução para a API em lote (target_tool)."""
        backend.record(
            "validar_vas_para_lote", {"subject": subject}, ctx.request_context.meta, execution=False
        )
        answer = validate_subject(subject)
        decision = answer.get("transaction_decision")
        if decision:
            decision["target_tool"] = "cancelar_vas_lote"
            decision["resolved_arguments"] = {"items": decision["resolved_arguments"]["items"]}
        return answer

    @mcp.tool()
    async def cancelar_vas_avulso(
        subject: str, ctx: Context, items: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Cancela um ou mais VAS; devolve results[] com success por item."""
        return {"results": await cancel("cancelar_vas_avulso", _targets(subject, items), ctx)}

    @mcp.tool()
    async def cancelar_vas_lote(items: list[dict[str, Any] | str], ctx: Context) -> dict[str, Any]:
        """Cancela uma lista de VAS (API em lote)."""
        return {"results": await cancel("cancelar_vas_lote", _targets(None, items), ctx)}

    @mcp.tool()
    async def cancelar_vas_fluxo(
        subject: str, ctx: Context, items: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Cancela VAS por workflow; a notificação ao cliente, depois, falha."""
        results = await cancel("cancelar_vas_fluxo", _targets(subject, items), ctx)
        notification = [{"name": "sms", "success": False, "error": "gateway_unavailable"}]
        return {
            "ok": False,
            "error": "notificar_cliente: gateway de SMS indisponível",
            "workflow": {
                "name": "cancelamento_vas",
                "version": 1,
                "output": {
                    "cancelar_vas_fluxo": {"results": results},
                    "notificar_cliente": {"results": notification},
                },
            },
        }

    @mcp.tool()
    def consultar_pedidos(ids: list[str], ctx: Context) -> dict[str, Any]:
        """Consulta um ou mais pedidos (somente leitura)."""
        backend.record("consultar_pedidos", {"ids": ids}, ctx.request_context.meta, execution=False)
        return {
            "results": [
                {"id": i, "ok": True, "status": ORDERS[i]}
                if i in ORDERS
                else {"id": i, "ok": False, "error": "not_found"}
                for i in ids
            ]
        }

    @mcp.tool()
    def estatisticas() -> dict[str, Any]:
        """Quantas vezes cada operação (idempotency key) executou."""
        return backend.stats()

    @mcp.custom_route("/stats", methods=["GET"])
    async def stats_route(_: Request) -> JSONResponse:
        return JSONResponse(backend.stats())

    return mcp


def create_app(backend: ContasBackend | None = None) -> Starlette:
    """The server as an ASGI app (streamable HTTP at ``/mcp``)."""
    return build_server(backend or ContasBackend()).streamable_http_app()


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Example MCP server for the contas agent.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
