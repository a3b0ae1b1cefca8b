"""The yes/no reply classifier: pt, en and es, normalised, conservative about yes."""

from __future__ import annotations

import pytest

from hatchway.engine.tools.operations.confirmation import (
    DEFAULT_VOCABULARY,
    ReplyKind,
    classify_reply,
    normalize,
)

YES, NO, AMBIGUOUS = ReplyKind.YES, ReplyKind.NO, ReplyKind.AMBIGUOUS

PORTUGUESE = [
    ("sim", YES),
    ("Sim!", YES),
    ("SIM.", YES),
    ("pode", YES),
    ("Pode sim", YES),
    ("sim, pode cancelar", YES),
    ("confirmo", YES),
    ("Confirmo, obrigado!", YES),
    ("sim por favor", YES),
    ("isso mesmo", YES),
    ("não", NO),
    ("nao", NO),
    ("Não.", NO),
    ("cancela", NO),
    ("não, obrigado", NO),
    ("não quero mais", NO),
    ("melhor não", NO),
    ("sim, mas não o B", AMBIGUOUS),
    ("sim, o A", AMBIGUOUS),
    ("só o A", AMBIGUOUS),
    ("quero cancelar", AMBIGUOUS),
    ("talvez", AMBIGUOUS),
    ("sim?", AMBIGUOUS),
    ("", AMBIGUOUS),
]
ENGLISH = [
    ("yes", YES),
    ("Yes please, go ahead", YES),
    ("ok", YES),
    ("sure, do it", YES),
    ("confirm", YES),
    ("no", NO),
    ("No thanks", NO),
    ("nope", NO),
    ("cancel", NO),
    ("don't", NO),
    ("yes, but only A", AMBIGUOUS),
    ("yes except B", AMBIGUOUS),
    ("what does it cost?", AMBIGUOUS),
    ("maybe later", AMBIGUOUS),
]
SPANISH = [
    ("sí", YES),
    ("Si", YES),
    ("claro que sí", YES),
    ("de acuerdo", YES),
    ("vale", YES),
    ("adelante", YES),
    ("no", NO),
    ("no, gracias", NO),
    ("mejor no", NO),
    ("sí, pero no el B", AMBIGUOUS),
    ("solo el A", AMBIGUOUS),
    ("quizás", AMBIGUOUS),
]


@pytest.mark.parametrize(("text", "expected"), PORTUGUESE)
def test_portuguese(text: str, expected: ReplyKind) -> None:
    assert classify_reply(text) is expected


@pytest.mark.parametrize(("text", "expected"), ENGLISH)
def test_english(text: str, expected: ReplyKind) -> None:
    assert classify_reply(text) is expected


@pytest.mark.parametrize(("text", "expected"), SPANISH)
def test_spanish(text: str, expected: ReplyKind) -> None:
    assert classify_reply(text) is expected


def test_normalisation_removes_case_accents_and_punctuation() -> None:
    assert normalize("  NÃO!!  Sí... ¿Confirmação?  ") == "nao si confirmacao"


def test_word_lists_are_configurable() -> None:
    assert classify_reply("bora") is AMBIGUOUS
    assert classify_reply("nem pensar") is AMBIGUOUS
    vocabulary = DEFAULT_VOCABULARY.extended(yes=["bora", "manda bala"], no=["nem pensar"], filler=["cara"])
    assert classify_reply("bora", vocabulary) is YES
    assert classify_reply("manda bala, cara", vocabulary) is YES
    assert classify_reply("Nem pensar!", vocabulary) is NO
    assert classify_reply("bora, mas só o A", vocabulary) is AMBIGUOUS
    assert classify_reply("bora") is AMBIGUOUS  # the default vocabulary is untouched
