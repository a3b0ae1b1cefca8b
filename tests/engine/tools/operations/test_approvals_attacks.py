"""Attacks on approvals beyond the end user (issue 43), over the same kind of stack as
``test_approvals.py`` (both built by ``tests/support/approvals.py``): two ``hatchway serve`` replicas
on one PostgreSQL and one Redis, the shop's MCP server and its ledger, a JWKS identity provider
whose tokens carry ``groups``, the scripted model — plus SSO sessions (made in the database, as a
sign-in would), a webhook receiver on loopback, and a third organisation whose inbox is crowded.

Each test is one attack: who may decide (another organisation, the requester under another
credential, one key holder with several people's tokens, a viewer), what a condition does with
arguments crafted to break it, what a refusal tells, what the audit trail keeps, races between
decisions and timeouts, and how a background response waits.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hatchway.principal import Role
from tests.support.approvals import AUDIENCE, TOKEN, Org, Stage, World, shop_policies, shop_tools, shop_world
from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.replicas import eventually
from tests.support.servers import ServerThread

pytestmark = NEEDS_PG_AND_REDIS

UUID_SUBJECT = "3f8e1c52-9a4b-4d0e-8c1a-6b2f0e9d7a11"
"""A subject as many providers issue them (an object id)."""
LOOP_DEADLINE = 10.0
"""The replicas' ``loop_deadline_seconds``: a background job's queue timeout is this + 2 leases + 60."""

TOOLS = shop_tools(
    "issue_refund",
    "grant_credit",
    "flag_transfer",
    "cancel_orders",
    "wipe_store",
    "close_account",
    "slow_payout",
    "quick_payout",
)
SUPERVISORS = {"group": "supervisors"}
POLICIES = shop_policies(
    {
        "issue_refund": {
            "operation_type": "transactional",
            "require_confirmation": True,
            "approvals": [
                {"name": "supervisor_over_500", "when": "arguments.amount > 500", "approvers": SUPERVISORS}
            ],
        },
        # the natural way to write "small credits: the end user; any other: a supervisor"
        "grant_credit": {
            "operation_type": "transactional",
            "approvals": [
                {"name": "small", "when": "arguments.amount <= 100", "approvers": {"end_user": True}},
                {"name": "large", "approvers": SUPERVISORS},
            ],
        },
        # an urgent transfer is reviewed; others go straight out
        "flag_transfer": {
            "operation_type": "transactional",
            "require_confirmation": False,
            "approvals": [{"name": "urgent", "when": "arguments.urgent", "approvers": SUPERVISORS}],
        },
        "cancel_orders": {
            "operation_type": "transactional",
            "approvals": [{"name": "four_eyes", "approvers": SUPERVISORS, "required": 2}],
        },
        # two admins of the organisation
        "wipe_store": {
            "operation_type": "transactional",
            "approvals": [{"name": "two_admins", "approvers": {"role": "admin"}, "required": 2}],
        },
        "close_account": {
            "operation_type": "transactional",
            "approvals": [
                {
                    "name": "escalating_four_eyes",
                    "approvers": SUPERVISORS,
                    "required": 2,
                    "timeout_seconds": 4,
                    "on_timeout": "escalate",
                    "escalate_to": {"group": "managers"},
                    "escalation_timeout_seconds": 600,
                }
            ],
        },
        "slow_payout": {
            "operation_type": "transactional",
            "approvals": [{"name": "payout", "approvers": SUPERVISORS}],
        },
        "quick_payout": {
            "operation_type": "transactional",
            "approvals": [{"name": "hurry", "approvers": SUPERVISORS, "timeout_seconds": 1}],
        },
    }
)


@dataclass
class Hooks:
    """A webhook receiver on loopback: every POST it got."""

    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        with self.lock:
            self.received.append((dict(request.headers), body))
        return Response(status_code=204)

    def events(self, op_id: str) -> list[str]:
        with self.lock:
            return [h.get("x-hatchway-event", "") for h, body in self.received if op_id.encode() in body]


@dataclass
class Attack(World):
    """The shop's world (``tests.support.approvals``), and more: the webhook receiver, SSO sessions,
    and the crowded organisation."""

    hooks: Hooks

    @property
    def sso(self) -> dict[str, Any]:
        """The replicas' ``access.sso``."""
        return self.config["access"]["sso"]

    @property
    def crowd(self) -> Org:
        """The organisation whose inbox is crowded."""
        return self.orgs["crowd"]

    def audit(self, op_id: str) -> list[dict[str, Any]]:
        """The organisation's audit entries about ``op_id``."""
        found: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            params: dict[str, Any] = {"limit": 500} | ({"after": after} if after is not None else {})
            page = httpx.get(
                f"{self.a.url}/v1/admin/orgs/{self.org_id}/audit",
                params=params,
                headers={"authorization": f"Bearer {self.admin_key}"},
                timeout=30,
            )
            assert page.status_code == 200, page.text
            body = page.json()
            found += [e for e in body["data"] if e["target"] == f"operation:{op_id}"]
            if not body["has_more"]:
                return found
            after = body["last_seq"]

    def approval(self, op_id: str) -> dict[str, Any]:
        """The approval as an admin key (no person) reads it."""
        got = httpx.get(
            f"{self.a.url}/v1/approvals/{op_id}",
            headers={"authorization": f"Bearer {self.admin_key}"},
            timeout=30,
        )
        assert got.status_code == 200, got.text
        return got.json()

    def person(self, subject: str, *groups: str, role: Role = Role.ADMIN) -> dict[str, str]:
        """Headers of an SSO session of ``subject`` (made in the database as a sign-in makes it)."""
        return asyncio.run(_sso_session(self, subject, groups, role))


