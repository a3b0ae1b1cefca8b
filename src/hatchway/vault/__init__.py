"""Encrypted secrets per organisation: AES-256-GCM envelope encryption under one master key.

``Vault`` stores and reads secrets; ``load_master_key`` finds the master key
(``HATCHWAY_MASTER_KEY`` or the key file, made on first start); ``rotate_master_key`` moves every
data key to a new master key. Names and ``secret.<name>`` references are checked in ``names``.
"""

from hatchway.vault.master_key import MasterKey, load_master_key
from hatchway.vault.names import parse_ref, ref_problem
from hatchway.vault.rotation import RotationResult, rotate_master_key
from hatchway.vault.store import SYSTEM_ORG, Secret, SecretInfo, Vault

__all__ = [
    "SYSTEM_ORG",
    "MasterKey",
    "RotationResult",
    "Secret",
    "SecretInfo",
    "Vault",
    "load_master_key",
    "parse_ref",
    "ref_problem",
    "rotate_master_key",
]
