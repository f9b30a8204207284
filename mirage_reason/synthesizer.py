"""The answer synthesizer: turns the chains' answers into cited claims, resolves conflicts between them, and has
the model word an answer from the surviving claims only.

Everything but the wording is deterministic. A claim is a KG entity that a chain's answer mentions (found by the
linker, so its label is the ontology's canonical one) and that the chain's own evidence paths contain; the paths
are its citations. Chains that name different diagnoses vote, each vote weighted by the evidence neighbourhood
behind it and by how much of the question the diagnosis explains; a drug the KG contraindicates in the patient's
conditions is dropped with a warning; claims that rest only on an outvoted diagnosis go with it. No surviving claim
means no answer: the synthesizer abstains instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mirage_kg import Entity, MirageError, Path, expand

from mirage_reason import prompts
from mirage_reason.backends.base import Backend, Completion, strip_think
from mirage_reason.chain import ChainResult, path_json
from mirage_reason.config import MirageConfig

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

__all__ = ["Claim", "Conflict", "Synthesis", "Synthesizer", "entity_kind", "normalise_units", "whole_sentences"]

Status = Literal["kept", "unsupported", "outvoted", "off-diagnosis", "contraindicated"]

RDFS_SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"
CONTRAINDICATED_IN = expand("MKG:contraindicated_in")

# relation local name -> (kind of its subject, kind of its object); the EMCKG relations and the schema's.
_ROLES: dict[str, tuple[str | None, str | None]] = {
    "has_symptom": ("disease", "symptom"),
    "possible_disease": ("symptom", "disease"),
    "need_medical_test": ("disease", "test"),
    "can_check_disease": ("test", "disease"),
    "need_medication": ("disease", "drug"),
    "possible_cure_disease": ("drug", "disease"),
    "contraindicated_in": ("drug", None),
    "has_phenotype": ("disease", "symptom"),
}


def _local(iri: str) -> str:
    return re.split(r"[#/:]", iri)[-1].lower()


def entity_kind(entity: Entity, paths: Sequence[Path], _inherit: bool = True) -> str:
    """What an entity is (disease, symptom, test, drug, or concept), read off the relations it takes part in; an
    entity seen only in is-a edges takes the kind of its parent or child."""
    votes: dict[str, int] = {}
    kin: list[Entity] = []
    for path in paths:
        for step in path.steps:
            if step.relation.iri == RDFS_SUBCLASS:
                if entity.iri in (step.subject.iri, step.object.iri):
                    kin.append(step.object if step.subject.iri == entity.iri else step.subject)
                continue
            roles = _ROLES.get(_local(step.relation.iri))
            if roles is None:
                continue
            for node, kind in ((step.subject, roles[0]), (step.object, roles[1])):
                if kind and node.iri == entity.iri:
                    votes[kind] = votes.get(kind, 0) + 1
    if not votes and _inherit:
        for other in kin:
            kind = entity_kind(other, paths, _inherit=False)
            if kind != "concept":
                votes[kind] = votes.get(kind, 0) + 1
    return max(sorted(votes), key=lambda k: votes[k]) if votes else "concept"


_UNITS = [
    (r"milligrams?|mgs?", "mg"),
    (r"micrograms?|mcg|ug|µg|μg", "µg"),
    (r"grams?|gm", "g"),
    (r"millilit(?:er|re)s?|mls?", "mL"),
    (r"international units?|i\.u\.|iu", "IU"),
]
_UNIT_RES = [(re.compile(rf"(\d+(?:[.,]\d+)?)\s*(?:{pat})(?!\w)", re.IGNORECASE), unit) for pat, unit in _UNITS]


def normalise_units(text: str) -> str:
    """Dose units in one spelling: "500 milligrams" -> "500 mg", "100 mcg" -> "100 µg", "5 ml" -> "5 mL"."""
    for regex, unit in _UNIT_RES:
        text = regex.sub(lambda m, u=unit: f"{m.group(1)} {u}", text)
    return text


@dataclass(frozen=True)
class Claim:
    """An entity an answer asserts, with the paths that support it. ``text`` is the strongest path, verbalised."""

    entity: Entity
    kind: str
    text: str
    citations: tuple[Path, ...]
    chains: tuple[int, ...]  # indexes (in the synthesizer's input) of the chains that make the claim
    support: float  # sum of the vote weights of those chains
    status: Status = "kept"
    reason: str = ""

    def to_json(self, full: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"text": self.text, "citations": [path_json(p) for p in self.citations]}
        if full:
            data.update(entity=self.entity.to_json(), kind=self.kind, chains=list(self.chains),
                        support=round(self.support, 4), status=self.status, reason=self.reason)
        return data


@dataclass(frozen=True)
class Conflict:
    """Chains that disagree, and how it was settled."""

    kind: Literal["diagnosis", "treatment"]
    entities: tuple[Entity, ...]
    winner: Entity | None
    votes: tuple[tuple[str, float], ...]  # (entity id, total weight)
    reason: str
    evidence: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "entities": [e.to_json() for e in self.entities],
                "winner": self.winner.to_json() if self.winner else None,
                "votes": {k: round(v, 4) for k, v in self.votes}, "reason": self.reason,
                "evidence": [path_json(p) for p in self.evidence]}


@dataclass(frozen=True)
class Synthesis:
    """What the deterministic part decided; the model only words ``claims`` (and ``warnings``)."""

    question: str
    question_entities: tuple[Entity, ...]
    claims: tuple[Claim, ...]
    dropped: tuple[Claim, ...]
    conflicts: tuple[Conflict, ...]
    normalised_answers: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    resolved: bool = True  # False: claims were only extracted (the no-synthesizer ablation)

    @property
    def abstained(self) -> bool:
        return not self.claims

    @property
    def facts(self) -> list[str]:
        """The numbered facts the writer may use: each surviving claim's text, once."""
        return list(dict.fromkeys(c.text for c in self.claims))


