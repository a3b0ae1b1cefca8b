"""The Open Responses compliance harness itself (``bin/compliance-test.ts``), when a checkout is at hand.

The harness is published only as source on GitHub, not on a package registry, so CI cannot install
it and this test skips there (``tests/api/test_open_responses_compliance.py`` runs its checks in
Python against the published schema on every run). To run it: check out
``openresponses/openresponses``, install ``zod`` in it, and point
``HATCHWAY_OPEN_RESPONSES_HARNESS`` at the checkout and ``HATCHWAY_BUN`` at a ``bun`` binary (the
npm package ``@oven/bun-linux-x64`` ships one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.servers import free_port


def test_the_open_responses_harness_passes_against_hatchway_serve() -> None:
    harness = os.environ.get("HATCHWAY_OPEN_RESPONSES_HARNESS")
    bun = os.environ.get("HATCHWAY_BUN") or shutil.which("bun")
    if not harness or not (Path(harness) / "bin" / "compliance-test.ts").exists() or not bun:
        pytest.skip(
            "Open Responses harness not available: set HATCHWAY_OPEN_RESPONSES_HARNESS to a checkout of "
            "openresponses/openresponses (with zod installed) and HATCHWAY_BUN to a bun binary"
        )
    gateway = subprocess.Popen(
        [sys.executable, "-m", "tests.conformance.open_responses_gateway", "--port", str(free_port())],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert gateway.stdout is not None
        args = gateway.stdout.readline().split()
        assert args and args[0] == "--base-url", "the gateway did not start"
        run = subprocess.run(
            [bun, "run", "bin/compliance-test.ts", *args, "--json"],
            cwd=harness,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        gateway.terminate()
        gateway.wait(timeout=120)
        if gateway.stdout is not None:
            gateway.stdout.close()
    report = json.loads(run.stdout)
    failed = [(r["id"], r.get("errors")) for r in report["results"] if r["status"] != "passed"]

    assert failed == [], failed
    assert report["summary"]["passed"] == report["summary"]["total"] >= 17
