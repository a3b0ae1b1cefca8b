"""``make demo``: the gateway, the example MCP servers and a scripted model on loopback, three stories
played with the official ``openai`` client, and a readable transcript.

- ``runner`` — the entry point (``python -m hatchway.demo [--keep-running]``) and the report;
- ``stack`` — what is started, in which order, and the generated hatchway.yaml;
- ``stories`` — the three stories; ``transcript`` — how they print;
- ``scripted_model`` and ``script`` — the deterministic stand-in for an LLM;
- ``upstream`` — the scripted OpenAI-compatible upstream it answers with (the tests' ``ScriptedLLM``
  and ``bench/``'s upstreams are the same app).
"""

from typing import Any

__all__ = ["main", "run_demo"]

ENV_BASE_URL = "HATCHWAY_DEMO_BASE_URL"
ENV_API_KEY = "HATCHWAY_DEMO_API_KEY"
ENV_MODEL = "HATCHWAY_DEMO_MODEL"
"""Where the demo's model is (``--help`` names them: defined here, not in ``stack``, so that every
``hatchway`` command does not import the demo's servers)."""


def __getattr__(name: str) -> Any:
    # Lazy: ``hatchway --help`` imports this package for its env var names, not the whole demo.
    if name in __all__:
        from hatchway.demo import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'hatchway.demo' has no attribute {name!r}")
