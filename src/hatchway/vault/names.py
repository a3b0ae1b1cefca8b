"""Secret names, ``secret.<name>`` references and ``allowed_hosts`` entries: what is accepted.

Names are deliberately narrow (``^[A-Za-z0-9_-]{1,64}$``) so a reference can never smuggle a path,
a scope separator or a URL: ``secret.a/b``, ``secret.a.b`` and 65-character names are rejected.
"""

from __future__ import annotations

import ipaddress
import re

from hatchway.errors import InvalidRequest

REF_PREFIX = "secret."
MAX_NAME = 64
MAX_ALLOWED_HOSTS = 32
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid secret name, or None when it is."""
    if not name:
        return "a secret name must not be empty"
    if len(name) > MAX_NAME:
        return f"a secret name has at most {MAX_NAME} characters (got {len(name)})"
    if not _NAME.match(name):
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "_-"))})
        return f"a secret name may only contain letters, digits, '_' and '-' (found {''.join(bad)!r})"
    return None


def ref_problem(ref: str) -> str | None:
    """Why ``ref`` is not a valid ``secret.<name>`` reference, or None; for pydantic validators."""
    if not ref.startswith(REF_PREFIX):
        return f"must be a vault reference 'secret.<name>' (got {ref!r})"
    problem = name_problem(ref[len(REF_PREFIX) :])
    return f"{problem} in {ref!r}" if problem else None


def check_name(name: str, *, param: str = "name") -> str:
    """``name`` unchanged, or InvalidRequest (400) naming the field and the rule."""
    if problem := name_problem(name):
        raise InvalidRequest(f"{param}: {problem}", param=param, code="invalid_secret_name")
    return name


def parse_ref(ref: str, *, param: str = "secret_ref") -> str:
    """The secret name inside ``secret.<name>``; InvalidRequest (400) when malformed."""
    if problem := ref_problem(ref):
        raise InvalidRequest(f"{param}: {problem}", param=param, code="invalid_secret_ref")
    return ref[len(REF_PREFIX) :]


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a bare host name or IP address (no scheme, port or path), or None."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        return f"must be a bare host name or IP address such as mcp.example.com (got {host!r})"
    return None


def normalise_hosts(hosts: list[str] | None, *, param: str = "allowed_hosts") -> list[str]:
    """Lower-cased, de-duplicated hosts in the given order; InvalidRequest naming the bad entry."""
    out: list[str] = []
    for i, raw in enumerate(hosts or []):
        host = raw.strip().lower().rstrip(".")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if problem := host_problem(host):
            raise InvalidRequest(f"{param}[{i}]: {problem}", param=f"{param}[{i}]", code="invalid_host")
        if host not in out:
            out.append(host)
    if len(out) > MAX_ALLOWED_HOSTS:
        raise InvalidRequest(f"{param}: at most {MAX_ALLOWED_HOSTS} hosts per secret", param=param)
    return out
