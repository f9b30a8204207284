"""Whether a sentence of the model's wording asserts what its cited facts state, and nothing else.

A ``[n]`` marker supports nothing by itself: a sentence is supported only if

1. it names the entity of a claim it cites (by its label or a synonym, as the KG's linker finds it); with ``[n]``
   markers the cited claims are those of facts n, without markers those whose entities it names; a marker that
   numbers no fact is a problem;
2. every entity it names (a mention the linker finds by its label, a synonym or its id, above the match
   threshold) is covered: an entity of the cited facts (each claim's entity and the nodes of its cited paths) or of
   the question; a mention found only by a fuzzy or embedding match is judged by its words, as in 3;
3. every content word is covered: a word of the cited facts' text, of a covered entity's label, or the initials of
   such a label ("AF"); words count as equal once their inflections are folded ("treated", "treats", "treat"), and
   a few groups of words count as one ("treat", "medication", "drug", "take", ...: :data:`SAME`).

Content words are all words but the connectives of :data:`CONNECTIVES` (function words, hedges, the patient-facing
wording "you may have", "can be", "is used for", advice to see a doctor) and numbers (doses are checked apart).
A negation ("not", "never", "avoid") is a content word: it is covered only by a warning claim (a contraindication).
So "Atrial fibrillation can be treated with warfarin [2]." rests on fact [2] "Atrial fibrillation is treated with
the medication Warfarin"; "... atrioventricular tachycardia (AVT), the fastest heart rhythm in the human body [2]."
does not, and its reason names the words nothing covers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from mirage_kg import Entity

if TYPE_CHECKING:
    from mirage_reason.answer import Claim

__all__ = ["CONNECTIVES", "NAMING_METHODS", "NEGATION_KEYS", "SAME", "SAME_WORDS", "assertion_gap", "content_words",
           "fold", "markers"]

#: the linking methods that find an entity by what the text names (its label, a synonym, its id)
NAMING_METHODS = frozenset({"id", "exact", "normalised", "synonym"})

_CONNECTIVE_WORDS = """
a an the this that these those it its they them their there here such
is are was were be been being am can could may might will would should must shall do does did done
have has had having get gets got become becomes
and or but also as well so then than too very just only even more most much many
of in on at to for with by from into about over under between within without through like
you your yours yourself i me my we our us one ones some any other another each all both either
which who whom what when where how why whose if because while although though whether
often usually commonly common sometimes generally typically frequently
likely possibly possible probably perhaps maybe look looks seem seems sound sounds appear appears
condition conditions problem problems issue issues
people person patient patients someone anyone
use used using uses
option options choice choices include includes including included
called known named
type types kind kinds form forms
please see ask talk consult contact call doctor doctors physician pharmacist clinician nurse gp care advice
medical healthcare professional professionals health provider
important
"""
_NEGATIONS = frozenset({"not", "no", "never", "avoid", "nor", "neither", "cannot", "don't", "doesn't", "shouldn't",
                        "mustn't", "won't", "can't", "unsafe", "dangerous", "harmful", "risk"})

#: groups of words that say the same of a fact (one covered, all covered), folded as :func:`fold` folds
SAME_WORDS = (
    "treat treatment treatments therapy therapies medication medications medicine medicines drug drugs manage "
    "managed management help helps take taking taken took give given prescribe prescribed remedy",
    "symptom symptoms sign signs feature features manifestation manifestations finding findings present presents "
    "presentation suggest suggests indicate indicates point points show shows characterise characterize fit fits "
    "match matches consistent explain explains typical",
    "test tests diagnose diagnosed diagnosis check checked confirm confirmed measure measured",
    "prevent prevents prevention protect protects",
    "cause causes caused lead leads due result results",
    "contraindicate contraindicated contraindication not no never avoid cannot don't unsafe dangerous harmful "
    "risk",
)


def fold(word: str) -> str:
    """A word with its English inflection folded ("treated", "treats", "treating": "treat"; "diseases":
    "diseas"), so that two forms of a word compare equal; only for comparing, never shown."""
    w = word.casefold().replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


CONNECTIVES = frozenset(fold(w) for w in _CONNECTIVE_WORDS.split())
NEGATION_KEYS = frozenset(fold(w) for w in _NEGATIONS)
SAME: dict[str, frozenset[str]] = {}
for _group in SAME_WORDS:
    _keys = frozenset(fold(w) for w in _group.split())
    for _key in _keys:
        SAME[_key] = SAME.get(_key, frozenset()) | _keys

_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)?")
_MARKER = re.compile(r"\[(\d+)\]")


def _words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) of every word of ``text`` (letters, an inner apostrophe); markers and numbers are not."""
    return [(m.group(0), m.start(), m.end()) for m in _WORD.finditer(_MARKER.sub(lambda x: " " * len(x.group(0)),
                                                                                 text))]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that assert something, folded: not a connective, a number or a one-letter word."""
    return [fold(w) for w, _, _ in _words(text) if _is_content(w)]


def _is_content(word: str) -> bool:
    key = fold(word)
    return len(word) > 1 and key not in CONNECTIVES


def markers(sentence: str) -> list[int]:
    """The fact numbers the sentence cites as ``[n]``."""
    return [int(n) for n in _MARKER.findall(sentence)]


def _initials(label: str) -> str | None:
    parts = re.findall(r"[^\W\d_]+", label)
    return "".join(p[0] for p in parts).casefold() if len(parts) > 1 else None


def _vocabulary(texts: Iterable[str], entities: Iterable[Entity], negations: bool) -> set[str]:
    covered: set[str] = set()
    for text in texts:
        covered.update(fold(w) for w, _, _ in _words(text))
    for entity in entities:
        covered.update(fold(w) for w, _, _ in _words(entity.label))
        initials = _initials(entity.label)
        if initials:
            covered.add(initials)
    for key in list(covered):
        covered |= SAME.get(key, frozenset())
    if not negations:
        covered -= NEGATION_KEYS
    return covered


def assertion_gap(sentence: str, mentions: Sequence[tuple[Entity, int, int, str]], cited: Sequence[Claim],
                  question_entities: Sequence[Entity], *, by_marker: bool, bad_markers: Sequence[int] = ()
                  ) -> str | None:
    """Why ``sentence`` does not rest on the claims it cites (``cited``: those of its ``[n]`` markers when
    ``by_marker``, else those whose entities it names), or None when it asserts only what they state.
    ``mentions`` are the linker's (entity, start, end, method) within the sentence, above the match threshold."""
    reasons: list[str] = []
    if bad_markers:
        reasons.append("it cites " + ", ".join(f"[{n}]" for n in bad_markers) + ", which numbers no fact")
    entities: dict[str, Entity] = {e.iri: e for e in question_entities}
    for claim in cited:
        entities[claim.entity.iri] = claim.entity
        entities.update({n.iri: n for p in claim.citations for n in p.nodes})
    folded = sentence.casefold()
    mentioned = {e.iri for e, _, _, _ in mentions}
    if cited and not any(c.entity.iri in mentioned or _names(folded, c.entity.label) for c in cited):
        what = " or ".join(dict.fromkeys(c.entity.label for c in cited))
        reasons.append(f"it names none of the claims it cites ({what})")
    if by_marker and not cited and not bad_markers:
        reasons.append("it cites no claim")
    texts = [c.text for c in cited] + [p.text for c in cited for p in c.citations]
    covered = _vocabulary(texts, entities.values(), negations=any(c.kind == "warning" for c in cited))
    skip: list[tuple[int, int]] = []
    unnamed: list[str] = []
    for entity, start, end, method in mentions:
        if entity.iri in entities:
            skip.append((start, end))
        elif method in NAMING_METHODS:
            skip.append((start, end))
            unnamed.append(entity.label)
    if unnamed:
        source = "its cited facts" if by_marker else "the claims it names"
        reasons.append(f"it names {', '.join(dict.fromkeys(unnamed))}, which {source} do not state")
    loose = [w for w, s, e in _words(sentence) if _is_content(w) and not any(a <= s < b for a, b in skip)
             and fold(w) not in covered]
    if loose:
        reasons.append("nothing it cites states " + ", ".join(repr(w) for w in dict.fromkeys(loose)))
    return "; ".join(reasons) if reasons else None


def _names(folded: str, label: str) -> bool:
    return bool(label) and re.search(rf"(?<!\w){re.escape(label.casefold())}(?!\w)", folded) is not None