async def _sso_session(world: Attack, subject: str, groups: tuple[str, ...], role: Role) -> dict[str, str]:
    from hatchway.access.sessions import Grants, OrgGrant, SsoSessions
    from hatchway.config.access import SsoSettings
    from hatchway.store.db import Database

    db = Database(world.database_url)
    try:
        sessions = SsoSessions(db, SsoSettings.model_validate(world.sso))
        grants = Grants((OrgGrant(world.org_id, world.org_name, role),))
        cookie, session = await sessions.create(subject, subject, None, grants, groups)
        return {"cookie": f"hatchway_session={cookie}", "x-csrf-token": session.csrf_token}
    finally:
        await db.close()


@pytest.fixture(scope="module")
def attack(pg_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attack]:
    hooks = Hooks()
    receiver = ServerThread(Starlette(routes=[Route("/hook", hooks.hook, methods=["POST"])])).start()

    def overrides(stage: Stage) -> dict[str, Any]:
        sso = {
            "issuer": stage.idp_url,
            "client_id": "hatchway-attacks",
            "role_mappings": [{"group": "shop-admins", "role": "admin", "organisation": stage.org_name}],
        }
        return {
            "loop_deadline_seconds": LOOP_DEADLINE,
            "operations": {"approvals": {"webhooks": [{"name": "loopback", "url": f"{receiver.url}/hook"}]}},
            "access": {"sso": sso},
        }

    try:
        with shop_world(
            pg_database_url,
            tmp_path_factory.mktemp("approval-attacks"),
            TOOLS,
            POLICIES,
            org="atk",
            overrides=overrides,
            more_orgs=["crowd"],
            world=Attack,
            hooks=hooks,
        ) as world:
            yield world
    finally:
        receiver.stop()


