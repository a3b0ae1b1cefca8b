"""The vault on SQLite and (when configured) PostgreSQL: sealed at rest, bound to its place, rotatable."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hatchway.errors import DecryptionError, InvalidRequest, SecretNotFound
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault, load_master_key, rotate_master_key
from hatchway.vault.names import parse_ref
from hatchway.vault.rotation import current_and_new_keys, pending_path
from hatchway.vault.tables import VaultDataKey, VaultSecret
from tests.support.leak_scanner import SecretScanner

pytestmark = pytest.mark.anyio


async def _org(db: Database) -> str:
    return (await OrgStore(db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id


def _value() -> str:
    return f"sk-live-{uuid.uuid4().hex}"


async def test_secrets_round_trip_and_the_database_holds_no_plaintext(
    secret_scanner: SecretScanner, db: Database, database_url: str
) -> None:
    vault = Vault(db, MasterKey.generate("test"))
    org = await _org(db)
    values = {"openai": _value(), "mcp_search_api_key": _value(), "ünïcode-ok": None}
    values.pop("ünïcode-ok")  # not a valid name; kept out on purpose, see the names test
    secret_scanner.watch(*values.values())
    secret_scanner.watch_database(database_url)

    for name, value in values.items():
        info, created = await vault.put(org, name, value, ["MCP.example.com", "mcp.example.com"])
        assert created and info.allowed_hosts == ["mcp.example.com"]
    _, created = await vault.put(org, "openai", values["openai"])
    assert not created

    fresh = Vault(db, vault.master_key)  # no cached data key: reads and unwraps from the table
    for name, value in values.items():
        assert (await fresh.get(org, name)).value == value
    async with db.session() as s:
        rows = list(await s.scalars(select(VaultSecret).where(VaultSecret.org_id == org)))
    assert {r.name for r in rows} == set(values)
    for row in rows:
        assert values[row.name].encode() not in row.ciphertext
        assert len(row.ciphertext) == 1 + 12 + len(values[row.name]) + 16  # version, nonce, tag


async def test_a_row_moved_to_another_name_or_organisation_does_not_decrypt(db: Database) -> None:
    vault = Vault(db, MasterKey.generate("test"))
    org_a, org_b = await _org(db), await _org(db)
    await vault.put(org_a, "x", _value())
    await vault.put(org_a, "y", _value())
    await vault.put(org_b, "x", _value())
    async with db.session() as s:
        a_x = await s.scalar(select(VaultSecret.ciphertext).where(_row(org_a, "x")))
        a_key = await s.scalar(select(VaultDataKey.wrapped_key).where(VaultDataKey.org_id == org_a))
        await s.execute(update(VaultSecret).where(_row(org_a, "y")).values(ciphertext=a_x))
        await s.execute(update(VaultSecret).where(_row(org_b, "x")).values(ciphertext=a_x))

    with pytest.raises(DecryptionError, match=r"secret 'y'.*cannot decrypt"):
        await vault.get(org_a, "y")
    with pytest.raises(DecryptionError, match=r"secret 'x'.*cannot decrypt"):
        await vault.get(org_b, "x")

    async with db.session() as s:  # org A's wrapped data key copied over org B's
        await s.execute(update(VaultDataKey).where(VaultDataKey.org_id == org_b).values(wrapped_key=a_key))
    with pytest.raises(DecryptionError, match=r"data key.*cannot decrypt"):
        await Vault(db, vault.master_key).get(org_b, "x")


def _row(org_id: str, name: str):  # type: ignore[no-untyped-def]
    return (VaultSecret.org_id == org_id) & (VaultSecret.name == name)


async def test_a_wrong_master_key_fails_with_a_clear_error_not_garbage(db: Database) -> None:
    right, wrong = MasterKey.generate("right.key"), MasterKey.generate("wrong.key")
    org = await _org(db)
    await Vault(db, right).put(org, "x", _value())

    with pytest.raises(DecryptionError, match="the master key does not match") as caught:
        await Vault(db, wrong).get(org, "x")
    assert right.key_id in caught.value.message and wrong.key_id in caught.value.message
    assert "wrong.key" in caught.value.message

    # Even past the key-id check (a forged id), AES-GCM refuses instead of returning garbage.
    async with db.session() as s:
        await s.execute(
            update(VaultDataKey).where(VaultDataKey.org_id == org).values(master_key_id=wrong.key_id)
        )
    with pytest.raises(DecryptionError, match="data key: cannot decrypt"):
        await Vault(db, wrong).get(org, "x")


@pytest.fixture
async def own_db(own_database_url: str):
    database = Database(own_database_url)
    await database.migrate()
    yield database
    await database.close()


async def test_rotation_rewraps_every_data_key_and_keeps_every_secret_readable(
    own_db: Database, own_database_url: str, tmp_path: Path, secret_scanner: SecretScanner
) -> None:
    """(The scanner is asked for last, so it scans before the test's own database is dropped.)"""
    db = own_db
    key_file = tmp_path / "master.key"
    old = load_master_key(key_file, env={})
    vault = Vault(db, old)
    stored = {}
    for _ in range(3):
        org = await _org(db)
        for name in ("a", "b"):
            stored[(org, name)] = _value()
            await vault.put(org, name, stored[(org, name)])
    secret_scanner.watch(*stored.values())
    secret_scanner.watch_database(own_database_url)

    result = await rotate_master_key(Vault(db, old), key_file, env={})

    assert result.rewrapped == 3 and result.old_key_id == old.key_id != result.new_key_id
    new = load_master_key(key_file, env={})
    assert new.key_id == result.new_key_id
    assert load_master_key(tmp_path / "master.key.old", env={}).key_id == old.key_id
    assert not pending_path(key_file).exists()
    for (org, name), value in stored.items():
        assert (await Vault(db, new).get(org, name)).value == value
        with pytest.raises(DecryptionError, match="the master key does not match"):
            await Vault(db, old).get(org, name)


async def test_an_interrupted_rotation_is_finished_by_running_it_again(
    own_db: Database, tmp_path: Path
) -> None:
    db = own_db
    key_file = tmp_path / "master.key"
    old = load_master_key(key_file, env={})
    org = await _org(db)
    value = _value()
    await Vault(db, old).put(org, "x", value)
    # The first run wrote <file>.new and re-wrapped the data keys, then died before swapping files.
    _, new = current_and_new_keys(key_file, env={})
    await Vault(db, old).rewrap(new)
    with pytest.raises(DecryptionError, match="rerun `hatchway vault rotate-master-key`"):
        await Vault(db, load_master_key(key_file, env={})).get(org, "x")

    result = await rotate_master_key(Vault(db, old), key_file, env={})

    assert result.new_key_id == new.key_id
    assert (await Vault(db, load_master_key(key_file, env={})).get(org, "x")).value == value


async def test_organisations_are_isolated(db: Database) -> None:
    vault = Vault(db, MasterKey.generate("test"))
    org_a, org_b, org_c = await _org(db), await _org(db), await _org(db)
    await vault.put(org_a, "x", "value-of-a")
    await vault.put(org_b, "x", "value-of-b")

    assert (await vault.get(org_b, "x")).value == "value-of-b"
    assert (await vault.get(org_a, "x")).value == "value-of-a"
    with pytest.raises(SecretNotFound, match="secret 'x' not found"):
        await vault.get(org_c, "x")
    assert [i.name for i in await vault.list_secrets(org_c)] == []
    await vault.delete(org_b, "x")
    assert (await vault.get(org_a, "x")).value == "value-of-a"
    with pytest.raises(SecretNotFound):
        await vault.delete(org_b, "x")


async def test_first_writes_from_two_replicas_share_one_data_key(db: Database) -> None:
    key = MasterKey.generate("test")
    replicas = [Vault(db, key), Vault(db, key)]
    org = await _org(db)
    values = {f"s{i}": _value() for i in range(8)}

    await asyncio.gather(*(replicas[i % 2].put(org, n, v) for i, (n, v) in enumerate(values.items())))

    reader = Vault(db, key)
    for name, value in values.items():
        assert (await reader.get(org, name)).value == value
    async with db.session() as s:
        assert len(list(await s.scalars(select(VaultDataKey).where(VaultDataKey.org_id == org)))) == 1


async def test_list_shows_names_hosts_and_times_never_values(db: Database) -> None:
    vault = Vault(db, MasterKey.generate("test"))
    org = await _org(db)
    await vault.put(org, "b", "value-b", ["idp.example.com"])
    await vault.put(org, "a", "value-a")

    listed = [i.to_dict() for i in await vault.list_secrets(org)]

    assert [d["name"] for d in listed] == ["a", "b"]
    assert listed[1]["allowed_hosts"] == ["idp.example.com"]
    assert set(listed[0]) == {"object", "name", "allowed_hosts", "created_at", "updated_at"}
    assert "value-" not in repr(listed) and "value-a" not in repr(await vault.get(org, "a"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a/b", "found '/'"),
        ("a.b", "found '.'"),
        ("x" * 65, r"at most 64 characters \(got 65\)"),
        ("", "must not be empty"),
        ("semi:colon", "found ':'"),
    ],
)
async def test_bad_names_are_rejected_with_a_clear_message(db: Database, name: str, message: str) -> None:
    vault = Vault(db, MasterKey.generate("test"))
    org = await _org(db)
    with pytest.raises(InvalidRequest, match=message) as caught:
        await vault.put(org, name, "v")
    assert caught.value.param == "name"
    with pytest.raises(InvalidRequest, match=message):
        parse_ref(f"secret.{name}")


async def test_references_and_good_names() -> None:
    assert parse_ref("secret." + "x" * 64) == "x" * 64
    assert parse_ref("secret.mcp_search-api_KEY1") == "mcp_search-api_KEY1"
    for ref in ("secret.a/b", "secret.a.b", "secret." + "x" * 65, "env:X", "secrets.x", "secret."):
        with pytest.raises(InvalidRequest) as caught:
            parse_ref(ref)
        assert caught.value.param == "secret_ref"
    with pytest.raises(InvalidRequest, match="allowed_hosts\\[1\\]: must be a host"):
        await Vault(Database("sqlite+aiosqlite:///:memory:"), MasterKey.generate("t")).put(
            "org", "n", "v", ["ok.example.com", "https://bad.example.com/x"]
        )
