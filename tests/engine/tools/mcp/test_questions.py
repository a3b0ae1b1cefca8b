"""What a server may ask the end user, and how a reply becomes the answer (``mcp/questions.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from hatchway.engine.tools.mcp.answers import UnreadableAnswer, answer_from_reply, check_requested_schema
from hatchway.errors import ToolError


def request(schema: dict[str, Any]) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": schema}}


FLAT = {
    "type": "object",
    "properties": {
        "checkin": {"type": "string", "minLength": 10, "maxLength": 10},
        "nights": {"type": "integer", "minimum": 1, "maximum": 30, "default": 1},
        "breakfast": {"type": "boolean"},
        "room": {"type": "string", "enum": ["single", "double"]},
    },
    "required": ["checkin"],
}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({**FLAT, "allOf": [{"properties": {"checkin": {"pattern": "^(a+)+$"}}}]}, "allOf"),
        ({**FLAT, "$ref": "http://169.254.169.254/schema"}, "$ref"),
        ({"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}, "pattern"),
        ({"type": "object", "properties": {"who": {"type": "object", "properties": {}}}}, "not a string"),
        ({"type": "object", "properties": {"n": {"type": "integer", "minimum": "x"}}}, "minimum"),
        ({"type": "object", "properties": {"c": {"type": "string", "enum": 5}}}, "enum"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [["a"]]}, "required"),
        ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(33)}}, "at most 32"),
        ({"type": "array"}, "not an object"),
    ],
)
def test_a_schema_outside_the_elicitation_subset_is_refused_before_anyone_is_asked(
    schema: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ToolError) as refused:
        check_requested_schema("hotel", schema)
    assert refused.value.code == "mcp_input_unsupported" and reason in refused.value.message


def test_a_reply_becomes_the_answer_with_defaults_and_is_checked_against_the_schema() -> None:
    check_requested_schema("hotel", FLAT)
    answer = answer_from_reply("checkin: 2026-12-24\nbreakfast: yes\nroom: double", request(FLAT))
    assert answer == {
        "action": "accept",
        "content": {"checkin": "2026-12-24", "breakfast": True, "room": "double", "nights": 1},
    }
    assert (
        answer_from_reply('{"checkin": "2026-12-24", "nights": 3}', request(FLAT))["content"]["nights"] == 3
    )
    for reply, why in [
        ("nights: 3", "checkin: required"),
        ("checkin: tomorrow", "length"),
        ("checkin: 2026-12-24\nnights: 99", "out of bounds"),
        ("checkin: 2026-12-24\nroom: suite", "one of single, double"),
        ("checkin: 2026-12-24\nbreakfast: maybe", "yes or no"),
        ('{"checkin": 5}', "must be a string"),
    ]:
        with pytest.raises(UnreadableAnswer) as unreadable:
            answer_from_reply(reply, request(FLAT))
        assert why in str(unreadable.value), (reply, unreadable.value)
    assert answer_from_reply("cancel", request(FLAT)) == {"action": "decline"}
