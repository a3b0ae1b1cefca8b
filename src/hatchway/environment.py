"""Settings a deployment passes in the environment: ``NAME`` or, for secrets, ``NAME_FILE``.

Docker and Compose secrets, and Kubernetes Secret volumes, are files: ``HATCHWAY_MASTER_KEY_FILE=
/run/secrets/master_key`` reads the key from one, so it is never in the process environment (which
``docker inspect`` and ``/proc/<pid>/environ`` show).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hatchway.errors import ConfigError


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``NAME`` from the environment, or the contents of the file ``NAME_FILE`` names without its
    trailing newline; None when neither is set (or ``NAME`` is set empty). Both set is a ConfigError,
    as is a file that cannot be read or is empty (the message names the variable and the path, never
    the contents): a secret file the operator named but left empty — a Secret created with an empty
    value, a file not written yet — is a mistake to report, not "unset" (an empty master key file
    would otherwise have each process generate a key of its own)."""
    environ = os.environ if environ is None else environ
    value, path = environ.get(name), environ.get(f"{name}_FILE")
    if value and path:
        raise ConfigError("environment", [(name, f"{name} and {name}_FILE are both set: keep one")])
    if not path:
        return value or None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"cannot read {path} ({type(exc).__name__})"
        raise ConfigError("environment", [(f"{name}_FILE", problem)]) from None
    if not (value := text.rstrip("\r\n")):
        raise ConfigError("environment", [(f"{name}_FILE", f"{path} is empty")])
    return value
