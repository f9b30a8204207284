"""Reading the text of an answer: its sentences, dose units in one spelling, a reply cut after its last whole
sentence or cleared of its thinking, and the word patterns the checks read (a recommendation, a negation, advice to
see a doctor, a warning, a safety question)."""

from __future__ import annotations

import re

from mirage_reason.backends.base import strip_think

__all__ = ["ADVICE", "NEGATED", "RECOMMENDS", "SAFETY_QUESTION", "WARNS", "dose_key", "names_phrase",
           "normalise_units", "split_sentences", "tidy_reply", "whole_sentences"]

_UNITS = [
    (r"milligrams?|mgs?", "mg"),
    (r"micrograms?|mcg|ug|µg|μg", "µg"),
    (r"grams?|gm", "g"),
    (r"millilit(?:er|re)s?|mls?", "mL"),
    (r"international units?|i\.u\.|iu", "IU"),
]
_UNIT_RES = [(re.compile(rf"(\d+(?:[.,]\d+)?)\s*(?:{pat})(?!\w)", re.IGNORECASE), unit) for pat, unit in _UNITS]

_SENTENCE_END = re.compile(r"[.!?](?:[\"')\]]|\s*\[\d+\])*(?=\s|$)")
#: a word that recommends doing something (the synthesizer's and the wording check's rule)
RECOMMENDS = re.compile(r"\b(?:take|taking|drink|use|using|try|prescribe[sd]?|recommend\w*|treat(?:s|ed|ing)?|"
                         r"cure[sd]?|helps? (?:with|against)|relieve[sd]?|dose)\b", re.IGNORECASE)
#: a sentence that recommends nothing for all its recommending words ("do not take", "see a doctor")
NEGATED = re.compile(r"\b(?:not|never|no|avoid|don't|do not|contraindicated)\b|see a doctor|ask a doctor|"
                     r"talk to|consult", re.IGNORECASE)
#: advice to seek care, which states no medical fact
ADVICE = re.compile(r"\b(?:see|ask|call|consult|talk to|contact) (?:a|your) (?:doctor|physician|pharmacist|clinician|"
                    r"nurse|GP)\b|\bnot medical advice\b|\bseek (?:urgent )?(?:medical )?(?:care|help|attention)\b",
                    re.IGNORECASE)
#: "can I take / give X?", "is X safe with Y?", "should my child use X?"
SAFETY_QUESTION = re.compile(r"\b(?:can|could|may|should|shall)\b[^?.]{0,40}?\b(?:take|taking|give|giving|use|using|"
                             r"have|drink|mix)\b|\b(?:is|are)\b[^?.]{0,60}\bsafe\b|\bsafe (?:to|for|with|in|during)\b|"
                             r"\b(?:ok|okay|alright|fine) to (?:take|give|use|mix)\b", re.IGNORECASE)
#: a sentence that warns against what it names ("Aspirin is contraindicated in influenza", "do not give aspirin")
WARNS = re.compile(r"contraindicat\w*|\bavoid\w*|\b(?:do not|don't|never|should not|shouldn't|must not|mustn't|"
                   r"cannot|can't) (?:be )?(?:take|taking|taken|give|giving|given|use|using|used)\b|\bnot safe\b|"
                   r"\bunsafe\b|\bdangerous\b|\brisk of\b|\bwarning\b", re.IGNORECASE)


def normalise_units(text: str) -> str:
    """Dose units in one spelling: "500 milligrams" -> "500 mg", "100 mcg" -> "100 µg", "5 ml" -> "5 mL"."""
    for regex, unit in _UNIT_RES:
        text = regex.sub(rf"\g<1> {unit}", text)
    return text


def dose_key(dose: str) -> str:
    """A dose as the checks compare it: spaces collapsed, case folded."""
    return re.sub(r"\s+", " ", dose.strip().casefold())


def names_phrase(folded: str, label: str) -> bool:
    """Whether the casefolded sentence names ``label`` as a whole word or phrase."""
    return bool(label) and re.search(rf"(?<!\w){re.escape(label.casefold())}(?!\w)", folded) is not None


def whole_sentences(text: str) -> str:
    """``text`` cut after its last complete sentence (a model that ran out of tokens stops mid-sentence)."""
    ends = list(_SENTENCE_END.finditer(text))
    return text[: ends[-1].end()].rstrip() if ends else text


def split_sentences(text: str) -> list[str]:
    """``text``'s sentences as they stand in it (spaces kept), a trailing unfinished one included."""
    out, last = [], 0
    for match in _SENTENCE_END.finditer(text):
        out.append(text[last:match.end()])
        last = match.end()
    if text[last:].strip():
        out.append(text[last:])
    return [s for s in out if s.strip()]


def tidy_reply(text: str) -> str:
    """A model's reply without its thinking and special tokens; empty when it never finished thinking."""
    text = strip_think(text)
    if "<think>" in text:  # it never finished thinking: no answer in it
        return ""
    text = re.sub(r"<\|KG_[A-Z_]+\|>", " ", text)
    return text.strip()
