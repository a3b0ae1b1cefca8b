"""``make demo``: the gateway, the example MCP servers and a scripted model on loopback, three stories
played with the official ``openai`` client, and a readable transcript.

- ``runner`` — the entry point (``python -m hatchway.demo [--keep-running]``) and the report;
- ``stack`` — what is started, in which order, and the generated hatchway.yaml (``env``: the
  environment variables that point it at a real model);
- ``stories`` — the three stories; ``transcript`` — how they print;
- ``scripted_model`` and ``script`` — the deterministic stand-in for an LLM;
- ``upstream`` — the scripted OpenAI-compatible upstream it answers with (the tests' ``ScriptedLLM``
  and ``bench/``'s upstreams are the same app).
"""

from typing import Any

__all__ = ["main", "run_demo"]


def __getattr__(name: str) -> Any:
    # Lazy: ``hatchway --help`` imports ``demo.env`` for its env var names, not the whole demo.
    if name in __all__:
        from hatchway.demo import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'hatchway.demo' has no attribute {name!r}")
