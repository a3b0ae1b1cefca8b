"""Checking a chain: the same code for the database's rows and for an exported file.

``verify_entries`` reads one organisation's entries in order and reports the first place the chain
breaks, as the seq of the first entry that is not what was written:

- ``edited``: an entry's content no longer hashes to its ``hash``, or a whole stretch was rewritten
  and re-hashed (its hashes differ from a signed checkpoint or head);
- ``removed``: a seq is missing, or an entry's ``prev_hash`` is not its predecessor's hash;
- ``reordered``: entries are out of order (a seq moved back, or two entries swapped places);
- ``truncated``: the signed head or a signed checkpoint names a position past the last entry;
- ``unsigned``: entries past the signed head (appended by someone without the master key);
- ``head_missing``: entries without the head that signs where they end;
- ``bad_signature``: a head or checkpoint whose signature is not the master key's.

A head or checkpoint signed under another master key id is a break (``bad_signature``): a rotation
signs every head and checkpoint again (``AuditTrail.resign``), so only a forged or lost head has one.
Without a master key no signature is checked, and a truncated tail is then caught only if the head
was left as it was.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hatchway.audit.chain import ENTRY_FIELDS, Signer, entry_hash, genesis_hash
from hatchway.vault.master_key import MasterKey

Reason = Literal["edited", "removed", "reordered", "truncated", "unsigned", "head_missing", "bad_signature"]
_HEX = re.compile(r"^[0-9a-f]{64}$")
_KEYS = frozenset((*ENTRY_FIELDS, "hash"))


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first place an organisation's chain is not as it was written."""

    seq: int
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class OrgVerification:
    """One organisation's chain: how much was checked and, when broken, where first."""

    org_id: str
    entries: int
    """Entries that checked out before the first break (all of them when intact)."""
    last_seq: int
    problem: ChainBreak | None = None
    signatures_checked: int = 0
    not_checkable: tuple[str, ...] = ()
    """Signatures this master key cannot check (another key made them, or no key was given)."""

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Every organisation checked; ``ok`` when all chains are intact."""

    organisations: tuple[OrgVerification, ...] = ()

    @property
    def ok(self) -> bool:
        return all(org.ok for org in self.organisations)


@dataclass(slots=True)
class _Suspect:
    """The first entry that did not fit, kept while the rest is read to tell why."""

    entry: Mapping[str, Any]
    position: int
    expected_prev: str
    hash_ok: bool
    resolved: ChainBreak | None = None


def _shape_problem(entry: Mapping[str, Any]) -> str | None:
    if not isinstance(entry, Mapping):
        return "not a JSON object"
    if missing := sorted(_KEYS - entry.keys()):
        return f"missing field {missing[0]!r}"
    if extra := sorted(entry.keys() - _KEYS):
        return f"unexpected field {extra[0]!r}"
    if not isinstance(entry["seq"], int) or isinstance(entry["seq"], bool):
        return "seq is not an integer"
    if not all(isinstance(entry[k], str) and _HEX.match(entry[k]) for k in ("hash", "prev_hash")):
        return "hash or prev_hash is not a SHA-256 in hex"
    if not isinstance(entry["detail"], dict):
        return "detail is not an object"
    return None


def _hash_of(entry: Mapping[str, Any], **changes: Any) -> str | None:
    try:
        return entry_hash({**entry, **changes})
    except (TypeError, ValueError):  # a value JSON cannot hold: damaged
        return None


class ChainVerifier:
    """Reads one organisation's entries one at a time (``feed``) and reports (``finish``)."""

    def __init__(
        self,
        org_id: str,
        *,
        head: Mapping[str, Any] | None = None,
        checkpoints: Iterable[Mapping[str, Any]] = (),
        signer: Signer | None = None,
        require_head: bool = False,
        partial: bool = False,
    ) -> None:
        """``partial``: the entries may begin just after a signed checkpoint (an export ``--since``)
        rather than at seq 1. ``require_head``: entries without a head are a break."""
        self.org_id = org_id
        self.head = head
        self.checkpoints = {int(c["seq"]): c for c in checkpoints}
        self.signer = signer
        self.require_head = require_head
        self.partial = partial
        self._wanted = set(self.checkpoints) | ({int(head["seq"])} if head else set())
        self._hashes: dict[int, str] = {}
        self._expected: int | None = None
        self._prev = ""
        self._first = 1
        self._count = 0
        self._suspect: _Suspect | None = None

    def feed(self, entry: Mapping[str, Any]) -> bool:
        """Take the next entry; False once the outcome is known and more entries would not change it."""
        if self._suspect is not None:
            return self._look_ahead(self._suspect, entry)
        if self._expected is None:
            self._start(entry)
        assert self._expected is not None
        problem = _shape_problem(entry)
        if problem is None and entry["org_id"] != self.org_id:
            problem = f"belongs to organisation {entry['org_id']!r}"
        if problem is not None:
            self._suspect = _Suspect(entry, self._expected, self._prev, False)
            self._suspect.resolved = ChainBreak(
                self._expected, "edited", f"entry {self._expected}: {problem}"
            )
            return False
        hash_ok = _hash_of(entry) == entry["hash"]
        if hash_ok and entry["seq"] == self._expected and entry["prev_hash"] == self._prev:
            self._advance(entry)
            return True
        self._suspect = _Suspect(entry, self._expected, self._prev, hash_ok)
        return self._judge_alone(self._suspect)

    def _start(self, entry: Mapping[str, Any]) -> None:
        self._expected, self._prev = 1, genesis_hash(self.org_id)
        seq = entry.get("seq") if isinstance(entry, Mapping) else None
        anchor = self.checkpoints.get(seq - 1) if isinstance(seq, int) else None
        if self.partial and anchor is not None and isinstance(seq, int) and seq > 1:
            self._expected, self._prev, self._first = seq, str(anchor["hash"]), seq

    def _advance(self, entry: Mapping[str, Any]) -> None:
        seq = entry["seq"]
        if seq in self._wanted:
            self._hashes[seq] = entry["hash"]
        self._expected, self._prev = seq + 1, entry["hash"]
        self._count += 1

    def _judge_alone(self, s: _Suspect) -> bool:
        """Decide what the entry alone tells; True when the entries after it must be read."""
        seq, at = s.entry["seq"], s.position
        if not s.hash_ok and s.entry["prev_hash"] == s.expected_prev:
            s.resolved = ChainBreak(at, "edited", f"entry {at}: its content does not match its hash")
        elif s.hash_ok and seq < at:
            s.resolved = ChainBreak(at, "reordered", f"entry {seq} comes after entry {at - 1}")
        elif s.hash_ok and seq == at:
            s.resolved = ChainBreak(
                at,
                "removed",
                f"entry {at}: prev_hash is not entry {at - 1}'s hash (one was removed or replaced)",
            )
        return s.resolved is None

    def _look_ahead(self, s: _Suspect, later: Mapping[str, Any]) -> bool:
        """Read on for what explains the suspect: the place it was written at, or the missing seq."""
        if s.resolved is not None or _shape_problem(later) is not None:
            return s.resolved is None
        at, entry = s.position, s.entry
        if not s.hash_ok:
            # Its content hashes right with the seq a later entry now carries: the two changed places.
            if _hash_of(entry, seq=later["seq"]) == entry["hash"]:
                s.resolved = ChainBreak(
                    at,
                    "reordered",
                    f"entry {at} was written as entry {later['seq']} (entries swapped places)",
                )
        elif later["seq"] == at:
            s.resolved = ChainBreak(at, "reordered", f"entry {at} comes after entry {entry['seq']}")
        elif later["prev_hash"] == s.expected_prev:
            s.resolved = ChainBreak(at, "edited", f"entry {at} now says seq {later['seq']}")
        return s.resolved is None

    def _conclude(self, s: _Suspect) -> ChainBreak:
        if s.resolved is not None:
            return s.resolved
        if s.hash_ok:  # a later seq than expected, and the expected one is nowhere
            last = s.entry["seq"] - 1
            gap = f"entry {s.position}" if last == s.position else f"entries {s.position} to {last}"
            return ChainBreak(s.position, "removed", f"{gap} missing")
        return ChainBreak(s.position, "edited", f"entry {s.position}: its content does not match its hash")

    def finish(self) -> OrgVerification:
        """The report: the first break in the entries, else the first the head and checkpoints show."""
        last = (self._expected or self._first) - 1
        problem = self._conclude(self._suspect) if self._suspect else None
        notes: list[str] = []
        checked = 0
        if problem is None:
            problem, checked = self._check_signed(last, notes)
        return OrgVerification(self.org_id, self._count, last, problem, checked, tuple(notes))

    def _signature(self, record: Mapping[str, Any]) -> bool | None:
        if self.signer is None:
            return None
        return self.signer.check(
            self.org_id,
            int(record["seq"]),
            str(record["hash"]),
            str(record["key_id"]),
            str(record["signature"]),
        )

    def _check_signed(self, last: int, notes: list[str]) -> tuple[ChainBreak | None, int]:
        """Signatures, then whether the head and checkpoints agree with the entries read."""
        found: list[ChainBreak] = []
        checked = 0
        unchecked: Counter[tuple[str, str]] = Counter()
        signed = [("checkpoint", c) for _, c in sorted(self.checkpoints.items())]
        if self.head is not None:
            signed.append(("head", self.head))
        elif self.require_head and self._count:
            found.append(
                ChainBreak(last + 1, "head_missing", "the signed head is missing: entries may be cut")
            )
        good_before = self._first - 1
        for kind, record in signed:
            seq = int(record["seq"])
            verdict = self._signature(record)
            checked += verdict is True
            if verdict is None and self.signer is not None:
                # Signed under a key id this master key is not: a rotation re-signs every head and
                # checkpoint (AuditTrail.resign), so this is a head that was lost or a forged one.
                found.append(_unverifiable(kind, seq, str(record["key_id"])))
                continue
            if verdict is None:
                unchecked[kind, str(record["key_id"])] += 1
            if verdict is False:
                found.append(ChainBreak(seq, "bad_signature", f"the {kind} at {seq} has a bad signature"))
            elif seq > last:
                found.append(
                    ChainBreak(
                        last + 1, "truncated", f"the {kind} says entry {seq} exists; the chain ends at {last}"
                    )
                )
            elif seq >= self._first and self._hashes.get(seq, record["hash"]) != record["hash"]:
                found.append(
                    ChainBreak(
                        good_before + 1,
                        "edited",
                        f"entries {good_before + 1} to {seq} were rewritten "
                        f"(entry {seq} differs from its signed {kind})",
                    )
                )
            elif kind == "checkpoint" and seq <= last:
                good_before = max(good_before, seq)
        if self.head is not None and int(self.head["seq"]) < last:
            found.append(ChainBreak(int(self.head["seq"]) + 1, "unsigned", "entries past the signed head"))
        for (kind, key_id), count in sorted(unchecked.items()):
            by = f"master key {key_id}" if self.signer else "the master key (not given)"
            notes.append(f"{count} {kind}{'s' if count > 1 else ''} signed with {by}: not checked")
        return (min(found, key=lambda b: b.seq) if found else None), checked


def _unverifiable(kind: str, seq: int, key_id: str) -> ChainBreak:
    if key_id == "lost":  # audit/trail.py LOST_HEAD
        return ChainBreak(seq, "head_missing", "the signed head was removed; the entries since are unsigned")
    return ChainBreak(
        seq,
        "bad_signature",
        f"the {kind} at {seq} is signed with master key {key_id}, not this one (forged, or a rotation "
        "that did not sign the trail again)",
    )


def verify_entries(
    org_id: str,
    entries: Iterable[Mapping[str, Any]],
    head: Mapping[str, Any] | None = None,
    checkpoints: Iterable[Mapping[str, Any]] = (),
    key: MasterKey | None = None,
    *,
    require_head: bool = False,
    partial: bool = False,
) -> OrgVerification:
    """Verify one organisation's entries (exported dicts, in order) against its head and checkpoints.

    Pure: no database, so an exported file is checked by the same code as the stored rows.
    """
    verifier = ChainVerifier(
        org_id,
        head=head,
        checkpoints=checkpoints,
        signer=Signer(key) if key is not None else None,
        require_head=require_head,
        partial=partial,
    )
    for entry in entries:
        if not verifier.feed(entry):
            break
    return verifier.finish()