def _post(world: Attack, path: str, headers: dict[str, str], **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{world.a.url}{path}", headers=headers, timeout=60, **kwargs)


def _approve(world: Attack, op_id: str, headers: dict[str, str], digest: str) -> httpx.Response:
    """An approval of ``op_id`` (of the arguments ``digest``) sent with ``headers``: any credential."""
    return _post(world, f"/v1/approvals/{op_id}/approve", headers, json={"arguments_digest": digest})


def _user(world: Attack, subject: str, groups: Any, key: str | None = None) -> dict[str, str]:
    """A key and a user token whose ``groups`` claim is exactly ``groups`` (any JSON)."""
    token = world.idp.token(subject, AUDIENCE, groups=groups)
    return {"authorization": f"Bearer {key or world.app_key}", TOKEN: token}


# -- notifications ---------------------------------------------------------------------------------


def test_a_webhook_hears_of_an_approval_requested_and_decided(attack: Attack) -> None:
    """Configured webhooks are told when an operation starts waiting for approvers, and when it is
    decided (``operations.approvals.webhooks``)."""
    op_id = attack.ask("hook", 'CALL issue_refund {"order_id": "R-HOOK", "amount": 900}')
    eventually(
        lambda: "approval.requested" in attack.hooks.events(op_id),
        20,
        "the webhook to hear approval.requested",
        attack.replicas,
    )
    assert attack.decide(attack.b, op_id, "sam", "supervisors").json()["status"] == "COMPLETED"
    eventually(
        lambda: "approval.decided" in attack.hooks.events(op_id),
        20,
        "the webhook to hear approval.decided",
        attack.replicas,
    )


# -- conditions crafted by the model ----------------------------------------------------------------


def test_a_condition_the_model_breaks_never_picks_the_lighter_rule(attack: Attack) -> None:
    """``small`` (the end user confirms) is tried first; an amount the model sends as a string makes
    its condition fail to evaluate, which "counts as true" — so the end user alone confirms a 5000
    credit that only a supervisor may approve. It must wait for the supervisors."""
    answer = attack.chat(attack.a, "credit-string", 'CALL grant_credit {"customer": "C-1", "amount": "5000"}')
    assert answer.status_code == 200, answer.text
    op_id = answer.headers["x-hatchway-operation-id"]
    yes = attack.chat(attack.b, "credit-string", "sim")
    assert yes.status_code == 200, yes.text
    assert attack.shop.count("grant_credit", customer="C-1") == 0, "the end user alone credited 5000"
    assert attack.status(op_id) == "AWAITING_APPROVAL"


def test_a_condition_giving_a_non_boolean_waits_for_approval(attack: Attack) -> None:
    """``when: arguments.urgent`` over a boolean argument; the model sends ``"urgent": "yes"``, which
    the MCP server reads as true. A condition that does not give a boolean cannot be evaluated and
    must count as true (the docs say so): the transfer waits for a supervisor."""
    answer = attack.chat(attack.a, "urgent-string", 'CALL flag_transfer {"to": "acct-666", "urgent": "yes"}')
    assert answer.status_code == 200, answer.text
    assert attack.shop.count("flag_transfer", to="acct-666") == 0, "an urgent transfer went out unreviewed"
    assert attack.status(answer.headers["x-hatchway-operation-id"]) == "AWAITING_APPROVAL"


def test_conditions_that_hold_or_fail_to_evaluate_route_to_the_approvers(attack: Attack) -> None:
    """Regression guard: a real number over the threshold, and values that make the condition fail
    to evaluate (a string, null, a list) all wait for a supervisor."""
    for i, amount in enumerate(["800", None, [9000], 10**30, 800.5]):
        arguments = json.dumps({"order_id": f"R-COND-{i}", "amount": amount})
        answer = attack.chat(attack.a, f"cond-{i}", f"CALL issue_refund {arguments}")
        assert answer.status_code == 200, answer.text
        assert attack.status(answer.headers["x-hatchway-operation-id"]) == "AWAITING_APPROVAL", amount


# -- who may decide --------------------------------------------------------------------------------


def test_one_admin_key_with_two_peoples_tokens_is_not_two_admins(attack: Attack) -> None:
    """``approvers: {role: admin}, required: 2``. The role belongs to the key, not to the person of a
    user token: whoever holds the admin key and any two end users' tokens (two customers, or two
    accounts of their own) is counted as two distinct admins, and the store is wiped with no admin
    of the organisation having decided anything."""
    op_id = attack.ask("two-admins", 'CALL wipe_store {"store": "S-1"}')
    digest = attack.operation(op_id)["arguments_digest"]
    for customer in ("customer-1", "customer-2"):
        attack.decide(attack.b, op_id, customer, digest=digest, key=attack.admin_key)
    assert attack.shop.count("wipe_store", store="S-1") == 0, (
        "two end users' tokens sent with one admin key counted as two admins"
    )


def test_a_refusal_does_not_hand_over_another_end_users_operation(attack: Attack) -> None:
    """An app key's end user reads only their own operations (``GET /v1/operations/{id}`` is 404 for
    another's). Asking ``/v1/approvals/{id}/approve`` or ``…/reject`` about someone else's operation
    that awaits no approval must not answer with that operation (arguments, result, requester)."""
    mine = attack.chat(
        attack.a, "leak-small", 'CALL issue_refund {"order_id": "R-LEAK-SECRET", "amount": 50}'
    )
    pending = mine.headers["x-hatchway-operation-id"]
    done = attack.ask("leak-done", 'CALL issue_refund {"order_id": "R-LEAK-DONE", "amount": 5000}')
    assert attack.decide(attack.a, done, "sam", "supervisors").json()["status"] == "COMPLETED"
    mallory = attack.headers("mallory")
    assert (
        httpx.get(f"{attack.a.url}/v1/operations/{pending}", headers=mallory, timeout=30).status_code == 404
    )
    for op_id, secret in ((pending, "R-LEAK-SECRET"), (done, "R-LEAK-DONE")):
        for action in ("approve", "reject"):
            answer = _post(
                attack, f"/v1/approvals/{op_id}/{action}", mallory, json={"arguments_digest": "0" * 64}
            )
            assert answer.status_code in (403, 404, 409), answer.text
            assert secret not in answer.text, (
                f"{action} of {op_id} answered with ana's operation: {answer.text}"
            )


def test_the_requester_never_approves_under_any_credential(attack: Attack) -> None:
    """Regression guard: ana asked for it with her user token; neither her SSO session (same subject,
    in the group) nor her token with the admin key may approve it."""
    op_id = attack.ask("self-approval", 'CALL issue_refund {"order_id": "R-SELF", "amount": 901}')
    digest = attack.operation(op_id)["arguments_digest"]
    sso = _approve(attack, op_id, attack.person("ana", "supervisors"), digest)
    assert sso.status_code == 403 and sso.json()["error"]["code"] == "not_an_approver", sso.text
    admin = attack.decide(attack.b, op_id, "ana", "supervisors", digest=digest, key=attack.admin_key)
    assert admin.status_code == 403, admin.text
    assert attack.status(op_id) == "AWAITING_APPROVAL"
    assert attack.shop.count("issue_refund", order_id="R-SELF") == 0


def test_one_person_with_a_session_and_a_token_counts_once(attack: Attack) -> None:
    """Regression guard: sam approves a four-eyes operation in the dashboard (SSO) and again with his
    user token: one approver, nothing executes."""
    op_id = attack.ask("sso-and-token", 'CALL cancel_orders {"orders": ["ST-1"]}')
    digest = attack.operation(op_id)["arguments_digest"]
    sso = _approve(attack, op_id, attack.person("sam", "supervisors"), digest)
    assert sso.status_code == 200, sso.text
    assert sso.json()["decisions"][0]["via"] == "sso"
    token = attack.decide(attack.b, op_id, "sam", "supervisors", digest=digest)
    assert token.status_code == 200, token.text
    assert token.json()["approval"]["approvals_counted"] == 1
    assert token.json()["status"] == "AWAITING_APPROVAL"
    assert attack.shop.count("cancel_orders", orders=["ST-1"]) == 0
    # a viewer's session decides nothing, even in the group
    viewer = _approve(attack, op_id, attack.person("vic", "supervisors", role=Role.VIEWER), digest)
    assert viewer.status_code == 403, viewer.text


def test_groups_claims_of_every_shape(attack: Attack) -> None:
    """Regression guard: a groups claim that is one string is one group; non-strings in the list are
    ignored; an object is no group at all (and through an app's key, a person who may not decide an
    operation is not told it exists: 404)."""
    cases: list[tuple[Any, int]] = [
        ({"supervisors": True}, 404),
        ([1, None, {"group": "supervisors"}, ["supervisors"], "x" * 300], 404),
        ("supervisors", 200),
        ([7, "supervisors", None], 200),
    ]
    for i, (groups, expected) in enumerate(cases):
        op_id = attack.ask(f"claims-{i}", f'CALL issue_refund {{"order_id": "R-CLAIM-{i}", "amount": 777}}')
        digest = attack.operation(op_id)["arguments_digest"]
        answer = _approve(attack, op_id, _user(attack, "sam", groups), digest)
        assert answer.status_code == expected, (groups, answer.text)


def test_a_member_of_many_groups_still_approves(attack: Attack) -> None:
    """A supervisor who is also in 250 other groups (common in a large directory): the gateway keeps
    kept only the first 200 groups in sorted order, dropping ``supervisors``, and refused a real
    supervisor."""
    op_id = attack.ask("many-groups", 'CALL issue_refund {"order_id": "R-MANY", "amount": 650}')
    digest = attack.operation(op_id)["arguments_digest"]
    groups = [f"g{i:03d}" for i in range(250)] + ["supervisors"]
    answer = _approve(attack, op_id, _user(attack, "sam", groups), digest)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "COMPLETED"


def test_another_organisation_and_a_stranger_see_none_of_the_inbox(attack: Attack) -> None:
    """Regression guard: another organisation's key (with a supervisor's token) and an app key whose
    person approves nothing list nothing of this inbox and read none of its items."""
    op_id = attack.ask("strangers", 'CALL issue_refund {"order_id": "R-STRANGER", "amount": 4321}')
    other = attack.headers("sam", "supervisors", key=attack.other_key)
    listed = httpx.get(f"{attack.a.url}/v1/approvals", headers=other, timeout=30)
    assert listed.status_code == 200 and "R-STRANGER" not in listed.text, listed.text
    assert httpx.get(f"{attack.a.url}/v1/approvals/{op_id}", headers=other, timeout=30).status_code == 404
    stranger = attack.headers("nobody")
    listed = httpx.get(f"{attack.b.url}/v1/approvals", headers=stranger, timeout=30)
    assert listed.status_code == 200 and listed.json()["data"] == [], listed.text
    assert httpx.get(f"{attack.b.url}/v1/approvals/{op_id}", headers=stranger, timeout=30).status_code == 404


# -- what stays recorded ---------------------------------------------------------------------------


def test_approving_then_rejecting_leaves_the_rejection_on_record(attack: Attack) -> None:
    """sam approves a four-eyes operation, then rejects it. Either the rejection is refused, or it
    cancels the operation and is recorded — in the decisions and in the audit trail. Today the
    rejection cancels it while its row is dropped (the same key as the approval) and never audited:
    the record says sam approved an operation that sam's rejection cancelled."""
    op_id = attack.ask("approve-then-reject", 'CALL cancel_orders {"orders": ["AR-1"]}')
    assert attack.decide(attack.a, op_id, "sam", "supervisors").status_code == 200
    rejected = attack.decide(attack.b, op_id, "sam", "supervisors", approve=False, comment="changed my mind")
    view = attack.approval(op_id)
    if view["status"] == "AWAITING_APPROVAL":
        assert rejected.status_code == 409, rejected.text
        return
    assert view["status"] == "CANCELLED"
    assert any(d["decision"] == "reject" and d["approver"] == "sam" for d in view["decisions"]), view[
        "decisions"
    ]
    actions = [e["action"] for e in attack.audit(op_id)]
    assert "operation.reject" in actions, actions


def test_a_long_comment_does_not_erase_the_approver_from_the_audit_trail(attack: Attack) -> None:
    """A comment of 2000 emoji (within ``MAX_COMMENT_CHARS``) by an approver whose subject is an
    object id pushes the audit detail over its 8 KiB: the entry is cut to ``{"truncated": true}``
    and no longer says who approved (its actor is the key)."""
    op_id = attack.ask("long-comment", 'CALL issue_refund {"order_id": "R-LONG", "amount": 999}')
    approved = attack.decide(attack.a, op_id, UUID_SUBJECT, "supervisors", comment="😀" * 2000)
    assert approved.status_code == 200, approved.text
    entries = [e for e in attack.audit(op_id) if e["action"] == "operation.approve"]
    assert entries, "no audit entry for the approval"
    assert entries[0]["detail"].get("approver") == UUID_SUBJECT, entries[0]


def test_a_ten_megabyte_comment_and_malformed_bodies_are_refused_with_the_field(attack: Attack) -> None:
    """Regression guard: never a 5xx; the field named where there is one; nothing recorded."""
    op_id = attack.ask("malformed", 'CALL issue_refund {"order_id": "R-BAD", "amount": 555}')
    digest = attack.operation(op_id)["arguments_digest"]
    sam = attack.headers("sam", "supervisors")
    url = f"/v1/approvals/{op_id}/approve"
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"content": b"not json"}, None),
        ({"content": b"[1, 2]"}, None),
        ({"content": b'"a string"'}, None),
        ({"json": {"arguments_digest": 5}}, "arguments_digest"),
        ({"json": {"arguments_digest": [digest]}}, "arguments_digest"),
        ({"json": {"arguments_digest": digest * 2}}, "arguments_digest"),
        ({"json": {"arguments_digest": digest, "approve": True}}, "approve"),
        ({"json": {"arguments_digest": digest, "comment": 7}}, "comment"),
        ({"json": {"arguments_digest": digest, "comment": "x" * (10 * 1024 * 1024)}}, "comment"),
        ({"json": {}}, "arguments_digest"),
        ({"json": {"arguments_digest": None}}, "arguments_digest"),
        ({"content": b'{"arguments_digest": "' + b"[" * 5000 + b'"}'}, "arguments_digest"),
        ({"content": b"[" * 100_000}, None),
    ]
    for kwargs, param in cases:
        answer = _post(attack, url, sam, **kwargs)
        assert 400 <= answer.status_code < 500, (repr(kwargs)[:80], answer.text[:300])
        if param is not None:
            assert answer.json()["error"]["param"] == param, answer.text[:300]
    for query in (
        "after=zzzz",
        "after=" + "x" * 41,
        "limit=0",
        "limit=201",
        "limit=abc",
        "after=%E2%80%AE",
        "after=",
    ):
        answer = httpx.get(f"{attack.b.url}/v1/approvals?{query}", headers=sam, timeout=30)
        assert answer.status_code in (200, 400, 422), (query, answer.text[:300])
    assert attack.approval(op_id)["decisions"] == []
    assert attack.shop.count("issue_refund", order_id="R-BAD") == 0


