"""How grounded an answer is, in a form every surface shows the same way: the verdict (grounded in cited claims,
partly, not at all), the flags (a code, a message and the sentence they are about), and one check per sentence.

A flag is a ``str`` (its message), so the synthesizer's checks and the tests read flags as the sentences they are;
:class:`Flag` adds the code and sentence, and :func:`flag_json` gives any flag, plain string or not, its record."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any, Literal

from mirage_kg import InputError, ontologies_dir

__all__ = ["FLAG_CODES", "DOSE", "Flag", "HarmfulTerm", "SentenceCheck", "Support", "Verdict", "flag_json",
           "harmful_terms", "harmful_in", "unsupported_text", "valid_text"]

Verdict = Literal["grounded", "partial", "unsupported"]

#: every flag code, and what it means
FLAG_CODES = {
    "harmful_instruction": "the text tells the reader to do something harmful (a harmful substance or action, or a "
                           "drug the knowledge graph contraindicates in the question's conditions)",
    "unsupported_dose": "the text states a dose that no claim states",
    "forged_result_block": "the model wrote a knowledge-graph result block itself; nothing in it is evidence",
    "budget_spent": "a chain ran out of searches, turns or tokens before it answered",
    "unsupported_text": "the text names or asserts what no claim of the graph supports",
    "unsupported_entity": "the wording names an entity no surviving claim supports",
    "unsupported_recommendation": "the wording recommends what no claim supports",
    "missing_claim": "the wording leaves out a claim the question asked for",
    "empty_wording": "the model wrote no usable answer",
    "contraindicated": "the text names a drug the knowledge graph contraindicates here; its warning was added",
    "model_pick": "a multiple-choice letter the knowledge graph does not back",
    "check_unavailable": "a check could not run (the knowledge graph could not answer); the answer is not checked",
    "note": "anything else worth knowing about the answer",
}

_UNAVAILABLE = re.compile(r"could not (?:run|be read)|declares no relation", re.IGNORECASE)


class Flag(str):
    """A flag's message, with its ``code`` (a key of :data:`FLAG_CODES`), the index of the sentence it is about
    (``None``: the whole answer, or text the reader is not shown) and, for ``unsupported_text``, the text itself."""

    code: str
    sentence: int | None
    detail: str

    def __new__(cls, message: str, code: str = "note", sentence: int | None = None, detail: str = "") -> Flag:
        if code not in FLAG_CODES:
            raise ValueError(f"unknown flag code {code!r}; known: {sorted(FLAG_CODES)}")
        flag = super().__new__(cls, message)
        flag.code, flag.sentence, flag.detail = code, sentence, detail
        return flag

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "sentence": self.sentence}


def flag_json(flag: str) -> dict[str, Any]:
    """Any flag as its record; a plain string gets the code its words imply (a check that could not run says so)."""
    if isinstance(flag, Flag):
        return flag.to_json()
    if _UNAVAILABLE.search(flag):
        code = "check_unavailable"
    elif "own pick" in flag or "closest to what it wrote" in flag:
        code = "model_pick"
    elif "not supported by the knowledge graph" in flag:
        code = "unsupported_text"
    else:
        code = "note"
    return {"code": code, "message": str(flag), "sentence": None}


def unsupported_text(flags: tuple[str, ...] | list[str]) -> str:
    """The model's own words the answer shows apart, under their label (carried by an ``unsupported_text`` flag)."""
    return "\n\n".join(f.detail for f in flags if isinstance(f, Flag) and f.code == "unsupported_text" and f.detail)


@dataclass(frozen=True)
class SentenceCheck:
    """One sentence of the answer: the claims (indexes into the answer's claims) it rests on, and whether the
    graph supports it (``reason`` says why, or why not)."""

    text: str
    claims: tuple[int, ...]
    supported: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "claims": list(self.claims), "supported": self.supported, "reason": self.reason}


@dataclass(frozen=True)
class Support:
    """The verdict on a whole answer and why."""

    verdict: Verdict
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate (a model's broken byte pair, or bytes decoded with ``surrogateescape``)
    as U+FFFD, so that it encodes as UTF-8 and tokenizers take it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


HarmKind = Literal["substance", "action", "dismissal"]
HARM_KINDS: tuple[HarmKind, ...] = ("substance", "action", "dismissal")


@dataclass(frozen=True)
class HarmfulTerm:
    """One line of ``ontologies/harmful.tsv``: a harmful substance or action and why it is harmful."""

    pattern: re.Pattern[str]
    kind: HarmKind
    why: str


def _harmful_file() -> FsPath:
    return ontologies_dir() / "harmful.tsv"


@functools.lru_cache(maxsize=4)
def harmful_terms(path: FsPath | None = None) -> tuple[HarmfulTerm, ...]:
    """The maintained list of harmful substances and actions (``ontologies/harmful.tsv`` unless ``path``).
    A bad line is an ``InputError`` naming the file and line: the check never runs on half a list."""
    path = path or _harmful_file()
    terms = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        kind = next((k for k in HARM_KINDS if k == parts[1]), None) if len(parts) == 3 else None
        if kind is None or not parts[2].strip():
            raise InputError(f"{path}:{number}: expected 'pattern<TAB>substance|action|dismissal<TAB>why', got "
                             f"{line[:80]!r}")
        try:
            regex = re.compile(rf"(?<!\w)(?:{parts[0]})(?!\w)", re.IGNORECASE)
        except re.error as exc:
            raise InputError(f"{path}:{number}: bad pattern {parts[0]!r} ({exc})") from None
        terms.append(HarmfulTerm(regex, kind, parts[2].strip()))
    return tuple(terms)


# a sentence that only forbids: "Never drink bleach.", "Do not stop your medication."; not one that goes on to
# say something else ("Do not wait; drink bleach.")
_FORBIDS = re.compile(r"^\W*(?:never|do not|don't|avoid|you (?:should|must) not|you (?:shouldn't|mustn't)|"
                      r"under no circumstances|it is (?:dangerous|unsafe|never safe) to)\b", re.IGNORECASE)
_GOES_ON = re.compile(r"[;:]|\b(?:but|however|instead|then|though|although|unless|except)\b", re.IGNORECASE)


def harmful_in(sentence: str, terms: tuple[HarmfulTerm, ...] | None = None) -> list[tuple[str, HarmfulTerm]]:
    """The harmful substances and actions ``sentence`` names, as (the words, the term); a substance or an action
    the sentence only forbids is not harmful advice, a dismissal of care always is."""
    terms = harmful_terms() if terms is None else terms
    forbids = bool(_FORBIDS.search(sentence)) and not _GOES_ON.search(sentence)
    found = []
    for term in terms:
        match = term.pattern.search(sentence)
        if match is not None and (term.kind == "dismissal" or not forbids):
            found.append((match.group(0), term))
    return found


#: a dose: an amount with a unit (after ``normalise_units``), or a count of tablets, puffs, drops and the like
DOSE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?\s*(?:-|to|–)?\s*(?:\d+(?:[.,]\d+)?\s*)?"
                  r"(?:mg/kg|mg|µg|mcg|g|mL|ml|L|IU|units?|tablets?|tabs?|pills?|capsules?|caps?|puffs?|drops?|"
                  r"teaspoons?|tablespoons?|tsp|tbsp|cups?|sachets?|patches|injections?|shots?)(?!\w)",
                  re.IGNORECASE)
