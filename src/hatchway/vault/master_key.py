"""The master key: 32 random bytes from ``HATCHWAY_MASTER_KEY`` or a key file made on first start.

The key file holds the key in base64 and must be readable by its owner only (mode 0600); a file
that group or others may read is refused, since anyone who reads it can decrypt every secret.
Writes go to a temporary file in the same directory that is then renamed into place, so a crash
never leaves a half-written key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from hatchway.environment import env_value
from hatchway.errors import MasterKeyError

ENV_VAR = "HATCHWAY_MASTER_KEY"
NEW_KEY_ENV_VAR = "HATCHWAY_NEW_MASTER_KEY"
KEY_BYTES = 32


@dataclass(frozen=True)
class MasterKey:
    """The key bytes and a short public fingerprint (``key_id``) stored beside every data key it wraps."""

    key: bytes = field(repr=False)
    source: str
    """Where it came from, for messages: the env var name or the file path."""

    @property
    def key_id(self) -> str:
        # A fingerprint, not the key: it lets the vault say "wrong master key" before trying to decrypt.
        return hashlib.sha256(b"hatchway-master-key-id\0" + self.key).hexdigest()[:16]

    @classmethod
    def generate(cls, source: str) -> MasterKey:
        return cls(secrets.token_bytes(KEY_BYTES), source)


def decode_key(text: str, source: str) -> MasterKey:
    """A MasterKey from its base64 text; MasterKeyError when it is not 32 bytes of base64."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise MasterKeyError(f"{source}: the master key is not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise MasterKeyError(
            f"{source}: the master key must be {KEY_BYTES} bytes of base64 (got {len(raw)} bytes); "
            'make one with: python -c "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"'
        )
    return MasterKey(raw, source)


def encode_key(key: MasterKey) -> str:
    return base64.b64encode(key.key).decode("ascii")


def load_master_key(key_file: str | Path, *, env: dict[str, str] | None = None) -> MasterKey:
    """The key from ``HATCHWAY_MASTER_KEY`` (or the file ``HATCHWAY_MASTER_KEY_FILE`` names) when set,
    else from ``key_file`` (created when missing).

    A ``_FILE`` secret is not held to ``key_file``'s mode 0600: the container runtime mounts it (Docker
    and Compose secrets are 0444, Kubernetes' Secret volumes 0644 by default) and the container's
    boundary, not the mode, is what keeps it; ``key_file`` is one this process may have made itself."""
    if value := env_value(ENV_VAR, os.environ if env is None else env):
        return decode_key(value, ENV_VAR)
    path = Path(key_file)
    if not path.exists():
        key = MasterKey.generate(str(path))
        try:
            write_key_file(path, key)
            return key
        except FileExistsError:
            pass  # another process made it first: use theirs
    return read_key_file(path)


def read_key_file(path: Path) -> MasterKey:
    """Read a key file, refusing one that group or others can read or write."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise MasterKeyError(f"{path}: cannot read the master key file ({exc})") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise MasterKeyError(
            f"{path}: the master key file has mode {stat.S_IMODE(mode):04o}; it must be readable by its "
            f"owner only — run: chmod 600 {path}"
        )
    return decode_key(text, str(path))


def write_key_file(path: Path, key: MasterKey, *, replace: bool = False) -> None:
    """Write ``key`` to ``path`` with mode 0600, atomically.

    Without ``replace`` an existing file is never overwritten (FileExistsError), so two processes
    starting at once cannot each generate a key and keep only one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(encode_key(key) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the path exists, unlike a rename
            tmp.unlink()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename durable; not possible on every platform, where the rename is still atomic.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
