"""Decide a pending confirmation from the end user's reply: yes, no, or ambiguous (ask again).

Deterministic and deliberately conservative, because a wrong "yes" runs a transaction:

- text is lower-cased, accents and punctuation removed (``"Não!"`` → ``nao``);
- known phrases are matched first (``pode cancelar`` is a yes, ``no, gracias`` a no);
- a yes needs every remaining word to be a yes word or a filler (``sim, por favor``); any other
  word (``sim, o A e o C``) makes it ambiguous;
- a no only needs a no word and no yes word (``não quero mais`` is a no — cancelling is safe);
- both kinds of word (``sim, mas não o B``), a contrast word (``mas``, ``but``, ``pero``…) with a
  yes, or a question mark, make it ambiguous.

The word lists cover Portuguese, English and Spanish; ``ConfirmationVocabulary.extended`` adds more.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class ReplyKind(StrEnum):
    YES = "yes"
    NO = "no"
    AMBIGUOUS = "ambiguous"


_NOT_WORD = re.compile(r"[^\w']+")


def normalize(text: str) -> str:
    """Lower case, no accents, punctuation as spaces, single spaces."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(_NOT_WORD.sub(" ", plain).replace("'", "").split())


def _words(text: str) -> frozenset[str]:
    return frozenset(normalize(w) for w in text.split())


def _phrases(*phrases: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(normalize(p).split()) for p in phrases)


YES_WORDS = _words(
    # pt
    "sim pode confirmo confirma confirmado confirmada confirmar autorizo aprovo ok okay claro certo "
    "isso beleza positivo prossiga prosseguir segue siga "
    # en
    "yes yeah yep yup sure confirm confirmed proceed approve approved affirmative absolutely "
    # es
    "si vale dale confirmado adelante procede hazlo aprobado"
)
NO_WORDS = _words(
    # pt
    "nao cancela cancele negativo jamais nunca esquece pare desisto "
    # en
    "no nope nah cancel stop abort don't dont never "
    # es
    "cancelalo detente"
)
# Articles are not fillers: "sim, o A" may mean "only A".
FILLER_WORDS = _words(
    "por favor obrigado obrigada valeu agora entao ja tudo todos todas mesmo "
    "please pls thanks thank you now then go it all everything "
    "gracias ahora entonces todo eso esto"
)
CONTRAST_WORDS = _words(
    "mas porem exceto menos so somente apenas sem tirando "
    "but except only without however "
    "pero excepto salvo solo solamente sin"
)
YES_PHRASES = _phrases(
    "pode cancelar",
    "pode seguir",
    "pode prosseguir",
    "pode continuar",
    "pode fazer",
    "pode executar",
    "pode sim",
    "com certeza",
    "manda ver",
    "go ahead",
    "do it",
    "please do",
    "of course",
    "sounds good",
    "de acuerdo",
    "por supuesto",
    "claro que si",
)
NO_PHRASES = _phrases(
    "melhor nao",
    "deixa pra la",
    "deixa para la",
    "nao quero",
    "no thanks",
    "no thank you",
    "never mind",
    "nevermind",
    "mejor no",
    "no gracias",
    "dejalo",
)


@dataclass(frozen=True, slots=True)
class ConfirmationVocabulary:
    """The word lists the classifier uses (already normalised)."""

    yes: frozenset[str] = YES_WORDS
    no: frozenset[str] = NO_WORDS
    filler: frozenset[str] = FILLER_WORDS
    contrast: frozenset[str] = CONTRAST_WORDS
    yes_phrases: tuple[tuple[str, ...], ...] = YES_PHRASES
    no_phrases: tuple[tuple[str, ...], ...] = NO_PHRASES

    def extended(
        self, *, yes: Iterable[str] = (), no: Iterable[str] = (), filler: Iterable[str] = ()
    ) -> ConfirmationVocabulary:
        """A copy with more words; multi-word entries become phrases."""
        yes, no = list(yes), list(no)
        return ConfirmationVocabulary(
            yes=self.yes | _words(" ".join(w for w in yes if " " not in w.strip())),
            no=self.no | _words(" ".join(w for w in no if " " not in w.strip())),
            filler=self.filler | _words(" ".join(filler)),
            contrast=self.contrast,
            yes_phrases=self.yes_phrases + _phrases(*(w for w in yes if " " in w.strip())),
            no_phrases=self.no_phrases + _phrases(*(w for w in no if " " in w.strip())),
        )


DEFAULT_VOCABULARY = ConfirmationVocabulary()


@dataclass(slots=True)
class _Signals:
    yes: int = 0
    no: int = 0
    contrast: int = 0
    other: list[str] = field(default_factory=list)


def classify_reply(text: str, vocabulary: ConfirmationVocabulary = DEFAULT_VOCABULARY) -> ReplyKind:
    """Whether ``text`` confirms, refuses, or leaves the pending operation undecided."""
    if "?" in text:
        return ReplyKind.AMBIGUOUS
    signals = _scan(normalize(text).split(), vocabulary)
    if signals.yes and signals.no:
        return ReplyKind.AMBIGUOUS
    if signals.no:
        return ReplyKind.NO
    if signals.yes and not signals.contrast and not signals.other:
        return ReplyKind.YES
    return ReplyKind.AMBIGUOUS


def _scan(tokens: list[str], vocabulary: ConfirmationVocabulary) -> _Signals:
    signals = _Signals()
    i = 0
    while i < len(tokens):
        matched = _phrase_at(tokens, i, vocabulary)
        if matched is not None:
            kind, length = matched
            signals.yes += kind == "yes"
            signals.no += kind == "no"
            i += length
            continue
        _count(tokens[i], vocabulary, signals)
        i += 1
    return signals


def _phrase_at(tokens: list[str], i: int, vocabulary: ConfirmationVocabulary) -> tuple[str, int] | None:
    best: tuple[str, int] | None = None
    for kind, phrases in (("no", vocabulary.no_phrases), ("yes", vocabulary.yes_phrases)):
        for phrase in phrases:
            n = len(phrase)
            if n and tuple(tokens[i : i + n]) == phrase and (best is None or n > best[1]):
                best = (kind, n)
    return best


def _count(token: str, vocabulary: ConfirmationVocabulary, signals: _Signals) -> None:
    if token in vocabulary.no:
        signals.no += 1
    elif token in vocabulary.yes:
        signals.yes += 1
    elif token in vocabulary.contrast:
        signals.contrast += 1
    elif token not in vocabulary.filler:
        signals.other.append(token)
