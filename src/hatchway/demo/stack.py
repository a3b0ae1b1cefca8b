"""What the demo starts, in order, and stops in reverse: the model, the example MCP servers, the gateway.

Everything runs in this process, each server under uvicorn on a free loopback port in a thread of
its own, so one Ctrl-C (or the end of the demo) stops them all. The gateway's state (SQLite, a
fresh master key, the generated hatchway.yaml) lives in a temporary directory that is kept after
the demo, so ``hatchway logs --config <dir>/hatchway.yaml`` still works.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import yaml
from rich.console import Console

from hatchway.demo.env import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL
from hatchway.demo.scripted_model import SCRIPTED_MODEL
from hatchway.demo.scripted_model import create_app as create_scripted_model
from hatchway.demo.servers import LoopbackServer
from hatchway.errors import HatchwayError

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
ORG = "demo"
PUBLIC_MODEL = "demo-model"
"""The model name the demo's agents use in the generated hatchway.yaml."""


class DemoError(Exception):
    """The demo cannot go on; the message is one line for the user."""


@dataclass(frozen=True)
class ModelChoice:
    """The scripted model, or a real OpenAI-compatible endpoint named by the environment."""

    base_url: str | None
    """None: the scripted model (started by the demo)."""
    model: str
    api_key_set: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelChoice:
        """Any of the three ``HATCHWAY_DEMO_*`` variables switches to a real model."""
        if not any(env.get(name) for name in (ENV_BASE_URL, ENV_API_KEY, ENV_MODEL)):
            return cls(None, SCRIPTED_MODEL)
        base_url = (env.get(ENV_BASE_URL) or DEFAULT_BASE_URL).rstrip("/")
        return cls(base_url, env.get(ENV_MODEL) or DEFAULT_MODEL, bool(env.get(ENV_API_KEY)))

    @property
    def scripted(self) -> bool:
        return self.base_url is None


def find_checkout(start: Path | None = None) -> Path:
    """The repository checkout holding ``examples/`` (the working directory first, then this package's)."""
    for root in (start or Path.cwd(), Path(__file__).resolve().parents[3]):
        if (root / "examples" / "contas_server.py").is_file():
            return root
    raise DemoError("examples/ not found: run the demo from a Hatchway checkout (make demo)")


