"""Master key rotation: re-wrap every data key under a new master key, then swap the key file.

Order matters so that a crash at any point leaves a state that one more run completes:

1. the new key is written to ``<file>.new`` (0600) — or, if that file is left from an interrupted
   run, that key is reused;
2. every data key is re-wrapped in one transaction (rows already under the new key are skipped);
3. the current file is hard-linked to ``<file>.old`` and ``<file>.new`` is renamed over ``<file>``
   (an atomic swap: ``<file>`` always exists).

With ``HATCHWAY_MASTER_KEY`` the new key comes from ``HATCHWAY_NEW_MASTER_KEY`` instead and the
operator swaps the two variables afterwards. Stop every gateway process first: a running one
keeps the old key in memory and would wrap a new organisation's data key with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hatchway.environment import env_value
from hatchway.errors import MasterKeyError
from hatchway.vault.master_key import (
    ENV_VAR,
    NEW_KEY_ENV_VAR,
    MasterKey,
    decode_key,
    read_key_file,
    write_key_file,
)
from hatchway.vault.store import Vault


@dataclass(frozen=True)
class RotationResult:
    """What a rotation did, for the operator (key ids are fingerprints, never keys)."""

    old_key_id: str
    new_key_id: str
    rewrapped: int
    key_file: Path | None
    """The key file now holding the new key; None when the key comes from the environment."""
    backup_file: Path | None


def pending_path(key_file: Path) -> Path:
    return key_file.with_name(key_file.name + ".new")


def backup_path(key_file: Path) -> Path:
    return key_file.with_name(key_file.name + ".old")


def current_and_new_keys(key_file: Path, env: Mapping[str, str]) -> tuple[MasterKey, MasterKey]:
    """The key in use and the one to rotate to (step 1 above)."""
    if current := env_value(ENV_VAR, env):  # or ENV_VAR_FILE: a Docker or Kubernetes secret
        if not (new_key := env_value(NEW_KEY_ENV_VAR, env)):
            raise MasterKeyError(
                f"the master key comes from {ENV_VAR}: put the new key (32 bytes, base64) in "
                f"{NEW_KEY_ENV_VAR} (or {NEW_KEY_ENV_VAR}_FILE) to rotate, then swap the variables"
            )
        return decode_key(current, ENV_VAR), decode_key(new_key, NEW_KEY_ENV_VAR)
    if not key_file.exists():
        raise MasterKeyError(f"{key_file}: no master key file to rotate (and {ENV_VAR} is not set)")
    current = read_key_file(key_file)
    pending = pending_path(key_file)
    if pending.exists():
        return current, read_key_file(pending)  # an interrupted rotation: finish it with the same key
    new = MasterKey.generate(str(key_file))
    write_key_file(pending, new)
    return current, new


def swap_key_files(key_file: Path) -> Path:
    """Step 3: keep the current key as ``<file>.old`` and move ``<file>.new`` into place."""
    backup = backup_path(key_file)
    backup.unlink(missing_ok=True)
    os.link(key_file, backup)
    os.replace(pending_path(key_file), key_file)
    return backup


async def rotate_master_key(vault: Vault, key_file: Path, env: Mapping[str, str]) -> RotationResult:
    """Rotate the vault's master key (the vault must have been opened with the current key)."""
    current, new = current_and_new_keys(key_file, env)
    if vault.master_key.key_id != current.key_id:
        raise MasterKeyError("the vault was opened with a different master key than the one being rotated")
    rewrapped = await vault.rewrap(new)
    if env_value(ENV_VAR, env):  # the key is HATCHWAY_MASTER_KEY or its _FILE: no key file to swap
        return RotationResult(current.key_id, new.key_id, rewrapped, None, None)
    backup = swap_key_files(key_file)
    return RotationResult(current.key_id, new.key_id, rewrapped, key_file, backup)