def test_a_comment_with_a_nul_or_a_lone_surrogate_is_no_server_error(attack: Attack) -> None:
    """Regression guard: a NUL (which PostgreSQL refuses in text) in a rejection's comment is stored
    cleaned, in the decision, the reason and the audit trail; a lone surrogate is refused as JSON."""
    op_id = attack.ask("nul-comment", 'CALL issue_refund {"order_id": "R-NUL", "amount": 515}')
    sam = attack.headers("sam", "supervisors")
    surrogate = _post(attack, f"/v1/approvals/{op_id}/reject", sam, content=b'{"comment": "a\\ud800b"}')
    assert 400 <= surrogate.status_code < 500, surrogate.text
    nul = _post(attack, f"/v1/approvals/{op_id}/reject", sam, content=b'{"comment": "a\\u0000b"}')
    assert nul.status_code == 200, nul.text
    assert nul.json()["status"] == "CANCELLED"
    assert [e["action"] for e in attack.audit(op_id)] == ["operation.reject"]


# -- the inbox's pages -----------------------------------------------------------------------------


async def _crowd(world: Attack, mine: int, others: int) -> list[str]:
    """Operations awaiting approval in the crowded organisation: first ``mine`` (for supervisors),
    then ``others`` newer ones (for the group ``elsewhere``)."""
    from hatchway.engine.tools.operations.models import OperationRecord, arguments_digest
    from hatchway.ids import new_id
    from hatchway.store.db import Database
    from hatchway.store.tables import utcnow

    db = Database(world.database_url)
    ids: list[str] = []
    try:
        for n, group in [(mine, "supervisors"), (others, "elsewhere")]:
            rows = []
            for i in range(n):
                now = utcnow()
                arguments = {"order_id": f"CROWD-{group}-{i}", "amount": 1000}
                approval = {"rule": "r", "approvers": {"group": group}, "required": 1, "stage": 0}
                rows.append(
                    OperationRecord(
                        id=new_id("op"),
                        org_id=world.crowd.id,
                        agent="shop",
                        session_key=f"crowd-{group}-{i}",
                        status="AWAITING_APPROVAL",
                        tool="issue_refund",
                        server="shop",
                        operation_type="transactional",
                        policy={},
                        arguments=arguments,
                        resolved_arguments=arguments,
                        arguments_digest=arguments_digest(arguments),
                        requested_by="crowd-requester",
                        approval=approval,
                        created_at=now,
                        updated_at=now,
                        expires_at=now + timedelta(days=1),
                    )
                )
            async with db.session() as s:
                s.add_all(rows)
            ids += [r.id for r in rows]
            await asyncio.sleep(0.01)  # ids are time-ordered to the millisecond
        return ids
    finally:
        await db.close()


