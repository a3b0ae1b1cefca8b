"""Webhook receivers on loopback, for the A2A push notifications' tests: every POST is recorded as
it arrives (path, lower-cased headers, body), before anything else is done with it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Hooks:
    """Webhook receivers on one loopback port, by path: each POST is recorded on arrival; a path in
    ``held`` waits for its event before it answers; ``statuses[path]`` are answered in turn (then
    200); ``redirects[path]`` answers 307 to that location."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.held: dict[str, threading.Event] = {}
        self.statuses: dict[str, list[int]] = {}
        self.redirects: dict[str, str] = {}
        self.released = threading.Event()  # at teardown every held POST is let go
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                hooks.received.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                gate = hooks.held.get(self.path)
                if gate is not None:
                    while not (gate.wait(0.05) or hooks.released.is_set()):
                        pass
                if self.path in hooks.redirects:
                    self.send_response(307)
                    self.send_header("location", hooks.redirects[self.path])
                else:
                    answers = hooks.statuses.get(self.path) or []
                    self.send_response(answers.pop(0) if answers else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return self.base + path

    def at(self, path: str) -> list[dict[str, Any]]:
        return [got for got in list(self.received) if got["path"] == path]

    def states(self, path: str) -> list[str]:
        return [json.loads(got["body"])["task"]["status"]["state"] for got in self.at(path)]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


class Receiver:
    """One webhook, at ``url`` (``/hook``): its POSTs in ``received``; ``statuses`` answered in turn,
    then 200."""

    PATH = "/hook"

    def __init__(self) -> None:
        self.hooks = Hooks()
        self.url = self.hooks.url(self.PATH)

    @property
    def received(self) -> list[dict[str, Any]]:
        return self.hooks.received

    @property
    def statuses(self) -> list[int]:
        return self.hooks.statuses.setdefault(self.PATH, [])

    @statuses.setter
    def statuses(self, answers: list[int]) -> None:
        self.hooks.statuses[self.PATH] = answers

    def close(self) -> None:
        self.hooks.close()
