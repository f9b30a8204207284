"""The answer records: the pipeline's answer to one question, with everything needed to check it, the claims and
conflicts it carries, and the JSON every surface shows (``ask --json``, ``/v1/ask``, the stream's answer event,
``eval``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mirage_kg import Entity, Path

from mirage_reason.pipeline.chain import ChainResult, path_json
from mirage_reason.pipeline.support import SentenceCheck, Support, flag_json, unsupported_text

__all__ = ["STAGES", "TOKEN_STAGES", "Answer", "Claim", "Conflict", "Status", "unique_paths"]

#: the stages reported in ``Answer.timings`` (seconds) and, where a model runs, ``Answer.tokens``
STAGES = ("link", "decompose", "retrieve", "chains", "search", "synthesize", "llm")
TOKEN_STAGES = ("decompose", "chains", "synthesize", "llm")

#: what became of a claim: kept, or why it was dropped
Status = Literal["kept", "unsupported", "outvoted", "off-diagnosis", "contraindicated"]


@dataclass(frozen=True)
class Claim:
    """An entity an answer asserts, with the paths that support it. ``text`` is the strongest path, verbalised.
    ``chains`` is empty for a claim the synthesizer looked up in the KG to answer the question's intent."""

    entity: Entity
    kind: str
    text: str
    citations: tuple[Path, ...]
    chains: tuple[int, ...]  # indexes (in the synthesizer's input) of the chains that make the claim
    support: float  # sum of the vote weights of those chains
    status: Status = "kept"
    reason: str = ""
    #: per citation, the source releases holding its facts (``UMLS 2024AA``), set by ``citing.cite_releases``
    sources: tuple[tuple[str, ...], ...] = ()

    def to_json(self, full: bool = False) -> dict[str, Any]:
        sources = self.sources if len(self.sources) == len(self.citations) else ((),) * len(self.citations)
        data: dict[str, Any] = {"text": self.text, "citations": [
            {**path_json(p), "sources": list(s)} for p, s in zip(self.citations, sources)]}
        if full:
            data.update(entity=self.entity.to_json(), kind=self.kind, chains=list(self.chains),
                        support=round(self.support, 4), status=self.status, reason=self.reason)
        return data


@dataclass(frozen=True)
class Conflict:
    """Chains that disagree, and how it was settled."""

    kind: Literal["diagnosis", "treatment", "choice"]
    entities: tuple[Entity, ...]
    winner: Entity | None
    votes: tuple[tuple[str, float], ...]  # (entity id or option letter, total weight)
    reason: str
    evidence: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "entities": [e.to_json() for e in self.entities],
                "winner": self.winner.to_json() if self.winner else None,
                "votes": {k: round(v, 4) for k, v in self.votes}, "reason": self.reason,
                "evidence": [path_json(p) for p in self.evidence]}


@dataclass(frozen=True)
class Answer:
    """The pipeline's answer to one question, with everything needed to check it."""

    question: str
    text: str
    abstained: bool
    sub_questions: tuple[str, ...]
    claims: tuple[Claim, ...]
    chains: tuple[ChainResult, ...]
    timings: Mapping[str, float]
    tokens: Mapping[str, int]
    pipeline: str = "mirage"
    question_entities: tuple[Entity, ...] = ()
    dropped: tuple[Claim, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # what ran the model: the backend's ``engine_info`` (llama.cpp: its thread count and why) and, where the engine
    # times itself, its prompt-evaluation and generation seconds and tokens over this answer's completions
    engine: Mapping[str, Any] = field(default_factory=dict)
    support: Support = Support("unsupported", "the answer was not checked against the knowledge graph")
    sentences: tuple[SentenceCheck, ...] = ()
    # who wrote the sub-questions ("model" | "template" | "question"), whether the engine constrained it, its notes
    decomposition: Mapping[str, Any] = field(default_factory=dict)
    # the graph's differential (candidates best first, each with what it explains) and the question's findings the
    # answer's diagnosis explains / leaves unexplained (``Synthesis.findings``)
    differential: tuple[Mapping[str, Any], ...] = ()
    findings: Mapping[str, Any] = field(default_factory=lambda: {"explained": [], "unexplained": []})

    @property
    def verdict(self) -> str:
        return self.support.verdict

    @property
    def unsupported_text(self) -> str:
        """The model's own words that no claim supports, shown apart from the answer under their own label."""
        return unsupported_text(self.flags)

    def cited_paths(self) -> tuple[Path, ...]:
        return unique_paths(p for c in self.claims for p in c.citations)

    def evidence_paths(self) -> tuple[Path, ...]:
        """Every path any chain had in front of it (seed facts and search results)."""
        return unique_paths(p for c in self.chains for p in c.evidence_paths)

    def evidence_entities(self) -> set[str]:
        """CURIEs of every entity in the evidence the model saw (for evidence recall)."""
        return {n.id for p in self.evidence_paths() for n in p.nodes}

    def to_json(self, full: bool = False) -> dict[str, Any]:
        """The ``ask --json`` record (the same on every surface: ``/v1/ask``, the stream's answer event, ``eval``):
        the answer and how grounded it is (the verdict, flags, the model's unsupported text shown apart, a check
        per sentence), its claims, conflicts and dropped claims, the chains (each saying which claims came of
        it), notes, timings and tokens. ``full`` adds the pipeline, the question's entities, the claims' kinds
        and support, and every evidence path."""
        data: dict[str, Any] = {
            "question": self.question,
            "answer": self.text,
            "abstained": self.abstained,
            "support": self.support.to_json(),
            "flags": [flag_json(f) for f in self.flags],
            "unsupported_text": self.unsupported_text,
            "sentences": [s.to_json() for s in self.sentences],
            "sub_questions": list(self.sub_questions),
            "claims": [c.to_json() for c in self.claims],
            "conflicts": [c.to_json() for c in self.conflicts],
            "dropped_claims": [c.to_json(full=True) for c in self.dropped],
            "decomposition": dict(self.decomposition),
            "differential": [dict(c) for c in self.differential],
            "findings": dict(self.findings),
            "chains": [self._chain_json(i, c) for i, c in enumerate(self.chains)],
            "notes": list(self.notes),
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            "tokens": dict(self.tokens),
        }
        if self.engine:
            data["engine"] = dict(self.engine)
        if full:
            data.update(
                pipeline=self.pipeline,
                question_entities=[e.to_json() for e in self.question_entities],
                claims=[c.to_json(full=True) for c in self.claims],
                evidence=[path_json(p) for p in self.evidence_paths()],
            )
        return data

    def _chain_json(self, index: int, chain: ChainResult) -> dict[str, Any]:
        """A chain's record, plus what the synthesizer kept of its answer (claims and dropped claims by index)."""
        kept = [i for i, c in enumerate(self.claims) if index in c.chains]
        dropped = [i for i, c in enumerate(self.dropped) if index in c.chains or not c.chains and
                   chain.answer and names_label(chain.answer, c.entity.label)]
        return {**chain.to_json(), "kept": bool(kept), "kept_claims": kept, "dropped_claims": dropped}


def names_label(text: str, label: str) -> bool:
    return bool(label) and label.casefold() in text.casefold()


def unique_paths(paths: Any) -> tuple[Path, ...]:
    seen: dict[tuple[Any, ...], Path] = {}
    for path in paths:
        key = tuple((s.subject.iri, s.relation.iri, s.object.iri) for s in path.steps)
        seen.setdefault(key, path)
    return tuple(seen.values())