@dataclass
class _Mention:
    chain: int
    entity: Entity
    position: int
    paths: list[Path] = field(default_factory=list)


class Synthesizer:
    """Claims, conflicts and votes from the chains of one question; the wording prompt; the finished text."""

    def __init__(self, kg: KnowledgeGraph, backend: Backend, config: MirageConfig | None = None) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self._isa: dict[tuple[str, str], bool] = {}
        self._contra: dict[str, tuple[Path, ...]] = {}

    # -- linking --------------------------------------------------------------------------------------------------

    def _mentions(self, text: str) -> list[tuple[Entity, int, int]]:
        """(entity, start, end) for every mention of ``text`` that links above the threshold."""
        if not text.strip():
            return []
        try:
            mentions = self.kg.link(text, top=self.config.match_top)
        except MirageError:
            return []
        out = []
        for m in mentions:
            good = [c for c in m.candidates[: self.config.match_top] if c.score >= self.config.match_threshold]
            if good:
                out.append((max(good, key=lambda c: c.score).entity, m.start, m.end))
        return sorted(out, key=lambda t: t[1])

    def normalise(self, text: str, mentions: Sequence[tuple[Entity, int, int]] | None = None) -> str:
        """``text`` with each linked mention written as its entity's canonical label, and dose units normalised."""
        mentions = self._mentions(text) if mentions is None else mentions
        out, last = [], 0
        for entity, start, end in sorted(mentions, key=lambda t: t[1]):
            if start < last:
                continue  # overlapping mentions: the first wins
            out.append(text[last:start])
            out.append(entity.label if text[start:end].casefold() != entity.label.casefold() else text[start:end])
            last = end
        out.append(text[last:])
        return normalise_units("".join(out))

    # -- the deterministic part -----------------------------------------------------------------------------------

    def analyse(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                *, resolve: bool = True) -> Synthesis:
        """Extract claims from every chain; with ``resolve``, vote on diagnoses and check treatments."""
        cfg = self.config
        q_iris = {e.iri for e in question_entities}
        evidence = [c.evidence_paths for c in chains]
        mentions: list[_Mention] = []
        normalised = []
        for i, chain in enumerate(chains):
            found = self._mentions(chain.answer)
            normalised.append(self.normalise(chain.answer, found))
            seen: set[str] = set()
            for entity, start, _ in found:
                if entity.iri in q_iris or entity.iri in seen:
                    continue
                seen.add(entity.iri)
                paths = [p for p in evidence[i] if entity.iri in _node_iris(p)]
                mentions.append(_Mention(i, entity, start, paths))
        all_paths = [p for paths in evidence for p in paths]
        kinds = {m.entity.iri: entity_kind(m.entity, all_paths) for m in mentions}

        weights = [1.0] * len(chains)
        conflicts: list[Conflict] = []
        losers: set[str] = set()
        if resolve:
            losers, conflict = self._vote_diagnosis(question_entities, chains, mentions, kinds, weights)
            if conflict is not None:
                conflicts.append(conflict)

        claims: dict[str, Claim] = {}
        order: list[str] = []
        for m in mentions:
            if m.entity.iri not in claims:
                order.append(m.entity.iri)
            prev = claims.get(m.entity.iri)
            supported = bool(m.paths)
            paths = list(prev.citations) if prev else []
            paths += [p for p in m.paths if p not in paths]
            chains_of = (prev.chains if prev else ()) + ((m.chain,) if supported else ())
            support = (prev.support if prev else 0.0) + (weights[m.chain] if supported else 0.0)
            claims[m.entity.iri] = Claim(m.entity, kinds[m.entity.iri], "", tuple(paths), chains_of, support)

        kept: list[Claim] = []
        dropped: list[Claim] = []
        for iri in order:
            claim = claims[iri]
            if not claim.chains:
                dropped.append(_with(claim, "unsupported", "no evidence path the chains saw contains it"))
                continue
            citations = _rank_paths(claim.citations, q_iris)
            if iri in losers:
                dropped.append(_with(claim, "outvoted", "another diagnosis won the vote", citations))
                continue
            if losers:
                clean = [p for p in citations if not (_node_iris(p) & losers)]
                if not clean:
                    dropped.append(_with(claim, "off-diagnosis", "it rests only on an outvoted diagnosis", citations))
                    continue
                citations = clean
            citations = citations[: cfg.max_citations]
            kept.append(Claim(claim.entity, claim.kind, citations[0].text, tuple(citations), claim.chains,
                              claim.support))

        warnings: list[str] = []
        if resolve:
            kept, more_dropped, warning_claims, treatment = self._check_treatments(question_entities, kept)
            dropped += more_dropped
            conflicts += treatment
            warnings = [c.text for c in warning_claims]
            kept += warning_claims
        kept.sort(key=lambda c: (-c.support, -len(c.chains), c.entity.label.casefold()))
        return Synthesis(question, tuple(question_entities), tuple(kept[: cfg.max_claims]), tuple(dropped),
                         tuple(conflicts), tuple(normalised), tuple(warnings), resolve)

    def _vote_diagnosis(self, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                        mentions: Sequence[_Mention], kinds: dict[str, str],
                        weights: list[float]) -> tuple[set[str], Conflict | None]:
        """Each chain's first supported disease is its diagnosis; incompatible diagnoses are put to a vote."""
        primary: dict[int, _Mention] = {}
        for m in sorted(mentions, key=lambda m: (m.chain, m.position)):
            if m.paths and kinds[m.entity.iri] == "disease" and m.chain not in primary:
                primary[m.chain] = m
        candidates = list({m.entity.iri: m.entity for m in primary.values()}.values())
        if len(candidates) < 2:
            return set(), None
        q_iris = {e.iri for e in question_entities}
        all_paths = [p for c in chains for p in c.evidence_paths]
        neighbourhood = {i: len({n for p in m.paths for n in _node_iris(p)}) for i, m in primary.items()}
        widest = max(neighbourhood.values()) or 1
        totals: dict[str, float] = {}
        count: dict[str, int] = {}
        for i, m in primary.items():
            d = m.entity.iri
            explained = {q for q in q_iris if any({q, d} <= _node_iris(p) for p in all_paths)}
            match = len(explained) / len(q_iris) if q_iris else 0.0
            weights[i] = 1.0 + neighbourhood[i] / widest + match
            totals[d] = totals.get(d, 0.0) + weights[i]
            count[d] = count.get(d, 0) + 1
        labels = {e.iri: e.label for e in candidates}
        winner_iri = max(totals, key=lambda d: (totals[d], count[d], _neg(labels[d])))
        winner = next(e for e in candidates if e.iri == winner_iri)
        losers = {e.iri for e in candidates if e.iri != winner_iri and not self._is_a_related(e, winner)}
        if not losers:
            return set(), None
        votes = tuple(sorted(((e.id, totals[e.iri]) for e in candidates), key=lambda kv: -kv[1]))
        reason = (f"chains name different diagnoses; {winner.label} wins the vote weighted by evidence coverage and "
                  "match to the question")
        return losers, Conflict("diagnosis", tuple(candidates), winner, votes, reason)

    def _is_a_related(self, a: Entity, b: Entity) -> bool:
        """One diagnosis is a kind of the other (type 2 diabetes vs diabetes): not a conflict."""
        key = (a.iri, b.iri) if a.iri < b.iri else (b.iri, a.iri)
        if key not in self._isa:
            try:
                paths = self.kg.bridge(a, b, max_hops=3, max_paths=5, relations=[RDFS_SUBCLASS])
            except MirageError:
                paths = []
            # siblings (a <- parent -> b) share a parent but neither is a kind of the other: still a conflict
            self._isa[key] = any(len({s.direction for s in p.steps}) == 1 for p in paths)
        return self._isa[key]

    def _contraindications(self, drug: Entity) -> tuple[Path, ...]:
        if drug.iri not in self._contra:
            try:
                steps = self.kg.anchor(drug, k=max(self.config.k, 50), relations=[CONTRAINDICATED_IN])
            except MirageError:
                steps = []
            self._contra[drug.iri] = tuple(
                Path((s,)) for s in steps
                if _local(s.relation.iri) == "contraindicated_in" and s.subject.iri == drug.iri
            )
        return self._contra[drug.iri]

    def _check_treatments(self, question_entities: Sequence[Entity], kept: list[Claim]
                          ) -> tuple[list[Claim], list[Claim], list[Claim], list[Conflict]]:
        """Drop a drug that the KG contraindicates in a condition of the question or of a surviving claim."""
        conditions = {e.iri: e for e in question_entities}
        conditions.update({c.entity.iri: c.entity for c in kept if c.kind == "disease"})
        survivors, dropped, warnings, conflicts = [], [], [], []
        for claim in kept:
            if claim.kind != "drug":
                survivors.append(claim)
                continue
            against = [p for p in self._contraindications(claim.entity) if p.steps[0].object.iri in conditions]
            if not against:
                survivors.append(claim)
                continue
            where = ", ".join(p.steps[0].object.label for p in against)
            dropped.append(_with(claim, "contraindicated", f"contraindicated in {where}"))
            warnings.append(Claim(claim.entity, "warning", against[0].text, tuple(against[: self.config.max_citations]),
                                  claim.chains, claim.support))
            conflicts.append(Conflict("treatment", (claim.entity, *(p.steps[0].object for p in against)), None, (),
                                      f"{claim.entity.label} is recommended by a chain but the knowledge graph "
                                      f"contraindicates it in {where}", tuple(against)))
        return survivors, dropped, warnings, conflicts

    # -- wording --------------------------------------------------------------------------------------------------

    def prompt(self, synthesis: Synthesis) -> str | None:
        """The writer's prompt, or None when there is nothing to write from (the answer abstains)."""
        if synthesis.abstained:
            return None
        return self.backend.format_chat(
            prompts.synthesizer_messages(synthesis.question, synthesis.facts, synthesis.warnings))

    def merge_prompt(self, question: str, chains: Sequence[ChainResult]) -> str:
        """Without the synthesizer: one prompt over the chains' answers (the reference code's way)."""
        return self.backend.format_chat(prompts.merge_messages(question, [(c.sub_question, c.answer) for c in chains]))

    def abstention(self, synthesis: Synthesis) -> str:
        return prompts.abstain_text([e.label for e in synthesis.question_entities])

    def finish(self, synthesis: Synthesis, completion: Completion | str | None) -> tuple[str, tuple[str, ...]]:
        """The answer text and its flags: mentions of entities no surviving claim supports are flagged."""
        if synthesis.abstained:
            return self.abstention(synthesis), ()
        raw = completion if isinstance(completion, str) or completion is None else completion.text
        text = _tidy(raw or "")
        if isinstance(completion, Completion) and completion.finish_reason == "length":
            text = whole_sentences(text)
        flags: list[str] = []
        if not text:
            flags.append("the model wrote no usable answer; the claims are listed as they are")
            text = self.fallback_text(synthesis)
        text = normalise_units(text)
        allowed = {e.iri for e in synthesis.question_entities}
        for claim in synthesis.claims:
            allowed.add(claim.entity.iri)
            allowed.update(n.iri for p in claim.citations for n in p.nodes)
        warnings = {c.entity.iri: c for c in synthesis.claims if c.kind == "warning"}
        unstated: list[str] = []
        for entity, _, _ in self._mentions(text):
            warning = warnings.pop(entity.iri, None)
            if warning is not None:
                # The writer named a drug the graph contraindicates here (small models even recommend it): the
                # warning must be in the text the user reads, not only in the claims.
                if warning.text.lower() not in text.lower():
                    flags.append(f"the answer mentions {entity.label}, which the knowledge graph contraindicates "
                                 f"({warning.text})")
                    unstated.append(warning.text)
            elif entity.iri not in allowed:
                flags.append(f"the answer mentions {entity.label}, which no surviving claim supports")
                allowed.add(entity.iri)
        if unstated:
            text += "\n\n" + " ".join(f"Warning: {w}." for w in unstated)
        return text, tuple(flags)

    def fallback_text(self, synthesis: Synthesis) -> str:
        facts = " ".join(f"{fact} [{i}]." for i, fact in enumerate(synthesis.facts, start=1))
        return f"From the knowledge graph: {facts} Please see a doctor about your situation."

    def synthesize(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                   *, seed: int | None = None) -> tuple[Synthesis, str, tuple[str, ...], Completion | None]:
        """One question end to end (the coordinator batches the wording step of many)."""
        synthesis = self.analyse(question, question_entities, chains)
        prompt = self.prompt(synthesis)
        completion = None
        if prompt is not None:
            completion = self.backend.generate([prompt], (), self.config.synthesizer_params(seed))[0]
        text, flags = self.finish(synthesis, completion)
        return synthesis, text, flags, completion