def load_example(checkout: Path, name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by path, whatever is on ``sys.path``."""
    module_name = f"hatchway_demo_examples.{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, checkout / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


class DemoStack:
    """``start()`` brings everything up with a progress line per step; ``stop()`` is always safe."""

    def __init__(self, state_dir: Path, choice: ModelChoice, console: Console) -> None:
        self.state_dir = state_dir
        self.choice = choice
        self.console = console
        self.checkout = find_checkout()
        self.servers: list[LoopbackServer] = []
        self.model_url = choice.base_url or ""
        self.mcp_urls: dict[str, str] = {}
        self.contas_backend: Any = None
        self.config_path = state_dir / "hatchway.yaml"
        self.gateway_app: Any = None
        self.gateway_server: LoopbackServer | None = None
        self.api_key = ""

    @property
    def gateway_url(self) -> str:
        assert self.gateway_server is not None
        return self.gateway_server.url

    def start(self) -> None:
        if self.choice.scripted:
            model = self._step("scripted model (a deterministic stand-in for an LLM)", self._start_model)
            self.model_url = f"{model.url}/v1"
        self._step("example MCP servers (research, contas)", self._start_mcp_servers)
        self._step("gateway (SQLite, fresh master key, migrations)", self._start_gateway)
        self._step(f"organisation '{ORG}' and an API key", self._create_key)

    def stop(self) -> None:
        """The gateway first (it closes its MCP sessions), then the MCP servers, then the model."""
        while self.servers:
            self.servers.pop().stop()

    def _step(self, label: str, action: Callable[[], T]) -> T:
        started = time.monotonic()
        with self.console.status(f"Starting {label}…"):
            try:
                result = action()
            except (OSError, RuntimeError, HatchwayError) as exc:  # a port, a broken example file…
                message = exc.message if isinstance(exc, HatchwayError) else str(exc)
                raise DemoError(f"could not start the {label}: {message}") from exc
        self.console.print(
            f"  [green]✓[/] {label} [dim]{time.monotonic() - started:.1f} s[/]", highlight=False
        )
        return result

    def _serve(self, app: Any, name: str) -> LoopbackServer:
        server = LoopbackServer(app, name)
        self.servers.append(server)  # before start: stop() must reach a half-started server too
        return server.start()

    def _start_model(self) -> LoopbackServer:
        return self._serve(create_scripted_model(), "scripted model")

    def _start_mcp_servers(self) -> None:
        research = load_example(self.checkout, "research_server")
        contas = load_example(self.checkout, "contas_server")
        self.contas_backend = contas.ContasBackend()
        self.mcp_urls["research"] = self._serve(research.create_app(), "research MCP server").url + "/mcp"
        self.mcp_urls["contas"] = self._serve(contas.create_app(self.contas_backend), "contas MCP server").url
        self.mcp_urls["contas"] += "/mcp"

    def _start_gateway(self) -> None:
        from hatchway.api.app import create_app
        from hatchway.config.settings import load_settings

        write_config(self.config_path, self.checkout / "examples", self.choice, self.model_url, self.mcp_urls)
        settings = load_settings(self.config_path)
        settings.database_url = _sqlite_url(self.state_dir)  # not HATCHWAY_DATABASE_URL: a fresh one
        settings.redis_url = None
        self.gateway_app = create_app(settings)
        self.gateway_server = self._serve(self.gateway_app, "gateway")

    def _create_key(self) -> None:
        from hatchway.principal import Role
        from hatchway.store.orgs import OrgStore

        assert self.gateway_server is not None
        orgs = OrgStore(self.gateway_app.state.gateway.db)  # the gateway's own database
        self.gateway_server.call(orgs.create_org(ORG))
        _, self.api_key = self.gateway_server.call(orgs.create_key(ORG, "demo", role=Role.ADMIN))


def _sqlite_url(state_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{state_dir / 'hatchway.db'}"


def write_config(
    path: Path, examples: Path, choice: ModelChoice, model_url: str, mcp_urls: Mapping[str, str]
) -> None:
    """The demo's hatchway.yaml: examples/hatchway.yaml's agents on the demo's model and servers.

    Plugin files are copied beside it with each server's URL replaced by the running server's;
    tools.yaml and tool_policies.yaml are used where they are.
    """
    example = yaml.safe_load((examples / "hatchway.yaml").read_text(encoding="utf-8"))
    provider: dict[str, Any] = {"id": "demo", "base_url": model_url, "timeout_seconds": 120}
    if choice.api_key_set:
        provider["api_key"] = f"env:{ENV_API_KEY}"
    plugins: dict[str, str] = {}
    agents = []
    for agent in example.get("agents", []):
        agent = {**agent, "model": PUBLIC_MODEL}
        for key in ("tools", "tool_policies"):
            if agent.get(key):
                agent[key] = str(examples / agent[key])
        if source := agent.get("plugin"):
            if source not in plugins:
                target = path.parent / "plugins" / f"{len(plugins) + 1}-{Path(source).name}"
                plugins[source] = _copy_plugin(examples / source, target, mcp_urls)
            agent["plugin"] = plugins[source]
        agents.append(agent)
    config = {
        "database_url": _sqlite_url(path.parent),
        "master_key_file": str(path.parent / "master.key"),
        "providers": [provider],
        "models": [{"name": PUBLIC_MODEL, "provider": "demo", "upstream_model": choice.model}],
        "operations": example.get("operations", {}),
        "agents": agents,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by the demo (python -m hatchway.demo) from examples/hatchway.yaml.\n"
    path.write_text(header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _copy_plugin(source: Path, target: Path, mcp_urls: Mapping[str, str]) -> str:
    plugin = yaml.safe_load(source.read_text(encoding="utf-8"))
    for server in plugin.get("mcp_servers", []):
        if server.get("id") in mcp_urls:
            server["url"] = mcp_urls[server["id"]]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(plugin, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return str(target)
