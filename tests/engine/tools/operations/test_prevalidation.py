"""Reading a validator's answer: what counts as malformed (and so as a validator failure)."""

from __future__ import annotations

import pytest

from hatchway.engine.tools.operations.prevalidation import read_validator_answer


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("eligible", "not a JSON object"),
        ({"status": "ELIGIBLE"}, "no boolean 'eligible'"),
        ({"eligible": "true"}, "no boolean 'eligible'"),
        ({"eligible": True, "transaction_decision": []}, "'transaction_decision' is not an object"),
        ({"eligible": True, "transaction_decision": {"resolved_arguments": "A"}}, "is not an object"),
        ({"eligible": True, "transaction_decision": {"resolved_arguments": {}}}, "is empty"),
    ],
)
def test_malformed_answers_are_failures(body: object, failure: str) -> None:
    answer = read_validator_answer("validar", body)
    assert answer.failed and failure in (answer.failure or "")


def test_a_full_answer_is_read() -> None:
    answer = read_validator_answer(
        "validar",
        {
            "eligible": True,
            "status": "PARTIALLY_ELIGIBLE",
            "resolved_subjects": ["Produto A"],
            "items": [{"name": "Produto A", "eligible": True}, {"name": "Z", "eligible": "no", "x": 1}],
            "transaction_decision": {
                "resolved_arguments": {"subject": "Produto A"},
                "target_tool": "cancelar_lote",
                "confirmation_message": "Confirma?",
            },
        },
    )
    assert not answer.failed and answer.eligible and answer.status == "PARTIALLY_ELIGIBLE"
    assert answer.resolved_arguments == {"subject": "Produto A"} and answer.target_tool == "cancelar_lote"
    assert answer.confirmation_message == "Confirma?"
    assert answer.items == [
        {"name": "Produto A", "eligible": True},
        {"name": "Z", "eligible": False, "reason": "eligibility was not a boolean"},
    ]
    record = answer.to_record()
    assert record["resolved_subjects"] == ["Produto A"] and record["target_tool"] == "cancelar_lote"


def test_not_eligible_keeps_the_reason_from_either_place() -> None:
    assert read_validator_answer("v", {"eligible": False, "reason": "fora"}).reason == "fora"
    nested = read_validator_answer(
        "v", {"eligible": False, "transaction_decision": {"reason": "sem contrato"}}
    )
    assert nested.reason == "sem contrato" and not nested.eligible
