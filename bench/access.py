"""What admitting a request costs (``access/``): the key lookup alone (a cache hit, as every request
after a key's first), then the whole ``Gatekeeper.admit`` — the route's role check, and with verified
end users on, the user token (a JWKS served over loopback; a token seen before is a cache hit, a new
one is an RS256 verification). In process, call by call, on SQLite.

    python -m bench.access [--iterations 20000]

Prints p50/p99 µs of each and the target: role check + cached user-token verification ≤ 100 µs p50
added to the key lookup. About 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hatchway.access.end_users import EndUsers
from hatchway.access.gatekeeper import Gatekeeper
from hatchway.config.access import EndUserTokens
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore

TARGET_US = 100.0
ISSUER = "https://idp.bench"
AUDIENCE = "bench-app"


async def timed(fn: Callable[[], Awaitable[object]], iterations: int) -> tuple[float, float]:
    for _ in range(200):
        await fn()
    samples = []
    for _ in range(iterations):
        started = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - started) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


class JwksServer:
    """The identity provider's key set, served by uvicorn on a loopback port in a thread."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)

        async def jwks(request: Request) -> JSONResponse:
            return JSONResponse({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(Starlette(routes=[Route("/jwks", jwks)]), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> JwksServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def token(key: rsa.RSAPrivateKey, subject: str) -> str:
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def measure(iterations: int, directory: Path, jwks_url: str, signer: rsa.RSAPrivateKey) -> None:
    db = Database(f"sqlite+aiosqlite:///{directory / 'bench.db'}")
    await db.migrate()
    orgs = OrgStore(db)
    org = await orgs.create_org("bench")
    _, key = await orgs.create_key(org.id, role=Role.APP)
    config = EndUserTokens(organisations=["bench"], issuer=ISSUER, jwks_url=jwks_url, audience=AUDIENCE)
    plain = Gatekeeper(orgs, EndUsers([]))
    verified = Gatekeeper(orgs, EndUsers([config]))
    route = ("POST", "/v1/chat/completions")
    user = {"x-hatchway-user-token": token(signer, "ana")}
    fresh = [{"x-hatchway-user-token": token(signer, f"user-{i}")} for i in range(min(iterations, 2000))]
    unverified = iter(fresh)

    rows = [
        ("key lookup (cache hit)", await timed(lambda: orgs.authenticate(key), iterations)),
        ("admit: key + role", await timed(lambda: plain.admit(key, {}, *route), iterations)),
        (
            "admit: key + role + user token (seen)",
            await timed(lambda: verified.admit(key, user, *route), iterations),
        ),
        (
            "admit: key + role + user token (new, RS256)",
            await timed(lambda: verified.admit(key, next(unverified, user), *route), len(fresh) - 200),
        ),
    ]
    await plain.close()
    await verified.close()
    await db.close()
    base = rows[0][1][0]
    print(f"{'':48} {'p50 µs':>9} {'p99 µs':>9} {'added p50':>10}")
    for name, (p50, p99) in rows:
        print(f"{name:48} {p50:9.1f} {p99:9.1f} {p50 - base:10.1f}")
    added = rows[2][1][0] - base
    verdict = "PASS" if added <= TARGET_US else "FAIL"
    print(f"\nrole check + cached user token: +{added:.1f} µs p50 (target ≤ {TARGET_US:.0f} µs): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args()
    signer = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with JwksServer(signer) as server, tempfile.TemporaryDirectory() as directory:
        asyncio.run(measure(args.iterations, Path(directory), f"{server.url}/jwks", signer))


if __name__ == "__main__":
    main()