def test_an_approver_can_page_to_every_item_of_the_inbox(attack: Attack) -> None:
    """One operation for the supervisors, then 201 newer ones for another group. Paging the inbox
    as a supervisor (an app key) must reach it; an admin key asking for 200 must be told there is
    more. Today the inbox reads the 200 newest, filters them, and answers an empty page with
    ``has_more: false``: the supervisor's item cannot be reached."""
    ids = asyncio.run(_crowd(attack, 1, 201))
    wanted = ids[0]
    sam = {"authorization": f"Bearer {attack.crowd.app_key}", TOKEN: attack.token("sam", "supervisors")}
    seen: list[str] = []
    after: str | None = None
    for _ in range(20):
        params: dict[str, Any] = {"limit": 50} | ({"after": after} if after else {})
        page = httpx.get(f"{attack.a.url}/v1/approvals", params=params, headers=sam, timeout=30).json()
        seen += [v["id"] for v in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert wanted in seen, "the supervisor's operation cannot be reached in the inbox"
    admin = {"authorization": f"Bearer {attack.crowd.admin_key}"}
    full = httpx.get(f"{attack.b.url}/v1/approvals", params={"limit": 200}, headers=admin, timeout=30).json()
    assert len(full["data"]) == 200
    assert full["has_more"] is True, "202 awaiting, 200 shown, and has_more is false"


# -- stages, races, replays, tampering --------------------------------------------------------------


def test_an_approval_of_the_first_stage_does_not_count_after_the_escalation(attack: Attack) -> None:
    """Regression guard: sam (a supervisor and a manager) approves at stage 0 (one of two); the
    operation escalates to the managers; mia's approval is then one of two, not two."""
    op_id = attack.ask("stages", 'CALL close_account {"account": "ACC-STAGE"}')
    first = attack.decide(attack.a, op_id, "sam", "supervisors", "managers")
    assert first.status_code == 200 and first.json()["status"] == "AWAITING_APPROVAL", first.text
    eventually(
        lambda: attack.operation(op_id)["approval"]["stage"] == 1, 30, "the escalation", attack.replicas
    )
    mia = attack.decide(attack.b, op_id, "mia", "managers")
    assert mia.status_code == 200 and mia.json()["status"] == "AWAITING_APPROVAL", mia.text
    assert mia.json()["approval"]["approvals_counted"] == 1
    assert attack.shop.count("close_account", account="ACC-STAGE") == 0
    again = attack.decide(attack.a, op_id, "sam", "supervisors", "managers")
    assert again.json()["status"] == "COMPLETED", again.text
    assert attack.shop.count("close_account", account="ACC-STAGE") == 1


def _ran_once_or_never(world: Attack, op_id: str, codes: list[int], tool: str, **match: Any) -> None:
    """The decisions raced on ``op_id`` were answered 200 or 409 (never a 5xx), and it ends COMPLETED
    having run ``tool`` once, or CANCELLED having never run it."""
    assert set(codes) <= {200, 409}, codes
    final = eventually(lambda: (s := world.status(op_id)) in ("COMPLETED", "CANCELLED") and s, 30, "an end")
    ran = world.shop.count(tool, **match)
    assert ran == (1 if final == "COMPLETED" else 0), (final, ran)


def test_approvals_and_rejections_raced_across_replicas_never_both_execute_and_cancel(attack: Attack) -> None:
    """Regression guard: ten supervisors, half approving and half rejecting, on both replicas at once:
    the operation ends COMPLETED (run once) or CANCELLED (run never), and nobody gets a 5xx."""
    for round_ in range(3):
        op_id = attack.ask(
            f"tug-{round_}", f'CALL issue_refund {{"order_id": "R-TUG-{round_}", "amount": 2000}}'
        )
        digest = attack.operation(op_id)["arguments_digest"]
        start = threading.Barrier(10)

        def decide(i: int, op_id: str = op_id, digest: str = digest, start: threading.Barrier = start) -> int:
            replica = attack.a if i % 2 else attack.b
            start.wait(timeout=30)
            return attack.decide(
                replica, op_id, f"sup-{i}", "supervisors", approve=i % 3 != 0, digest=digest
            ).status_code

        with ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(decide, range(10)))
        _ran_once_or_never(attack, op_id, codes, "issue_refund", order_id=f"R-TUG-{round_}")


