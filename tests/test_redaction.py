"""The redactor alone: each form of a value, at any place in a text, and its two matching strategies."""

from __future__ import annotations

import base64
import json
import uuid
from urllib.parse import quote, quote_plus, urlencode

import pytest

from hatchway.redaction import REDACTED, Redactor, secret_forms

SECRET = 'sk-"q"\\é/+= &0123456789abcdef'

FORMS = {
    "raw": SECRET,
    "repr": repr({"k": SECRET}),
    "json": json.dumps({"k": SECRET}),
    "json, unicode": json.dumps({"k": SECRET}, ensure_ascii=False),
    "json, slash escaped": json.dumps({"k": SECRET}).replace("/", "\\/"),
    "json in json": json.dumps({"k": json.dumps({"k": SECRET})}),
    "quote": quote(SECRET, safe=""),
    "quote, lower hex": quote(SECRET, safe="").lower(),
    "quote_plus form": urlencode({"a": "b", "k": SECRET}),
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "base64url unpadded": base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
    "basic user:secret": "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode(),
    "basic, form-encoded first": "Basic " + base64.b64encode(f"id:{quote_plus(SECRET)}".encode()).decode(),
    "base64 inside more": base64.b64encode(f"ab{SECRET}more data".encode()).decode(),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_of_a_value_is_redacted_and_nothing_of_it_is_left(form: str) -> None:
    redactor = Redactor([SECRET])
    text = f"<{FORMS[form]}>"

    clean = redactor.redact(text)

    assert REDACTED in clean
    assert not any(f.literal in clean for f in secret_forms(SECRET))
    if form.startswith("json"):
        json.loads(clean[1:-1])  # still the JSON it was, with the marker in place of the value


def test_the_base64_neighbours_that_carry_bits_of_the_value_go_with_it() -> None:
    redactor = Redactor([SECRET])
    for prefix in ("", "a", "ab", "abc"):
        encoded = base64.b64encode(f"{prefix}{SECRET}".encode()).decode()
        clean = redactor.redact(encoded)
        kept = clean.split(REDACTED)[0]
        # Only whole base64 characters of the prefix survive: 6 bits each, none of the value's.
        assert len(kept) == len(prefix) * 8 // 6, (prefix, clean)
        assert clean.endswith(REDACTED)


def test_a_structured_value_is_redacted_string_by_string_keys_included() -> None:
    redactor = Redactor([SECRET])
    value = {"a": [SECRET, 1, None, {"b": f"x {SECRET} y"}], SECRET: True, "n": 1.5}

    assert redactor.redact_value(value) == {
        "a": [REDACTED, 1, None, {"b": f"x {REDACTED} y"}],
        REDACTED: True,
        "n": 1.5,
    }


def test_an_empty_redactor_changes_nothing_and_a_base_is_redacted_too() -> None:
    value = {"k": [SECRET]}
    assert Redactor().redact(SECRET) == SECRET and Redactor().redact_value(value) is value

    base = Redactor()
    run = Redactor(["run-secret-123"], base=base)
    base.add("provider-key-456")  # known after the run's redactor was made

    assert run.redact("run-secret-123 provider-key-456") == f"{REDACTED} {REDACTED}"
    assert run.values() == {"run-secret-123", "provider-key-456"} and "provider-key-456" in run


def test_a_value_containing_another_is_redacted_whole() -> None:
    redactor = Redactor(["abc123456", "xxabc123456yy"])
    assert redactor.redact("[xxabc123456yy] [abc123456]") == f"[{REDACTED}] [{REDACTED}]"


def test_a_large_set_finds_the_same_leaks_through_its_index() -> None:
    values = [f"tok-{uuid.uuid4().hex}" for _ in range(200)]
    large, small = Redactor([*values, SECRET]), Redactor([values[7], values[150], SECRET])
    text = " | ".join(
        [FORMS["json"], values[7], base64.b64encode(f"u:{values[150]}".encode()).decode(), FORMS["quote"]]
    )

    assert large.redact(text) == small.redact(text)
    assert large.redact(text).count(REDACTED) == 4


def test_a_bounded_set_drops_its_oldest_values() -> None:
    redactor = Redactor(limit=2)
    for value in ("first-value", "second-value", "third-value"):
        redactor.add(value)
    redactor.add("second-value")  # seen again: newest
    redactor.add("fourth-value")

    assert redactor.values() == {"second-value", "fourth-value"}
    assert redactor.redact("first-value third-value") == "first-value third-value"
