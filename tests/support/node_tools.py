"""Node-based tools the protocol and client tests run: the MCP conformance suite, the reference MCP
server and Codex CLI, pinned in ``.ci/node-tools.json``.

``.ci/run`` installs them from the npm registry into ``.ci/node`` (git-ignored), Node 22 included
(the ``node`` npm package ships the binary). ``HATCHWAY_NODE_TOOLS`` points elsewhere. Tests
that need a tool skip with the command that installs it when it is absent, or fail when
``HATCHWAY_REQUIRE_NODE_TOOLS`` is set (as ``.ci/run`` does in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import ROOT

INSTALL = (
    "mkdir -p .ci/node && cp .ci/node-tools.json .ci/node/package.json && npm install --prefix .ci/node"
    "  (what .ci/run does; the versions are pinned in .ci/node-tools.json)"
)


def tools_dir() -> Path:
    return Path(os.environ.get("HATCHWAY_NODE_TOOLS") or ROOT / ".ci" / "node")


def node_bin() -> Path:
    """The directory holding the Node 22 binary (put first on PATH for the tools)."""
    return tools_dir() / "node_modules" / "node" / "bin"


def package_file(package: str, relative: str) -> Path:
    """A file of an installed npm package; skips the test when the package or Node is missing."""
    path = tools_dir() / "node_modules" / package / relative
    node = node_bin() / "node"
    if not path.exists() or not node.exists():
        reason = f"{package} (and Node 22) not installed in {tools_dir()}; install with: {INSTALL}"
        if os.environ.get("HATCHWAY_REQUIRE_NODE_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def node_env() -> dict[str, str]:
    """The environment with Node 22 first on PATH."""
    return {**os.environ, "PATH": f"{node_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}