def test_approvals_raced_with_the_timeout_execute_once_or_never(attack: Attack) -> None:
    """Regression guard: approvals sent around the one-second deadline, on both replicas, while the
    sweeps cancel: each operation ends COMPLETED and run once, or CANCELLED and never run."""
    for i in range(6):
        op_id = attack.ask(f"deadline-{i}", f'CALL quick_payout {{"to": "acct-deadline-{i}"}}')
        digest = attack.operation(op_id)["arguments_digest"]
        time.sleep(0.8 + 0.08 * i)
        with ThreadPoolExecutor(2) as pool:
            codes = list(
                pool.map(
                    lambda r, op_id=op_id, digest=digest: (
                        attack.decide(r, op_id, f"sup-{r.url[-5:]}", "supervisors", digest=digest).status_code
                    ),
                    (attack.a, attack.b),
                )
            )
        _ran_once_or_never(attack, op_id, codes, "quick_payout", to=f"acct-deadline-{i}")


def test_a_superseded_or_rejected_operation_cannot_be_approved_later(attack: Attack) -> None:
    """Regression guard: an approval replayed after the operation was superseded, or after it was
    rejected, is refused and executes nothing."""
    first = attack.ask("replay", 'CALL cancel_orders {"orders": ["RP-1"]}')
    old_digest = attack.operation(first)["arguments_digest"]
    attack.ask("replay", 'CALL cancel_orders {"orders": ["RP-1", "RP-2"]}', replica=attack.b)
    assert attack.status(first) == "CANCELLED"
    for who in ("sam", "tom"):
        late = attack.decide(attack.a, first, who, "supervisors", digest=old_digest)
        assert late.status_code == 409, late.text
    rejected = attack.ask("replay-rejected", 'CALL issue_refund {"order_id": "R-REPLAY", "amount": 3000}')
    digest = attack.operation(rejected)["arguments_digest"]
    assert (
        attack.decide(attack.a, rejected, "sam", "supervisors", approve=False).json()["status"] == "CANCELLED"
    )
    for replica in (attack.a, attack.b):
        replay = attack.decide(replica, rejected, "tom", "supervisors", digest=digest)
        assert replay.status_code == 409, replay.text
    assert attack.shop.count("cancel_orders", orders=["RP-1"]) == 0
    assert attack.shop.count("issue_refund", order_id="R-REPLAY") == 0


