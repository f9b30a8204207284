"""The answer's wording as structured output: sentences that each cite one of the numbered facts and say what it
says, and a multiple-choice letter that is a constrained choice, not a parse of free text.

Where the engine constrains output (``MirageConfig.constrains``: "wording" for the sentences, "choice" for the
letter) the writer replies in JSON whose ``choice`` can only be an option's letter and whose sentences are each
``{"cite": n, "text": ...}``: ``cite`` the number of a fact it was given, and ``text`` a pattern built from that
fact (:func:`fact_readings`): the fact as the graph words it or read from its other end, its names in either case,
its "is" hedged ("can be"), after a patient-facing frame or not ("You may have atrial fibrillation, which can be
treated with the medication Warfarin"). So the model picks the facts, their order, the reading and the framing,
and cannot put a fact's names into a relation the fact does not state. :func:`render` turns the reply into the
text a person reads, every sentence ending in its ``[n]`` marker; the synthesizer's claim check then reads that
text as it reads any other and still decides.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from mirage_reason.pipeline import sentence_check
from mirage_reason.backends.base import OutputConstraint
from mirage_reason.pipeline.choices import LETTERS
from mirage_reason.pipeline.claims import INTENT_ANSWERS

if TYPE_CHECKING:
    from mirage_reason.pipeline.config import MirageConfig
    from mirage_reason.pipeline.synthesis import Synthesis

__all__ = ["FRAMES", "MAX_SENTENCES", "fact_readings", "render", "wording_constraint", "wording_form"]

MAX_SENTENCES = 3


def wording_form(config: MirageConfig, backend: Any,
                 synthesis: Synthesis) -> tuple[bool, bool, tuple[tuple[int, str], ...]]:
    """Which parts of this answer's wording the engine constrains: (the cited sentences, the option letter, the
    facts the sentences lead with). The letter is asked for only when no chain picked one (the chains' vote decides
    otherwise)."""
    sentences = bool(synthesis.facts) and config.constrains(backend, "wording")
    letter = bool(synthesis.options) and synthesis.letter is None and config.constrains(backend, "choice")
    return sentences, letter, tuple(required_facts(synthesis)[:MAX_SENTENCES]) if sentences else ()


def wording_constraint(config: MirageConfig, backend: Any, synthesis: Synthesis) -> OutputConstraint | None:
    """The JSON schema of the writer's reply, or None where it writes free text."""
    sentences, letter, lead = wording_form(config, backend, synthesis)
    if not (sentences or letter):
        return None
    properties: dict[str, Any] = {}
    if letter:
        properties["choice"] = {"enum": list(LETTERS[: len(synthesis.options)])}
    if sentences:
        forms = {n: _sentence(n, readings) for n, readings in enumerate(fact_readings(synthesis), start=1)}
        if lead:  # one sentence on each fact the answer must state (the diagnosis, what the question asks for)
            # (exactly these items by minItems/maxItems: llama.cpp's schema converter refuses ``"items": false``)
            properties["lead"] = {"type": "array", "minItems": len(lead), "maxItems": len(lead),
                                  "prefixItems": [forms[n] for n, _ in lead]}
        items = list(forms.values())
        properties["sentences"] = {"type": "array", "minItems": 0 if lead else 1,
                                   "maxItems": MAX_SENTENCES - len(lead),
                                   "items": items[0] if len(items) == 1 else {"anyOf": items}}
    return OutputConstraint(json_schema={"type": "object", "properties": properties, "required": list(properties),
                                         "additionalProperties": False})


#: patient-facing openings a sentence may take before its fact, each in words the claim check counts as connectives
#: (the check, not this list, decides what a sentence may say): "You may have atrial fibrillation, which ..."
FRAMES = ("you may have", "you might have", "you could have", "it may be", "it could be", "this may be",
          "this could be", "it is likely", "one possible condition is")
#: hedges a reading's "is" may take ("Atrial fibrillation can be treated with ...")
_HEDGES = ("is", "can be", "may be", "is often", "is usually", "is commonly")
_REGEX_SPECIAL = set("\\^$.[]()|{}*+?")


def fact_readings(synthesis: Synthesis) -> list[list[tuple[str, tuple[str, ...]]]]:
    """Per numbered fact, the readings a sentence citing it may give, each with the entity names in it: the fact
    as its text says it and, for a one-step fact, the same triple read from its other end ("Palpitations is a
    symptom of Atrial fibrillation" for "Atrial fibrillation has symptom Palpitations"). A reading is kept only if
    the claim check (``sentence_check.assertion_gap``) finds nothing in it that the fact does not state."""
    out: list[list[tuple[str, tuple[str, ...]]]] = []
    for fact in synthesis.facts:
        claims = [c for c in synthesis.claims if c.text == fact]
        path = next((c.citations[0] for c in claims if c.citations), None)
        readings = [(fact, tuple(n.label for n in path.nodes) if path else tuple(c.entity.label for c in claims))]
        if path is not None and len(path.steps) == 1:
            step = path.steps[0]
            text = step.relation.verbalise(step.subject.label, step.object.label,
                                           "backward" if step.direction == "forward" else "forward")
            if text != fact and sentence_check.assertion_gap(text, [], claims, synthesis.question_entities,
                                                             by_marker=True) is None:
                readings.append((text, (step.end.label, step.start.label)))
        out.append(readings)
    return out


