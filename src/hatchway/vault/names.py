"""Secret names, ``secret.<name>`` references and ``allowed_hosts`` entries: what is accepted.

Names are deliberately narrow (``^[A-Za-z0-9_-]{1,64}$``) so a reference can never smuggle a path,
a scope separator or a URL: ``secret.a/b``, ``secret.a.b`` and 65-character names are rejected.

An ``allowed_hosts`` entry names where a secret may travel, scheme and port included: a bare host
(``mcp.example.com``) is https on port 443; ``mcp.example.com:8443`` is https on that port;
``http://10.0.0.5:8080`` (an origin: scheme, host, optional port, no path) is exactly that.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from hatchway.errors import InvalidRequest

REF_PREFIX = "secret."
MAX_NAME = 64
MAX_ALLOWED_HOSTS = 32
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_NAME = re.compile(NAME_PATTERN)
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


Origin = tuple[str, str, int]
"""``(scheme, host, port)``: where a request goes, and what an ``allowed_hosts`` entry allows."""
DEFAULT_PORTS = {"https": 443, "http": 80}
_PORT = r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
_HOST = r"([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.){0,2}[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
ENTRY_SCHEMA = {"type": "string", "pattern": f"^(https?://)?{_HOST}{_PORT}$"}
"""An ``allowed_hosts`` entry as the served OpenAPI document describes it: the common forms (a DNS
name or IPv4 address, a port, a scheme); ``normalise_entry`` also takes IPv6 literals."""
_ENTRY_FORMS = "a host (mcp.example.com: https on 443), host:port, or an origin such as http://10.0.0.5:8080"


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a bare host name or IP address (no scheme, port or path), or None."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        return f"must be {_ENTRY_FORMS} (got {host!r})"
    return None


def origin_of(url: str | None) -> Origin | None:
    """The ``(scheme, host, port)`` a URL reaches, or None (no URL, or not http(s))."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower().rstrip("."), port or DEFAULT_PORTS[scheme]


def allowed_origin(entry: str) -> Origin:
    """What a (normalised) ``allowed_hosts`` entry allows; a bare host means https on 443."""
    if "://" in entry:
        origin = origin_of(entry)
        assert origin is not None, entry
        return origin
    host, port = _split_port(entry)
    return "https", host, port or 443


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host`` or ``host:port`` (an IPv6 literal with a port in brackets: ``[::1]:8443``)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


def normalise_entry(raw: str) -> str:
    """One ``allowed_hosts`` entry, lower-cased: a bare host as given, anything with a port or a scheme
    as a full origin (``https://host:port``); ValueError saying why it is not one."""
    entry = raw.strip().lower()
    if "://" in entry:
        parts = urlsplit(entry)
        if (
            parts.scheme not in DEFAULT_PORTS
            or parts.path
            or parts.query
            or parts.fragment
            or not parts.hostname
        ):
            raise ValueError(f"must be {_ENTRY_FORMS}, without a path (got {raw!r})")
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError:
            raise ValueError(f"must have a port from 1 to 65535 (got {raw!r})") from None
        host = parts.hostname.rstrip(".")
        _check_host(host, raw)
        return f"{parts.scheme}://{_bracketed(host)}:{port}"
    host, port = _split_port(entry)
    host = host.rstrip(".")
    _check_host(host, raw)
    if port is None:
        return host
    if not 0 < port < 65536:
        raise ValueError(f"must have a port from 1 to 65535 (got {raw!r})")
    return f"https://{_bracketed(host)}:{port}"


def _check_host(host: str, raw: str) -> None:
    if problem := host_problem(host):
        raise ValueError(problem.replace(repr(host), repr(raw)))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def normalise_hosts(hosts: list[str] | None, *, param: str = "allowed_hosts") -> list[str]:
    """Lower-cased, de-duplicated entries in the given order; InvalidRequest naming the bad entry."""
    out: list[str] = []
    for i, raw in enumerate(hosts or []):
        try:
            entry = normalise_entry(raw)
        except ValueError as exc:
            raise InvalidRequest(f"{param}[{i}]: {exc}", param=f"{param}[{i}]", code="invalid_host") from None
        if entry not in out:
            out.append(entry)
    if len(out) > MAX_ALLOWED_HOSTS:
        raise InvalidRequest(f"{param}: at most {MAX_ALLOWED_HOSTS} hosts per secret", param=param)
    return out