async def _tamper(world: Attack, op_id: str, arguments: dict[str, Any]) -> None:
    from sqlalchemy import update

    from hatchway.engine.tools.operations.models import OperationRecord
    from hatchway.store.db import Database

    db = Database(world.database_url)
    try:
        async with db.session() as s:
            await s.execute(
                update(OperationRecord)
                .where(OperationRecord.id == op_id)
                .values(resolved_arguments=arguments)
            )
    finally:
        await db.close()


def test_arguments_changed_in_the_database_after_the_approval_are_never_executed(attack: Attack) -> None:
    """Regression guard: the stored arguments no longer match the digest approved: refused, nothing runs."""
    op_id = attack.ask("tamper", 'CALL cancel_orders {"orders": ["TM-1"]}')
    assert attack.decide(attack.a, op_id, "sam", "supervisors").status_code == 200
    asyncio.run(_tamper(attack, op_id, {"orders": ["TM-1", "EVERYTHING"]}))
    second = attack.decide(attack.b, op_id, "tom", "supervisors")
    assert second.status_code == 409 and second.json()["error"]["code"] == "arguments_digest_mismatch", (
        second.text
    )
    assert attack.shop.count("cancel_orders", orders=["EVERYTHING", "TM-1"]) == 0
    assert attack.shop.count("cancel_orders", orders=["TM-1"]) == 0


def test_an_approver_who_hangs_up_does_not_interrupt_the_execution(attack: Attack) -> None:
    """Regression guard: the approval that satisfies the policy executes the tool in the approver's
    request; the approver's client giving up does not leave it INTERRUPTED."""
    op_id = attack.ask("hang-up", 'CALL slow_payout {"to": "acct-slow"}')
    digest = attack.operation(op_id)["arguments_digest"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{attack.a.url}/v1/approvals/{op_id}/approve",
            json={"arguments_digest": digest},
            headers=attack.headers("sam", "supervisors"),
            timeout=0.5,
        )
    final = eventually(
        lambda: (s := attack.status(op_id)) not in ("AWAITING_APPROVAL", "EXECUTING") and s, 30, "an end"
    )
    assert final == "COMPLETED", attack.operation(op_id)
    assert attack.shop.count("slow_payout", to="acct-slow") == 1