_SENTENCE_END = re.compile(r"[.!?](?:[\"')\]]|\s*\[\d+\])*(?=\s|$)")


def whole_sentences(text: str) -> str:
    """``text`` cut after its last complete sentence (a model that ran out of tokens stops mid-sentence)."""
    ends = list(_SENTENCE_END.finditer(text))
    return text[: ends[-1].end()].rstrip() if ends else text


def _tidy(text: str) -> str:
    text = strip_think(text)
    if "<think>" in text:  # it never finished thinking: no answer in it
        return ""
    text = re.sub(r"<\|KG_[A-Z_]+\|>", " ", text)
    return text.strip()


def _node_iris(path: Path) -> set[str]:
    return {n.iri for n in path.nodes}


def _rank_paths(paths: Sequence[Path], q_iris: set[str]) -> list[Path]:
    """Paths that touch the question first, then shorter ones, then alphabetical (deterministic)."""
    return sorted(paths, key=lambda p: (not (_node_iris(p) & q_iris), len(p.steps), p.text))


def _with(claim: Claim, status: Status, reason: str, citations: Sequence[Path] | None = None) -> Claim:
    cites = tuple(citations) if citations is not None else claim.citations
    text = cites[0].text if cites else claim.entity.label
    return Claim(claim.entity, claim.kind, text, cites[:3], claim.chains, claim.support, status, reason)


def _neg(label: str) -> tuple[int, ...]:
    """Sort key that makes alphabetically earlier labels win ties under ``max``."""
    return tuple(-ord(ch) for ch in label.casefold())
