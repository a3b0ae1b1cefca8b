"""The tamper-evident audit trail: who did what to which object, per organisation, in a hash chain.

``AuditTrail`` records ``AuditEvent``\\ s and lists, exports and verifies them (``trail.py``); the chain
and its signatures are ``chain.py``; ``verify_entries`` checks a chain without a database, for the
stored rows and an exported file alike (``verify.py``, ``exports.py``); the tables are ``store.py``.
"""

from hatchway.audit.entries import AuditEntry, AuditEvent
from hatchway.audit.exports import verify_export
from hatchway.audit.trail import AuditTrail
from hatchway.audit.verify import ChainBreak, OrgVerification, VerifyReport, verify_entries

__all__ = [
    "AuditEntry",
    "AuditEvent",
    "AuditTrail",
    "ChainBreak",
    "OrgVerification",
    "VerifyReport",
    "verify_entries",
    "verify_export",
]