# -- the requester's conversation ------------------------------------------------------------------


def test_the_outcome_is_told_once_and_only_to_the_requester(attack: Attack) -> None:
    """Regression guard: bea, another end user in the same conversation, is not told ana's outcome;
    ana is told it once."""
    op_id = attack.ask("told", 'CALL issue_refund {"order_id": "R-TOLD", "amount": 1500}')
    assert attack.decide(attack.b, op_id, "sam", "supervisors").json()["status"] == "COMPLETED"
    bea = attack.chat(attack.b, "told", "any news?", user="bea")
    assert "R-TOLD" not in bea.text and "COMPLETED" not in bea.json()["choices"][0]["message"]["content"], (
        bea.text
    )
    ana = attack.chat(attack.a, "told", "any news?")
    assert "COMPLETED" in ana.json()["choices"][0]["message"]["content"], ana.text
    again = attack.chat(attack.b, "told", "and now?")
    assert "COMPLETED" not in again.json()["choices"][0]["message"]["content"], again.text


# -- background responses --------------------------------------------------------------------------


def _waiting_for(world: Attack, response_id: str) -> str:
    def waiting() -> str | None:
        listed = httpx.get(
            f"{world.b.url}/v1/approvals",
            params={"limit": 200},
            headers={"authorization": f"Bearer {world.admin_key}"},
            timeout=30,
        ).json()["data"]
        return next((v["id"] for v in listed if v["run"]["response_id"] == response_id), None)

    return eventually(waiting, 60, "the operation in the inbox", world.replicas)


@pytest.mark.timeout(300)
def test_a_background_response_waits_for_its_approvers_past_the_job_timeout(attack: Attack) -> None:
    """``approval_wait_seconds`` (an hour by default) is how long a background response waits for
    approvers. Its queue job's timeout was ``loop_deadline_seconds`` + 2 leases + 60 s, which the
    wait did not move: an approval later than that found the response killed. The job in Redis
    must allow the whole wait."""
    response_id = attack.background(
        'CALL issue_refund {"order_id": "R-SLOW-APPROVER", "amount": 1300}', "bg-slow"
    )["id"]
    _waiting_for(attack, response_id)

    async def job_timeout() -> int:
        from saq import Queue

        queue = Queue.from_url(REDIS_URL, name=f"{attack.redis_prefix}responses")
        try:
            job = await queue.job(response_id)
            assert job is not None, "the response's job is not in the queue"
            return int(job.timeout)
        finally:
            await queue.disconnect()

    assert asyncio.run(job_timeout()) >= LOOP_DEADLINE + 3600


def test_a_background_response_told_the_verdict_is_not_told_again_in_the_conversation(
    attack: Attack,
) -> None:
    """Regression guard: the background response carried the outcome; the conversation's next turn
    does not repeat it."""
    response_id = attack.background('CALL issue_refund {"order_id": "R-BG-ONCE", "amount": 1100}', "bg-once")[
        "id"
    ]
    op_id = _waiting_for(attack, response_id)
    assert attack.decide(attack.b, op_id, "sam", "supervisors").json()["status"] == "COMPLETED"
    done = eventually(
        lambda: attack.ended(response_id), 60, "the background response to end", attack.replicas
    )
    assert done["status"] == "completed" and "COMPLETED" in json.dumps(done["output"]), done
    later = attack.chat(attack.a, "bg-once", "any news?")
    assert "COMPLETED" not in later.json()["choices"][0]["message"]["content"], later.text


def test_a_cancelled_background_response_withdraws_its_operation(attack: Attack) -> None:
    """A background response cancelled while it waits for approvers ends cancelled, and its operation
    is withdrawn (CANCELLED): an approver's later approval runs nothing nobody waits for."""
    response_id = attack.background(
        'CALL issue_refund {"order_id": "R-BG-CANCEL", "amount": 1400}', "bg-cancel"
    )["id"]
    op_id = _waiting_for(attack, response_id)
    cancelled = httpx.post(
        f"{attack.b.url}/v1/responses/{response_id}/cancel", headers=attack.headers("ana"), timeout=30
    )
    assert cancelled.status_code == 200, cancelled.text
    eventually(
        lambda: attack.response(response_id)["status"] == "cancelled", 30, "the cancel", attack.replicas
    )
    eventually(lambda: attack.status(op_id) == "CANCELLED", 30, "the withdrawal", attack.replicas)
    assert "withdrawn" in attack.operation(op_id)["status_reason"]
    late = attack.decide(attack.a, op_id, "sam", "supervisors")
    assert late.status_code == 409, late.text
    assert attack.shop.count("issue_refund", order_id="R-BG-CANCEL") == 0