def _sentence(n: int, readings: list[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    """One cited sentence on fact ``n``: ``cite`` fixed to n (written first, so the engine knows which fact the
    text is on), ``text`` one of its readings, its names as the KG writes them or in lower case, its "is" with a
    hedge or not, after an optional patient-facing frame ("you may have X, which is treated with ...")."""
    frame = "(" + "|".join(_escape(f) for f in FRAMES) + ")"
    forms = []
    for text, names in readings:
        clause = _clause(text, names)
        forms.append(clause)
        first = next((name for name in names if text.startswith(name)), None)
        if first is not None:  # the frame, the first name, then ", which" and the rest of the reading
            forms.append(f"{frame} {_clause(first, (first,))}, which{_clause(text[len(first):], names)}")
        else:
            forms.append(f"{frame} {clause}")
    pattern = "^(" + "|".join(f"({f})" for f in forms) + ")$"
    return {"type": "object", "properties": {"cite": {"const": n}, "text": {"type": "string", "pattern": pattern}},
            "required": ["cite", "text"], "additionalProperties": False}


def _clause(text: str, names: tuple[str, ...]) -> str:
    """``text`` as a pattern: each of ``names`` as written or in lower case, each " is " with its hedges."""
    spans = sorted((text.find(name), name) for name in dict.fromkeys(names) if name and text.find(name) >= 0)
    parts, at = [], 0
    for start, name in spans:
        if start < at:
            continue
        parts.append(_hedged(text[at:start]))
        parts.append("(" + "|".join(_escape(v) for v in dict.fromkeys((name, name.lower()))) + ")")
        at = start + len(name)
    parts.append(_hedged(text[at:]))
    return "".join(parts)


def _hedged(text: str) -> str:
    hedge = "(" + "|".join(_HEDGES) + ")"
    return hedge.join(_escape(piece) for piece in re.split(r"(?<= )is(?= )", text))


def _escape(text: str) -> str:
    """``text`` as a regular expression every engine's converter reads: only its special characters escaped."""
    return "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in text)


def required_facts(synthesis: Synthesis) -> list[tuple[int, str]]:
    """The facts the answer must state, as the claim check requires them, each with the entity it must name: the
    diagnosis the graph points to (when the question did not name it) and the first claim of each kind the
    question asks for."""
    facts = synthesis.facts
    asked = {e.iri for e in synthesis.question_entities}
    wanted: list[tuple[int, str]] = []

    def add(index: int | None, label: str) -> None:
        if index is not None and all(n != index + 1 for n, _ in wanted):
            wanted.append((index + 1, label))

    for diagnosis in (d for d in synthesis.diagnoses if d.iri not in asked):
        label = diagnosis.label.casefold()
        add(next((facts.index(c.text) for c in synthesis.claims if c.entity.iri == diagnosis.iri), None)
            if any(c.entity.iri == diagnosis.iri for c in synthesis.claims)
            else next((i for i, f in enumerate(facts) if label in f.casefold()), None), diagnosis.label)
    for intent in synthesis.intents:
        if intent in INTENT_ANSWERS:
            kind = INTENT_ANSWERS[intent][0]
            claim = next((c for c in synthesis.claims if c.kind == kind), None)
            if claim is not None:
                add(facts.index(claim.text), claim.entity.label)
    return wanted


_ITEM = re.compile(r'\{\s*(?:"text"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"cite"\s*:\s*(\d+)'
                   r'|"cite"\s*:\s*(\d+)\s*,\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)")\s*\}')
_CHOICE = re.compile(r'"choice"\s*:\s*"([A-J])"')
_MARKER = re.compile(r"\s*\[\d+\]")


def render(raw: str, n_facts: int) -> str:
    """The writer's JSON reply as text: "Answer: X" (a constrained letter) then each sentence with its ``[n]``
    citation at its end, each said once. A reply cut by its max tokens keeps its finished sentences; text that is
    not such a reply (an engine that wrote free text) is returned as it is."""
    stripped = raw.strip()
    if not stripped.startswith("{"):
        return raw
    try:
        value = json.loads(stripped)
        choice = value.get("choice") if isinstance(value, dict) else None
        items = [(str(i["text"]), int(i["cite"])) for part in ("lead", "sentences")
                 for i in (value.get(part) or [] if isinstance(value, dict) else [])]
    except (ValueError, TypeError, KeyError, AttributeError):  # cut short: its finished parts
        found = _CHOICE.search(stripped)
        choice = found.group(1) if found else None
        items = []
        for match in _ITEM.finditer(stripped):
            text, cite = (match.group(1), match.group(2)) if match.group(2) else (match.group(4), match.group(3))
            try:
                items.append((str(json.loads(f'"{text}"')), int(cite)))
            except ValueError:
                continue
    sentences = []
    for text, cite in items:
        text = " ".join(_MARKER.sub("", text).split()).rstrip(" .;,")
        sentence = f"{text[0].upper()}{text[1:]} [{cite}]." if text else ""
        if sentence and 1 <= cite <= n_facts and sentence not in sentences:  # a sentence said twice, once
            sentences.append(sentence)
    head = f"Answer: {choice}" if isinstance(choice, str) and choice else ""
    return "\n\n".join(part for part in (head, " ".join(sentences)) if part)
