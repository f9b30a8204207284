"""The question decomposer: split a question that names several medical entities into at most N_q entity-anchored
sub-questions, each linked to at least one KG entity.

The model proposes the split; the code checks it. A sub-question must link to an entity of the question: one that
links to nothing is repaired (its vague reference, "it", "this condition", replaced by a question entity no other
sub-question covers) or dropped, and one about entities the question never names is dropped; when nothing usable is
left, the fallback is one sub-question per group of linked entities. A question with fewer than two distinct
linked entities is not split at all, and the model is not asked.

Where the engine constrains output (``MirageConfig.constrains(backend, "decompose")``), the model writes its split as
JSON whose entity field can only be one of the question's linked entities, at most ``n_q`` items; the line parser
and the repairs above are for an engine that cannot, and the notes say so when its split falls back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mirage_kg import Entity, MirageError

from mirage_reason.pipeline import prompts
from mirage_reason.backends.base import (
    Backend,
    Completion,
    CompletionRequest,
    OutputConstraint,
    sample_seed,
    strip_think,
    submit_all,
)
from mirage_reason.pipeline.config import MirageConfig

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraphLike

__all__ = ["INTENTS", "Decomposer", "Decomposition", "SubQuestion", "link_entities", "parse_sub_questions",
           "question_intents"]

Origin = Literal["question", "model", "repaired", "fallback"]


@dataclass(frozen=True)
class SubQuestion:
    """A sub-question and the KG entities it is anchored on; ``origin`` says who wrote it."""

    text: str
    entities: tuple[Entity, ...]
    origin: Origin

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "entities": [e.to_json() for e in self.entities], "origin": self.origin}


@dataclass(frozen=True)
class Decomposition:
    question: str
    entities: tuple[Entity, ...]  # linked entities of the whole question, in text order
    sub_questions: tuple[SubQuestion, ...]
    raw: str | None = None  # what the model wrote, when it was asked
    notes: tuple[str, ...] = ()  # repairs, drops, fallbacks
    completion_tokens: int = 0
    prompt_tokens: int = 0
    constrained: bool = False  # the model's reply was held to the JSON schema by the engine

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(s.text for s in self.sub_questions)

    @property
    def source(self) -> str:
        """Who wrote the sub-questions: "model" (at least one is the model's, as written or repaired),
        "template" (the fallback) or "question" (not split: fewer than two linked entities)."""
        origins = {s.origin for s in self.sub_questions}
        if origins & {"model", "repaired"}:
            return "model"
        return "template" if "fallback" in origins else "question"

    def to_json(self) -> dict[str, Any]:
        """The answer record's ``decomposition``: its source, whether the engine constrained it, and its notes."""
        return {"source": self.source, "constrained": self.constrained, "note": "; ".join(self.notes),
                "origins": [s.origin for s in self.sub_questions]}


def link_entities(kg: KnowledgeGraphLike, text: str, config: MirageConfig) -> tuple[Entity, ...]:
    """Distinct KG entities mentioned in ``text``: each mention's best candidate among the top ``match_top``, kept
    when it scores at least ``match_threshold``; in order of first mention."""
    try:
        mentions = kg.link(text, top=config.match_top)
    except MirageError:
        return ()
    found: dict[str, Entity] = {}
    for mention in sorted(mentions, key=lambda m: m.start):
        good = [c for c in mention.candidates[: config.match_top] if c.score >= config.match_threshold]
        if good:
            best = max(good, key=lambda c: c.score).entity
            found.setdefault(best.iri, best)
    return tuple(found.values())


_ITEM = re.compile(r"^\s*(?:(?:sub-?\s?question\s*)?\d+\s*[.):-]|[-*•])\s*(?P<text>.+?)\s*$", re.IGNORECASE)
_LEAD = re.compile(r"^(?:(?:sub-?\s?)?question\s*\d*\s*[:.-]\s*)", re.IGNORECASE)
_VAGUE = re.compile(r"\b(?:this condition|the condition|this disease|the disease|this problem|these symptoms|"
                    r"this symptom|this drug|this medication|it|this|that|they|them)\b", re.IGNORECASE)


#: what a question asks for -> the wording that asks it (English, and the Chinese of CMCQA/ExplainCPE)
INTENTS: dict[str, re.Pattern[str]] = {
    "diagnosis": re.compile(r"\b(?:what (?:is|could|might|do|does)\b.*\b(?:it|this|that|wrong|have|be|cause)|"
                            r"what'?s (?:wrong|happening|going on)|diagnos\w*|which (?:disease|condition)|"
                            r"what (?:disease|condition|illness)|cause[sd]? (?:of|by|this|these|my))|"
                            r"什么病|怎么回事|诊断|原因", re.IGNORECASE),
    "tests": re.compile(r"\b(?:tests?|testing|exam\w*|check(?:ed|up)?|screen\w*|scan|x-?ray|blood work|"
                        r"confirm)\b|检查|化验", re.IGNORECASE),
    "treatment": re.compile(r"\b(?:take|taking|medication|medicine|medicines|drugs?|treat\w*|cure|therap\w*|"
                            r"prescri\w*|remed\w*|pills?|relieve|help with|what (?:can|should) i do)\b|"
                            r"吃什么药|用药|治疗|怎么办", re.IGNORECASE),
    "avoid": re.compile(r"\b(?:avoid|not take|shouldn'?t|should not|never take|contraindicat\w*|unsafe|"
                        r"dangerous|interact\w*)\b|禁忌|不能吃|避免", re.IGNORECASE),
}


def question_intents(question: str) -> tuple[str, ...]:
    """What the question asks for, among ``INTENTS`` (diagnosis, tests, treatment, avoid), in that order; a
    question that asks none of them explicitly is taken to ask what it is and what to do about it."""
    found = tuple(name for name, pattern in INTENTS.items() if pattern.search(question))
    return found or ("diagnosis", "treatment")


def parse_sub_questions(raw: str, limit: int) -> list[str]:
    """Sub-questions from the model's text: numbered or bulleted lines (else lines ending in '?'), cleaned,
    de-duplicated, at most ``limit``. An unfinished ``<think>`` block yields nothing."""
    text = strip_think(raw)
    if "<think>" in text:
        return []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    items = [m.group("text") for m in map(_ITEM.match, lines) if m]
    if not items:
        items = [ln.strip() for ln in lines if ln.strip().endswith("?")]
    out: dict[str, str] = {}
    for item in items:
        item = _LEAD.sub("", item.replace("**", "")).strip(" \"'`")
        if len(item) >= 8:
            out.setdefault(item.casefold(), item)
    return list(out.values())[:limit]


class Decomposer:
    """Splits questions into entity-anchored sub-questions; ``decompose_many`` asks the model in one batched call."""

    def __init__(self, kg: KnowledgeGraphLike, backend: Backend, config: MirageConfig | None = None) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self._links: dict[str, tuple[Entity, ...]] = {}

    def link(self, text: str) -> tuple[Entity, ...]:
        if text not in self._links:
            self._links[text] = link_entities(self.kg, text, self.config)
        return self._links[text]

    def needs_model(self, entities: Sequence[Entity]) -> bool:
        """Only a question naming several distinct entities is split."""
        return self.config.n_q > 1 and len(entities) > 1

    def whole(self, question: str, entities: Sequence[Entity], note: str | None = None) -> Decomposition:
        """The question as its own single sub-question."""
        return Decomposition(question, tuple(entities), (SubQuestion(question, tuple(entities), "question"),),
                             notes=(note,) if note else ())

    @property
    def constrained(self) -> bool:
        """Whether the model's split is asked for as JSON the engine constrains."""
        return self.config.constrains(self.backend, "decompose")

    def prompt(self, question: str, entities: Sequence[Entity]) -> str:
        labels = _labels(entities)
        if self.constrained:
            messages = prompts.structured_decomposer_messages(question, labels, self.config.n_q)
        else:
            messages = prompts.decomposer_messages(question, labels, self.config.n_q)
        return self.backend.format_chat(messages)

    def constraint(self, entities: Sequence[Entity]) -> OutputConstraint | None:
        """The JSON schema of a split: 1 to ``n_q`` items (as many as there are entities, where ``n_q`` allows),
        each an entity of the question and a sub-question about it; None where the engine cannot constrain."""
        if not self.constrained:
            return None
        labels = _labels(entities)
        item = {"type": "object", "properties": {
            "entity": {"enum": labels}, "question": {"type": "string", "minLength": 8, "maxLength": 120}},
            "required": ["entity", "question"], "additionalProperties": False}
        n_q = self.config.n_q
        return OutputConstraint(json_schema={"type": "object", "properties": {"sub_questions": {
            "type": "array", "items": item, "minItems": min(len(labels), n_q), "maxItems": n_q}},
            "required": ["sub_questions"], "additionalProperties": False})

    def request(self, question: str, entities: Sequence[Entity], seed: int | None = None) -> CompletionRequest:
        """The decomposer's request for one question: its prompt, settings and (where it can be) constraint."""
        return CompletionRequest(self.prompt(question, entities), (), self.config.decomposer_params(seed),
                                 self.constraint(entities))

    def parse(self, question: str, entities: Sequence[Entity], completion: Completion | str) -> Decomposition:
        """Check the model's split against the KG: link, repair or drop, fill gaps, fall back when unusable."""
        raw = completion if isinstance(completion, str) else completion.text
        tokens = (0, 0) if isinstance(completion, str) else (completion.completion_tokens, completion.prompt_tokens)
        if self.constrained:
            cut = isinstance(completion, Completion) and completion.finish_reason == "length"
            return self._parse_structured(question, entities, raw, tokens, cut)
        n_q = self.config.n_q
        notes: list[str] = []
        proposed = parse_sub_questions(raw, n_q)
        own = {e.iri for e in entities}
        found = [(text, self.link(text)) for text in proposed]
        # Anchored means anchored on the question's own entities: a sub-question about something the question never
        # names (copied from an example, made up) would send a chain off topic.
        linked = [(text, tuple(e for e in ents if e.iri in own) if own else ents, bool(ents)) for text, ents in found]
        covered = {e.iri for _, ents, _ in linked for e in ents}
        uncovered = [e for e in entities if e.iri not in covered]
        subs: list[SubQuestion] = []
        for text, ents, links_elsewhere in linked:
            if ents:
                subs.append(SubQuestion(text, ents, "model"))
            elif links_elsewhere:
                notes.append(f"dropped {text!r}: it names no entity of the question")
            elif uncovered and _VAGUE.search(text):  # "what treats it?": name the entity it must mean
                entity = uncovered.pop(0)
                repaired = _VAGUE.sub(entity.label, text, count=1)
                notes.append(f"repaired {text!r} (links to no KG entity) as {repaired!r}")
                subs.append(SubQuestion(repaired, (entity,), "repaired"))
            else:
                notes.append(f"dropped {text!r}: it links to no KG entity")
        if not subs:
            notes.append(("the model's split was unusable; one sub-question per linked entity group instead"
                          if raw.strip() else "the model wrote nothing; one sub-question per linked entity group")
                         + f" (the {self.backend.name} engine cannot constrain the model's output to a split)")
            subs = self._fallback(question, entities)
        else:
            for entity in uncovered:  # an entity of the question that no sub-question asks about
                if len(subs) >= n_q:
                    notes.append(f"{entity.label} is not covered: already {n_q} sub-questions")
                    continue
                subs.append(SubQuestion(_focus(question, [entity]), (entity,), "fallback"))
                notes.append(f"added a sub-question for {entity.label}, which no sub-question covered")
        return Decomposition(question, tuple(entities), tuple(subs[:n_q]), raw, tuple(notes), *tokens)

    def _parse_structured(self, question: str, entities: Sequence[Entity], raw: str,
                          tokens: tuple[int, int], cut: bool = False) -> Decomposition:
        """The model's JSON split: each item's entity is one of the question's (the engine held it to the enum)."""
        n_q = self.config.n_q
        notes: list[str] = []
        by_label = {e.label: e for e in reversed(entities)}
        constraint = self.constraint(entities)
        assert constraint is not None
        problem = constraint.check(raw.strip())
        subs: list[SubQuestion] = []
        if problem is None:
            seen: set[str] = set()
            for item in json.loads(raw)["sub_questions"][:n_q]:
                entity = by_label[item["entity"]]
                text = " ".join(str(item["question"]).split())
                if text.casefold() in seen:
                    notes.append(f"dropped {text!r}: the model wrote it twice")
                    continue
                seen.add(text.casefold())
                if entity.label.casefold() not in text.casefold():  # the chain searches from what it names
                    notes.append(f"{text!r} does not name {entity.label}, the entity it is about: named it")
                    text = f"{entity.label}: {text}"
                subs.append(SubQuestion(text, (entity,), "model"))
        if not subs:
            why = "cut by its max tokens" if cut else (problem or "no item")
            notes.append(f"the model's structured split was unusable ({why}); one sub-question per linked entity "
                         "group instead")
            subs = self._fallback(question, entities)
        else:
            covered = {e.iri for s in subs for e in s.entities}
            for entity in (e for e in entities if e.iri not in covered):
                if len(subs) >= n_q:
                    notes.append(f"{entity.label} is not covered: already {n_q} sub-questions")
                    continue
                subs.append(SubQuestion(_focus(question, [entity]), (entity,), "fallback"))
                notes.append(f"added a sub-question for {entity.label}, which no sub-question covered")
        return Decomposition(question, tuple(entities), tuple(subs[:n_q]), raw, tuple(notes), *tokens,
                             constrained=True)

    def _fallback(self, question: str, entities: Sequence[Entity]) -> list[SubQuestion]:
        groups = _groups(list(entities), self.config.n_q)
        if len(groups) < 2:
            return [SubQuestion(question, tuple(entities), "question")]
        return [SubQuestion(_focus(question, group), tuple(group), "fallback") for group in groups]

    def decompose_many(self, questions: Sequence[str], *, seed: int | None = None) -> list[Decomposition]:
        """Decompose several questions; the ones that need the model share one batched ``generate`` call."""
        linked = [self.link(q) for q in questions]
        asking = [i for i, ents in enumerate(linked) if self.needs_model(ents)]
        out: list[Decomposition | None] = [None] * len(questions)
        for i, (question, ents) in enumerate(zip(questions, linked)):
            if i not in asking:
                out[i] = self.whole(question, ents)
        if asking and not self.constrained:
            completions = self.backend.generate([self.prompt(questions[i], linked[i]) for i in asking], (),
                                                self.config.decomposer_params(seed))
        elif asking:  # each question's own schema (its entities): one request each, submitted together
            completions = [f.result() for f in submit_all(self.backend, [
                self.request(questions[i], linked[i], sample_seed(seed, row)) for row, i in enumerate(asking)])]
        if asking:
            for i, completion in zip(asking, completions):
                out[i] = self.parse(questions[i], linked[i], completion)
        return [d for d in out if d is not None]

    def decompose(self, question: str) -> Decomposition:
        return self.decompose_many([question])[0]


def _labels(entities: Sequence[Entity]) -> list[str]:
    """The entities' labels, each once (two entities may share a label)."""
    return list(dict.fromkeys(e.label for e in entities))


def _focus(question: str, group: Sequence[Entity]) -> str:
    return f"Regarding {' and '.join(e.label for e in group)}: {question}"


def _groups(entities: list[Entity], n_q: int) -> list[list[Entity]]:
    """At most ``n_q`` groups of consecutive entities, as even as possible."""
    if not entities:
        return []
    count = min(n_q, len(entities))
    size, extra = divmod(len(entities), count)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        groups.append(entities[start:end])
        start = end
    return groups
