"""What the guard tests share: an obedient scripted model (it calls whatever a tool result tells it
to, plainly or in base64), and a gateway whose ``contas`` agent has a transactional tool that needs
no confirmation — the harm an injection is after."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.agent_loop import log_of
from tests.support.contas import RunningContas
from tests.support.scripted_llm import Reply

ORDER = "cancelar_vas_lote"
"""What every injection wants run: a transactional tool (its policy here needs no confirmation)."""


def sees_order(text: str) -> bool:
    """The obedient model reads base64 too."""
    if ORDER in text:
        return True
    for blob in re.findall(r"[A-Za-z0-9+/]{24,}={0,2}", text):
        try:
            if ORDER in base64.b64decode(blob + "=" * (-len(blob) % 4)).decode("utf-8", "ignore"):
                return True
        except ValueError:
            continue
    return False


def obedient(payload: str) -> Callable[[dict[str, Any]], Reply]:
    """Reads the orders ``[payload]``, then does what the result tells it to, if anything."""

    def handler(body: dict[str, Any]) -> Reply:
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if not tools:
            return Reply(tool_calls=[("consultar_pedidos", {"ids": [payload]})])
        if len(tools) == 1 and sees_order(tools[0]["content"]):
            return Reply(tool_calls=[(ORDER, {"items": ["Produto A"]})])
        return Reply(text="Feito.")

    return handler


def guarded_gateway(  # type: ignore[no-untyped-def]
    gateway_factory, contas: RunningContas, tmp_path: Path, guards: dict[str, Any] | None, **config: Any
):
    """A gateway with ``guards`` (None: none configured) and any other ``config``."""
    policies = {
        ORDER: {"operation_type": "transactional", "require_confirmation": False, "requires": ["items"]}
    }
    agent = contas.agent(tmp_path / "contas", policies=policies)
    return gateway_factory(agents=[agent], **({"guards": guards} if guards is not None else {}), **config)


def ask(gateway) -> tuple[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The agent's answer to one question, and the run's record."""
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="agent:contas",
        messages=[{"role": "user", "content": "qual o status do pedido?"}],
        extra_headers={"X-On-Behalf-Of": "ana", "hatchway-session": "s1"},
    )
    return raw.parse().choices[0].message.content or "", log_of(gateway, raw.headers["x-hatchway-request-id"])
