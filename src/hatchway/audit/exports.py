"""The export file: JSON Lines that carry what is needed to verify them offline.

The first line is a header (``{"type": "export", "format": …, "org_id", "since", "exported_at"}``);
then, per organisation, its signed head, its signed checkpoints and its entries in order::

    {"type": "head", "org_id": …, "seq": 120, "hash": …, "key_id": …, "signature": …}
    {"type": "checkpoint", "org_id": …, "seq": 100, "hash": …, "at": …, "key_id": …, "signature": …}
    {"type": "entry", "org_id": …, "seq": 1, "at": …, "actor": …, …, "prev_hash": …, "hash": …}

The head is read before the entries and the entries are exported up to it, so an export taken while
replicas append is still one consistent chain. A file whose tail was cut is caught by its head: with
the master key, the head's signature proves where the chain ended; a head line removed as well is
caught too, since every organisation in a file must have one. An export ``--since`` starts just after
the last signed checkpoint before that time, so it vouches for its entries from that checkpoint on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hatchway.audit.chain import Signer, format_time
from hatchway.audit.verify import ChainBreak, ChainVerifier, OrgVerification, VerifyReport
from hatchway.vault.master_key import MasterKey

EXPORT_FORMAT = "hatchway-audit-export/1"
_SIGNED_FIELDS = {
    "head": {"org_id": str, "seq": int, "hash": str, "key_id": str, "signature": str},
    "checkpoint": {"org_id": str, "seq": int, "hash": str, "at": str, "key_id": str, "signature": str},
}


def export_header(org_id: str | None, since: datetime | None, now: datetime) -> dict[str, Any]:
    """The first record of an export."""
    return {
        "type": "export",
        "format": EXPORT_FORMAT,
        "org_id": org_id,
        "since": format_time(since) if since else None,
        "exported_at": format_time(now),
    }


@dataclass(slots=True)
class ExportedChain:
    """One organisation's records in an export file."""

    head: dict[str, Any] | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


class MalformedExport(ValueError):
    """A line of an export file that is not a record of one (its number and why)."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line


def _signed_problem(kind: str, record: Mapping[str, Any]) -> str | None:
    for name, kind_of in _SIGNED_FIELDS[kind].items():
        value = record.get(name)
        if not isinstance(value, kind_of) or isinstance(value, bool):
            return f"{kind} record without a valid {name!r}"
    return None


def read_export(lines: Iterable[str]) -> tuple[dict[str, Any], dict[str, ExportedChain]]:
    """The header and each organisation's records of an export file.

    Raises:
        MalformedExport: the header is missing, or a line is not JSON or not a record of an export.
    """
    header: dict[str, Any] | None = None
    orgs: dict[str, ExportedChain] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise MalformedExport(number, "not JSON") from None
        if not isinstance(record, dict):
            raise MalformedExport(number, "not a record of an audit export")
        kind = record.pop("type", None)
        if kind == "export" and number == 1:
            header = record
            continue
        if kind not in ("head", "checkpoint", "entry"):
            raise MalformedExport(number, f"unexpected record type {kind!r}")
        if not isinstance(record.get("org_id"), str):
            raise MalformedExport(number, f"a {kind} record without an organisation")
        if kind != "entry" and (problem := _signed_problem(kind, record)):
            raise MalformedExport(number, problem)
        records = orgs.setdefault(record["org_id"], ExportedChain())
        if kind == "head":
            if records.head is not None:
                raise MalformedExport(number, f"a second head for organisation {record['org_id']}")
            records.head = record
        elif kind == "checkpoint":
            records.checkpoints.append(record)
        else:
            records.entries.append(record)
    if header is None or header.get("format") != EXPORT_FORMAT:
        raise MalformedExport(1, f"not a {EXPORT_FORMAT} file (its first line is not the export header)")
    return header, orgs


def verify_export(lines: Iterable[str], key: MasterKey | None, org_id: str | None = None) -> VerifyReport:
    """Verify an export file offline (every organisation in it, or ``org_id`` only).

    A malformed line is reported as a break of the organisation ``""`` at seq 0 — the file, not a
    chain, is damaged. An export of every organisation cut down to its header holds no chain to
    check: the report is then empty (what the command line shows as "no audit entries").
    """
    try:
        header, orgs = read_export(lines)
    except MalformedExport as exc:
        return VerifyReport((OrgVerification("", 0, 0, ChainBreak(0, "edited", str(exc))),))
    partial = bool(header.get("since"))
    signer = Signer(key) if key is not None else None
    # An export of one organisation must hold it: emptied of its records, the file fails.
    only = org_id or header.get("org_id")
    chosen = [only] if isinstance(only, str) else sorted(orgs)
    reports = []
    for org in chosen:
        records = orgs.get(org)
        if records is None:
            reports.append(OrgVerification(org, 0, 0, ChainBreak(1, "removed", "no entries in the file")))
            continue
        verifier = ChainVerifier(
            org,
            head=records.head,
            checkpoints=records.checkpoints,
            signer=signer,
            require_head=True,
            partial=partial,
        )
        for entry in records.entries:
            if not verifier.feed(entry):
                break
        reports.append(verifier.finish())
    return VerifyReport(tuple(reports))
