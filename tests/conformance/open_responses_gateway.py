"""``hatchway serve`` with a deterministic scripted upstream, for running the Open Responses harness.

    .venv/bin/python -m tests.conformance.open_responses_gateway [--port 8765]

prints the harness's ``--base-url`` and ``--api-key`` and serves until interrupted. The upstream
is ``deterministic_model`` (tests/support/open_responses.py): it calls ``get_weather`` when offered
and otherwise answers a short sentence, so every run sees the same model behaviour. The harness
itself (``openresponses/openresponses``, ``bin/compliance-test.ts``) is not part of this
repository; the README's "Protocol conformance" section says how to run it against this.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.gateway import base_config, create_org_key, write_config
from tests.support.open_responses import deterministic_model
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import answers_healthz, wait_until


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly when the runner terminates us
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    port = parser.parse_args().port
    llm = ScriptedLLM().start()
    llm.handler = deterministic_model
    with tempfile.TemporaryDirectory(prefix="hatchway-open-responses-") as tmp:
        config = base_config(Path(tmp), llm.base_url)
        config["models"].append(
            {"name": "gpt-4o-mini", "provider": "upstream", "upstream_model": "gpt-4o-mini"}
        )
        path = write_config(Path(tmp), config)
        key = asyncio.run(create_org_key(config["database_url"], "open-responses")).key
        serve = subprocess.Popen(
            [sys.executable, "-m", "hatchway", "serve", "--config", str(path), "--port", str(port)]
        )
        try:
            wait_until(
                lambda: answers_healthz(f"http://127.0.0.1:{port}") or serve.poll() is not None, timeout=120
            )
            print(f"--base-url http://127.0.0.1:{port}/v1 --api-key {key} --model gpt-4o-mini", flush=True)
            serve.wait()
        except KeyboardInterrupt:
            pass
        finally:
            serve.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                serve.wait(timeout=60)
            llm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
