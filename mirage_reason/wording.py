"""The answer's wording as structured output: sentences that each cite one of the numbered facts, and a
multiple-choice letter that is a constrained choice, not a parse of free text.

Where the engine constrains output (``MirageConfig.constrains``: "wording" for the sentences, "choice" for the
letter) the writer replies in JSON whose ``cite`` field can only be the number of a fact it was given and whose
``choice`` can only be an option's letter; :func:`render` turns the reply into the text a person reads, every
sentence ending in its ``[n]`` marker. The synthesizer's claim check then reads that text as it reads any other:
the grammar makes the model cite, it does not make what it says true.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from mirage_reason.backends.base import OutputConstraint
from mirage_reason.choices import LETTERS

if TYPE_CHECKING:
    from mirage_reason.config import MirageConfig
    from mirage_reason.synthesizer import Synthesis

__all__ = ["MAX_SENTENCES", "render", "wording_constraint", "wording_form"]

MAX_SENTENCES = 3
_SENTENCE_CHARS = 160


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
        if lead:  # one sentence on each fact the answer must state (the diagnosis, what the question asks for),
            # opening with the entity it is about where its name is plain text (a pattern every engine supports)
            # (exactly these items by minItems/maxItems: llama.cpp's schema converter refuses ``"items": false``)
            properties["lead"] = {"type": "array", "minItems": len(lead), "maxItems": len(lead),
                                  "prefixItems": [_sentence({"const": n}, label) for n, label in lead]}
        properties["sentences"] = {"type": "array", "minItems": 0 if lead else 1,
                                   "maxItems": MAX_SENTENCES - len(lead),
                                   "items": _sentence({"enum": list(range(1, len(synthesis.facts) + 1))})}
    return OutputConstraint(json_schema={"type": "object", "properties": properties, "required": list(properties),
                                         "additionalProperties": False})


_PLAIN = re.compile(r"[A-Za-z0-9 ,'-]+")
# a sentence's characters: words and plain punctuation, no full stop (the rendering ends each sentence) and no
# quotes or backslashes, so a small model can neither fill a sentence with dots nor break out of the string
_SENTENCE_CHARS_CLASS = "[a-zA-Z0-9 ,;:()'/-]"


def _sentence(cite: dict[str, Any], opening: str | None = None) -> dict[str, Any]:
    text: dict[str, Any] = {"type": "string", "pattern": f"^[A-Za-z]{_SENTENCE_CHARS_CLASS}{{7,{_SENTENCE_CHARS}}}$"}
    if opening and _PLAIN.fullmatch(opening):
        # ... and says something about it: a word after the name, then at least a dozen characters
        text = {"type": "string", "pattern": f"^{opening} [a-z]{_SENTENCE_CHARS_CLASS}"
                                             f"{{11,{max(24, _SENTENCE_CHARS - len(opening))}}}$"}
    return {"type": "object", "properties": {"text": text, "cite": cite},
            "required": ["text", "cite"], "additionalProperties": False}


def required_facts(synthesis: Synthesis) -> list[tuple[int, str]]:
    """The facts the answer must state, as the claim check requires them, each with the entity it must name: the
    diagnosis the graph points to (when the question did not name it) and the first claim of each kind the
    question asks for."""
    from mirage_reason.synthesizer import INTENT_ANSWERS

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


_ITEM = re.compile(r'\{\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"cite"\s*:\s*(\d+)\s*\}')
_CHOICE = re.compile(r'"choice"\s*:\s*"([A-J])"')
_MARKER = re.compile(r"\s*\[\d+\]")


def render(raw: str, n_facts: int) -> str:
    """The writer's JSON reply as text: "Answer: X" (a constrained letter) then each sentence with its ``[n]``
    citation at its end. A reply cut by its max tokens keeps its finished sentences; text that is not such a
    reply (an engine that wrote free text) is returned as it is."""
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
            try:
                items.append((str(json.loads(f'"{match.group(1)}"')), int(match.group(2))))
            except ValueError:
                continue
    sentences = []
    for text, cite in items:
        text = " ".join(_MARKER.sub("", text).split()).rstrip(" .;,")
        if text and 1 <= cite <= n_facts:
            sentences.append(f"{text[0].upper()}{text[1:]} [{cite}].")
    head = f"Answer: {choice}" if isinstance(choice, str) and choice else ""
    return "\n\n".join(part for part in (head, " ".join(sentences)) if part)
