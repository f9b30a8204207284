"""The answer synthesizer: turns the chains' answers into cited claims, resolves conflicts between them, answers what
the question asked, and has the model word an answer from the surviving claims only.

Everything but the wording is deterministic, and nothing here knows a relation or class name: what an entity is
(disease, finding, drug, test, ...) and what a relation means (treats, is contraindicated in, is a finding of, is a
test for) come from the ontology through ``mirage_kg.model.kinds``. A claim is a KG entity that a chain's answer mentions
(linked, so its label is the ontology's canonical one) and that a path the chain saw connects to the question's
entities or to the winning diagnosis; those paths are its citations. Chains that name different diagnoses vote,
each vote weighted by the evidence neighbourhood behind it and by how much of the question the diagnosis explains;
a drug the KG contraindicates in the patient's conditions is dropped with a warning; claims that rest only on an
outvoted diagnosis go with it. The question's intents (what is it, which tests, what to take, what to avoid) are
answered from claims of the matching kind for the winning diagnosis, looked up in the KG when no chain named one.

Every question gets an answer of its type: a multiple-choice question one letter (the chains' vote, else the
model's own pick, flagged); a free-text question with no supported claim the chains' own answer flagged "not
supported by the knowledge graph", or an abstention (``MirageConfig.no_support``). The model's wording is checked:
if it drops the claims that answer the question or asserts what no claim supports, the answer falls back to a plain
verbalisation of the cited claims. A check that cannot run (KG unreachable) flags the answer; it never passes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from mirage_kg import ClinicalVocabulary, Entity, MirageError, Path, Step, clinical_vocabulary

from mirage_reason.pipeline import prompts, sentence_check
from mirage_reason.backends.base import Backend, Completion, OutputConstraint, strip_think
from mirage_reason.pipeline.chain import ChainResult, path_json
from mirage_reason.pipeline.choices import LETTERS, extract_letter, parse_options
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.decomposer import INTENTS, question_intents
from mirage_reason.pipeline.support import DOSE, Flag, SentenceCheck, Support, flag_json, harmful_in
from mirage_reason.pipeline.wording import render, wording_constraint, wording_form

if TYPE_CHECKING:
    from mirage_kg import Differential, KnowledgeGraphLike

__all__ = ["Claim", "Conflict", "Synthesis", "Synthesizer", "entity_kind", "normalise_units", "whole_sentences"]

Status = Literal["kept", "unsupported", "outvoted", "off-diagnosis", "contraindicated"]

RDFS_SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"

#: intent -> (the kind of claim that answers it, the roles that link such a claim to a diagnosis)
INTENT_ANSWERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "treatment": ("drug", ("treats", "treated_by", "prevents", "prevented_by")),
    "tests": ("test", ("test_for", "has_test")),
    "features": ("finding", ("has_finding",)),
    "causes": ("cause", ("caused_by",)),  # whatever the ontology says causes it: an organism, a gene, a substance
}
#: what a question may ask of a condition beyond the decomposer's intents: its features, its causes
KIND_INTENTS: dict[str, re.Pattern[str]] = {
    "features": re.compile(r"\b(?:features?|symptoms?|signs?|manifestations?|characteristics?|phenotypes?|"
                           r"presentations?|clinical picture)\b(?:.*\bof\b)?|\bhow does .* present\b|"
                           r"症状|表现|特征", re.IGNORECASE),
    "causes": re.compile(r"\b(?:what causes|causes? of|caused by|cause[sd]? it|etiology|aetiology|due to what)\b|"
                         r"病因|什么引起", re.IGNORECASE),
}
#: the intents the question names itself (the decomposer's default, "diagnosis" and "treatment", stands only
#: when it names none)
_EXPLICIT = re.compile("|".join(p.pattern for p in INTENTS.values()), re.IGNORECASE)
_CONTRA_ROLES = ("contraindicated_in", "contraindicates")
_CONDITION_KINDS = ("disease", "finding")
_INTENT_WORDS = {"treatment": "medication", "tests": "test", "features": "feature", "causes": "cause"}
_SHOWN = {"features": 6}  # claims looked up per diagnosis for an intent (3 unless said here)
NOT_SUPPORTED = "not supported by the knowledge graph"
#: how much the chains' votes (as a share of all votes) can add to a diagnosis's evidence coverage in the vote
VOTE_WEIGHT = 0.3
#: the linking methods that find an entity by what the text names (its label, a synonym, its id)
_NAMING_METHODS = frozenset({"id", "exact", "normalised", "synonym"})


def asked_intents(question: str) -> tuple[str, ...]:
    """What the question asks: the decomposer's intents (diagnosis, tests, treatment, avoid) plus a condition's
    features or causes; "what are the features of Marfan syndrome?" asks for its features only, not the default
    diagnosis and treatment."""
    extra = tuple(name for name, pattern in KIND_INTENTS.items() if pattern.search(question))
    if not extra:
        return question_intents(question)
    found = question_intents(question) if _EXPLICIT.search(question) else ()
    return found + tuple(x for x in extra if x not in found)


def entity_kind(entity: Entity, paths: Sequence[Path], vocab: ClinicalVocabulary) -> str:
    """What an entity is: its kind in the ontology, else what the relations of ``paths`` it takes part in imply
    (their roles or domain/range), else the kind of an is-a parent or child in those paths."""
    kind = vocab.kind(entity.iri)
    if kind != ClinicalVocabulary.CONCEPT:
        return kind
    steps = [s for p in paths for s in p.steps]
    implied = vocab.kinds_from_steps(entity.iri, steps)
    if implied is not None:
        return implied
    for step in steps:
        if step.relation.iri == RDFS_SUBCLASS and entity.iri in (step.subject.iri, step.object.iri):
            other = step.object if step.subject.iri == entity.iri else step.subject
            kind = vocab.kind(other.iri)
            if kind == ClinicalVocabulary.CONCEPT:
                kind = vocab.kinds_from_steps(other.iri, steps) or ClinicalVocabulary.CONCEPT
            if kind != ClinicalVocabulary.CONCEPT:
                return kind
    return ClinicalVocabulary.CONCEPT


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
    intents: tuple[str, ...] = ()
    diagnoses: tuple[Entity, ...] = ()  # the winning diagnosis (or compatible ones), else the question's diseases
    gaps: tuple[str, ...] = ()  # what the question asked that the KG holds nothing for
    flags: tuple[str, ...] = ()  # checks that could not run, picks the KG does not support
    options: tuple[str, ...] = ()  # a multiple-choice question's options
    letter: str | None = None  # the option the chains' vote (or the KG) picked
    model_answer: str = ""  # the chains' own answer, for a question no claim supports
    no_support: str = "flag"
    held: tuple[Path, ...] = ()  # the facts the chains saw that touch the question, strongest first
    safety: tuple[str, ...] = ()  # for "can I take / give X": what the graph says of X and the conditions
    differential: Differential | None = None  # the graph's conditions, by how much of the findings each explains

    @property
    def findings(self) -> dict[str, list[dict[str, str]]]:
        """The question's findings the leading diagnosis explains, and those it leaves unexplained."""
        if self.differential is None or not self.differential.findings:
            return {"explained": [], "unexplained": []}
        lead = self.diagnoses[0].iri if self.diagnoses else None
        if lead is None:
            return {"explained": [], "unexplained": [f.entity.to_json() for f in self.differential.findings
                                                   if f.role != "context"]}
        explained, unexplained = self.differential.split(lead)
        return {"explained": [e.to_json() for e in explained], "unexplained": [e.to_json() for e in unexplained]}

    @property
    def supported(self) -> bool:
        return bool(self.claims)

    @property
    def abstained(self) -> bool:
        """Only a free-text question with no supported claim abstains, and only under the "abstain" policy (or
        when the chains wrote nothing to fall back on)."""
        if self.options or self.claims:
            return False
        return self.no_support == "abstain" or not self.model_answer.strip()

    @property
    def facts(self) -> list[str]:
        """The numbered facts the writer may use: each surviving claim's text, once."""
        return list(dict.fromkeys(c.text for c in self.claims))


@dataclass
class _Mention:
    chain: int
    entity: Entity
    position: int
    paths: list[Path] = field(default_factory=list)  # the chain's paths that contain the entity


class _Unavailable(ClinicalVocabulary):
    """The vocabulary when the KG cannot be read: the shipped mapping only, with no entity to look up (every one
    resolves to a bare concept, so the checks that need kinds cannot fire, and the answer says so)."""

    def __init__(self) -> None:
        super().__init__(None)


class Synthesizer:
    """Claims, conflicts and votes from the chains of one question; the wording prompt; the finished text."""

    def __init__(self, kg: KnowledgeGraphLike, backend: Backend, config: MirageConfig | None = None) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self._isa: dict[tuple[str, str], bool] = {}
        self._contra: dict[str, tuple[Path, ...]] = {}
        self._by_role: dict[tuple[str, tuple[str, ...]], tuple[Step, ...]] = {}
        self._link_cache: dict[str, list[tuple[Entity, int, int, str]]] = {}

    # -- the ontology -----------------------------------------------------------------------------------------------

    def vocabulary(self) -> tuple[ClinicalVocabulary, str | None]:
        """The KG's kinds and roles, or an empty vocabulary and why when the KG cannot be read."""
        try:
            return clinical_vocabulary(self.kg, self.config.kinds), None
        except MirageError as exc:
            return _Unavailable(), f"the knowledge graph's kinds and roles could not be read ({exc})"

    # -- linking --------------------------------------------------------------------------------------------------

    def _mentions(self, text: str) -> list[tuple[Entity, int, int]]:
        """(entity, start, end) for every mention of ``text`` that links above the threshold."""
        return [(e, s, t) for e, s, t, _ in self._linked(text)]

    def _linked(self, text: str) -> list[tuple[Entity, int, int, str]]:
        """``_mentions`` with the method that found each entity (exact, synonym, ..., embedding); the last texts
        linked are kept, so that checking and normalising a text links it once."""
        if not text.strip():
            return []
        if text in self._link_cache:
            return self._link_cache[text]
        try:
            mentions = self.kg.link(text, top=self.config.match_top)
        except MirageError:
            return []
        out = []
        for m in mentions:
            good = [c for c in m.candidates[: self.config.match_top] if c.score >= self.config.match_threshold]
            if good:
                best = max(good, key=lambda c: c.score)
                out.append((best.entity, m.start, m.end, best.method))
        out.sort(key=lambda t: t[1])
        if len(self._link_cache) >= 256:
            self._link_cache.pop(next(iter(self._link_cache)))
        self._link_cache[text] = out
        return out

    def normalise(self, text: str, mentions: Sequence[tuple[Entity, int, int]] | None = None,
                  entities: set[str] | None = None) -> str:
        """``text`` with each mention that names an entity by its label or a synonym (never a fuzzy or embedding
        match: those turn ordinary words into ontology labels) written as its entity's canonical label, only for
        ``entities`` when given, and dose units normalised."""
        mentions = self._mentions(text) if mentions is None else mentions
        strong = {(s, t) for _, s, t, method in self._linked(text) if method in _NAMING_METHODS}
        out, last = [], 0
        for entity, start, end in sorted(mentions, key=lambda t: t[1]):
            if start < last:
                continue  # overlapping mentions: the first wins
            if (start, end) not in strong or (entities is not None and entity.iri not in entities):
                continue
            out.append(text[last:start])
            out.append(entity.label if text[start:end].casefold() != entity.label.casefold() else text[start:end])
            last = end
        out.append(text[last:])
        return normalise_units("".join(out))

    # -- the deterministic part -----------------------------------------------------------------------------------

    def analyse(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                *, resolve: bool = True) -> Synthesis:
        """Extract claims from every chain; with ``resolve``, vote on diagnoses, check treatments, answer the
        question's intents and pick a multiple-choice letter."""
        cfg = self.config
        vocab, problem = self.vocabulary()
        flags: list[str] = [problem] if problem else []
        q_iris = {e.iri for e in question_entities}
        evidence = [c.evidence_paths for c in chains]
        all_paths = [p for paths in evidence for p in paths]
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
                mentions.append(_Mention(i, entity, start, [p for p in evidence[i] if entity.iri in _node_iris(p)]))
        kinds = self._kinds(vocab, [m.entity for m in mentions] + list(question_entities), all_paths)

        weights = [1.0] * len(chains)
        differential: Differential | None = None
        conflicts: list[Conflict] = []
        losers: set[str] = set()
        winners: list[Entity] = []
        if resolve:
            differential = self._differential(question)
            losers, winners, conflict = self._vote_diagnosis(question_entities, chains, mentions, kinds, weights,
                                                             differential, "diagnosis" in question_intents(question))
            if conflict is not None:
                conflicts.append(conflict)
        if not winners:  # the question names its condition ("what should I take for asthma?")
            winners = [e for e in question_entities if kinds.get(e.iri) == "disease"]
        # A claim is supported only by a path that ties it to the question or to a diagnosis the chains put to the
        # vote (claims tied only to an outvoted one are dropped below as off-diagnosis).
        anchors = q_iris | {w.iri for w in winners} | {e.iri for c in conflicts for e in c.entities}

        claims: dict[str, Claim] = {}
        order: list[str] = []
        for m in mentions:
            if m.entity.iri not in claims:
                order.append(m.entity.iri)
            prev = claims.get(m.entity.iri)
            tied = _tying_paths(m.entity.iri, m.paths, evidence[m.chain], anchors)
            paths = list(prev.citations) if prev else []
            paths += [p for p in tied if p not in paths]
            chains_of = (prev.chains if prev else ()) + ((m.chain,) if tied else ())
            support = (prev.support if prev else 0.0) + (weights[m.chain] if tied else 0.0)
            claims[m.entity.iri] = Claim(m.entity, kinds[m.entity.iri], "", tuple(paths), chains_of, support)

        kept: list[Claim] = []
        dropped: list[Claim] = []
        for iri in order:
            claim = claims[iri]
            if not claim.chains:
                seen_in = [p for m in mentions if m.entity.iri == iri for p in m.paths]
                reason = ("no path the chains saw ties it to the question or the diagnosis" if seen_in
                          else "no evidence path the chains saw contains it")
                dropped.append(_with(claim, "unsupported", reason, seen_in))
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

        intents = asked_intents(question)
        options = parse_options(question)
        warnings: list[str] = []
        gaps: list[str] = []
        if resolve:
            kept = self._diagnosis_claims(winners, kept, differential, kinds)
            found_claims, gaps, problem = self._answer_intents(vocab, intents, winners, kept, kinds)
            kept += found_claims
            flags += [problem] if problem else []
            kept, more_dropped, warning_claims, treatment, problem = self._check_treatments(
                vocab, question_entities, winners, kept, kinds, "avoid" in intents)
            flags += [problem] if problem else []
            dropped += more_dropped
            conflicts += treatment
            warnings = [c.text for c in warning_claims]
            kept += warning_claims
        lead = {w.iri for w in winners}  # the diagnosis first: the answer names it before anything else
        # claims looked up in the KG keep the KG's ranking (hallmark features, first-line drugs) among themselves
        looked_up = {id(c): i for i, c in enumerate(kept) if not c.chains}
        kept.sort(key=lambda c: (c.kind == "warning", c.entity.iri not in lead, -c.support, -len(c.chains),
                                 looked_up.get(id(c), 0), c.entity.label.casefold()))
        letter = None
        if options:
            letter, choice, note = self._vote_letter(options, chains, weights, all_paths, q_iris)
            if choice is not None:
                conflicts.append(choice)
            if note:
                flags.append(note)
        model_answer = _model_answer(chains, normalised)
        return Synthesis(question, tuple(question_entities), tuple(_top(kept, cfg.max_claims)), tuple(dropped),
                         tuple(conflicts), tuple(normalised), tuple(warnings), resolve, intents, tuple(winners),
                         tuple(gaps), tuple(flags), options, letter, model_answer, cfg.no_support,
                         held=_held_facts(all_paths, q_iris),
                         differential=differential)

    def _kinds(self, vocab: ClinicalVocabulary, entities: Sequence[Entity], paths: Sequence[Path]) -> dict[str, str]:
        try:
            vocab.kinds(e.iri for e in entities)  # one batch for all of them
        except MirageError:
            pass  # each entity below then falls back on its paths
        out = {}
        for e in entities:
            try:
                out[e.iri] = entity_kind(e, paths, vocab)
            except MirageError:
                steps = [s for p in paths for s in p.steps]
                out[e.iri] = vocab.kinds_from_steps(e.iri, steps) or ClinicalVocabulary.CONCEPT
        return out

    def _differential(self, question: str) -> Differential | None:
        """The graph's differential for the question's findings (``mirage_kg.retrieval.differential``), read off the
        retriever's linking with no evidence budget; None for a multiple-choice question or when the KG cannot
        answer (the vote then counts the question entities the chains' paths tie to each diagnosis)."""
        if parse_options(question):
            return None
        try:
            return self.kg.retrieve(question, budget=0).differential
        except MirageError:
            return None

    def _vote_diagnosis(self, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                        mentions: Sequence[_Mention], kinds: dict[str, str], weights: list[float],
                        differential: Differential | None = None, asks_diagnosis: bool = True
                        ) -> tuple[set[str], list[Entity], Conflict | None]:
        """Each chain's first disease tied to the question is its diagnosis; the differential's best candidate
        (when the question asks what it is) stands too. Incompatible diagnoses are put to the paper's rule: the one
        whose evidence covers more of the question wins. A diagnosis's **coverage** is the share of the findings'
        specificity weight it explains (the differential; without one, the share of the question's entities the
        chains' paths tie it to); its **votes** are its chains' weights (1 + the evidence neighbourhood behind the
        chain, relative to the widest, + the chain's match to the question), as a share of all votes. A diagnosis
        explaining some finding always beats one explaining none, whatever the votes; among those, the score is
        coverage + ``VOTE_WEIGHT`` x vote share, so chains repeating a diagnosis add at most ``VOTE_WEIGHT`` and
        cannot outvote a clearly better explanation. Returns the losers, the winners (the winner and the
        diagnoses compatible with it) and the conflict."""
        q_iris = {e.iri for e in question_entities}
        primary: dict[int, _Mention] = {}
        for m in sorted(mentions, key=lambda m: (m.chain, m.position)):
            tied = bool(_tying_paths(m.entity.iri, m.paths, chains[m.chain].evidence_paths, q_iris))
            if tied and kinds[m.entity.iri] == "disease" and m.chain not in primary:
                primary[m.chain] = m
        candidates = list({m.entity.iri: m.entity for m in primary.values()}.values())
        graph = differential is not None and bool(differential.findings)
        best = differential.top if graph and asks_diagnosis else None  # type: ignore[union-attr]
        # the best may be a condition the question names when it explains the most: of the question's findings
        # ("cirrhosis with jaundice"), or when the question names no other finding ("panic attacks"); a condition
        # the patient has beside unexplained complaints ("I have asthma, and a headache") is context, not the answer
        if best is not None and graph and best.entity.iri in {
                f.entity.iri for f in differential.findings if f.role == "condition"}:  # type: ignore[union-attr]
            others = [f for f in differential.findings if f.role == "finding"]  # type: ignore[union-attr]
            if others and not [e for e in best.explains if e.iri != best.entity.iri]:
                best = None
        if best is not None and best.coverage > 0 and best.entity.iri not in {c.iri for c in candidates}:
            candidates.append(best.entity)
            kinds.setdefault(best.entity.iri, "disease")
        if len(candidates) < 2:
            return set(), candidates, None
        all_paths = [p for c in chains for p in c.evidence_paths]
        neighbourhood = {i: len({n for p in m.paths for n in _node_iris(p)}) for i, m in primary.items()}
        widest = max(neighbourhood.values(), default=0) or 1
        totals: dict[str, float] = dict.fromkeys((e.iri for e in candidates), 0.0)
        count: dict[str, int] = dict.fromkeys(totals, 0)
        match: dict[str, float] = {}
        for e in candidates:
            explained = {q for q in q_iris if any({q, e.iri} <= _node_iris(p) for p in all_paths)}
            match[e.iri] = len(explained) / len(q_iris) if q_iris else 0.0
        for i, m in primary.items():
            d = m.entity.iri
            weights[i] = 1.0 + neighbourhood[i] / widest + match[d]
            totals[d] += weights[i]
            count[d] += 1
        coverage = {d: differential.coverage(d) if graph else match[d] for d in totals}  # type: ignore[union-attr]
        all_votes = sum(totals.values()) or 1.0
        score = {d: coverage[d] + VOTE_WEIGHT * totals[d] / all_votes for d in totals}
        labels = {e.iri: e.label for e in candidates}
        winner_iri = max(totals, key=lambda d: (coverage[d] > 0, round(score[d], 9), count[d], _neg(labels[d])))
        winner = next(e for e in candidates if e.iri == winner_iri)
        losers = {e.iri for e in candidates if e.iri != winner_iri and not self._is_a_related(e, winner)}
        winners = [e for e in candidates if e.iri not in losers]
        if not losers:
            return set(), winners, None
        votes = tuple(sorted(((e.id, score[e.iri]) for e in candidates), key=lambda kv: -kv[1]))
        basis = ("the findings it explains, weighted by specificity" if graph
                 else "the question entities its paths reach")
        reason = (f"chains name different diagnoses; {winner.label} wins by evidence coverage ({basis}: "
                  f"{coverage[winner_iri]:.0%}) with the chains' votes (at most {VOTE_WEIGHT:.2f} of the score)")
        ranked = {c.entity.iri: c for c in differential.candidates} if graph else {}  # type: ignore[union-attr]
        evidence = ranked[winner_iri].paths if winner_iri in ranked else ()
        return losers, winners, Conflict("diagnosis", tuple(candidates), winner, votes, reason, evidence)

    def _diagnosis_claims(self, winners: Sequence[Entity], kept: list[Claim], differential: Differential | None,
                          kinds: dict[str, str]) -> list[Claim]:
        """``kept`` plus a claim for each winning diagnosis no chain's claim holds (the differential's best
        candidate won the vote), cited by the facts that tie it to the findings it explains."""
        if differential is None:
            return kept
        have = {c.entity.iri for c in kept}
        by_iri = {c.entity.iri: c for c in differential.candidates}
        added = []
        for w in winners:
            candidate = by_iri.get(w.iri)
            if w.iri in have or candidate is None or not candidate.paths:
                continue
            paths = candidate.paths[: self.config.max_citations]
            kinds.setdefault(w.iri, "disease")
            added.append(Claim(w, kinds[w.iri], paths[0].text, tuple(paths), (), candidate.score))
        return kept + added

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

    def _role_steps(self, vocab: ClinicalVocabulary, entity: Entity, roles: tuple[str, ...]) -> tuple[Step, ...]:
        """The KG's edges of ``entity`` whose relation has one of ``roles`` read from the entity. MirageError when
        the KG cannot answer."""
        key = (entity.iri, roles)
        if key not in self._by_role:
            relations = vocab.relations_with_role(*roles, *(vocab.inverse(r) for r in roles))
            steps: tuple[Step, ...] = ()
            if relations:
                found = self.kg.anchor(entity, k=max(self.config.k, 50), relations=sorted(relations))
                # read from the anchor's end: a merged concept's steps are stored triples of its members
                steps = tuple(s for s in found if vocab.role_from(s, s.start.iri) in roles)
            self._by_role[key] = steps
        return self._by_role[key]

    def _answer_intents(self, vocab: ClinicalVocabulary, intents: Sequence[str], diagnoses: Sequence[Entity],
                        kept: list[Claim], kinds: dict[str, str]) -> tuple[list[Claim], list[str], str | None]:
        """Claims that answer "which tests" / "what to take" / "what are its features" / "what causes it" for the
        diagnosis: the chains' own when they named some, else the KG's (its edges of the intent's roles, ranked as
        anchor ranks them: hallmark features first); a gap line when the KG has none."""
        added: list[Claim] = []
        gaps: list[str] = []
        problem = None
        have = {c.entity.iri for c in kept}
        for intent in intents:
            if intent not in INTENT_ANSWERS or not diagnoses:
                continue
            kind, roles = INTENT_ANSWERS[intent]
            if any(c.kind == kind for c in kept):
                continue
            for diagnosis in diagnoses[:2]:
                try:
                    steps = self._role_steps(vocab, diagnosis, roles)
                except MirageError as exc:
                    problem = f"the {intent} lookup for {diagnosis.label} could not run ({exc})"
                    continue
                shown = 0
                for step in steps:
                    other = step.end
                    if other.iri in have or shown >= _SHOWN.get(intent, 3):
                        continue
                    have.add(other.iri)
                    shown += 1
                    kinds.setdefault(other.iri, kind)
                    added.append(Claim(other, kind, Path((step,)).text, (Path((step,)),), (), 0.0))
                if not shown and problem is None:
                    gaps.append(f"The knowledge graph lists no {_INTENT_WORDS[intent]} for {diagnosis.label}.")
        return added, gaps, problem

    def answer_safety(self, synthesis: Synthesis) -> Synthesis:
        """For a safety question ("can I take / give X?", "is X safe with Y?"): what the graph says of each drug
        the question names and the patient's conditions (its contraindications there) as warning claims that lead
        the claims, and ``safety``, the sentences that lead the answer; a drug the graph says nothing against here
        gets a sentence saying so (which is no proof that it is safe). A lookup that cannot run is flagged."""
        if synthesis.options or not _SAFETY_QUESTION.search(synthesis.question):
            return synthesis
        vocab, problem = self.vocabulary()
        flags = list(synthesis.flags)
        if problem is not None:
            flags.append(Flag(f"the safety question could not be checked: {problem}", "check_unavailable"))
            return replace(synthesis, flags=tuple(flags))
        kinds = self._kinds(vocab, synthesis.question_entities, [p for c in synthesis.claims for p in c.citations])
        drugs = [e for e in synthesis.question_entities if kinds.get(e.iri) == "drug"]
        if not drugs:
            return synthesis
        drug_iris = {d.iri for d in drugs}
        conditions = {i: e for i, e in self._conditions(synthesis).items() if i not in drug_iris}
        where = ", ".join(e.label for e in conditions.values()) or "the conditions the question names"
        found: list[Claim] = []
        lines: list[str] = []
        for drug in drugs:
            try:
                against = [p for p in self._contraindications(vocab, drug) if _far_end(p, drug).iri in conditions]
            except MirageError as exc:
                flags.append(Flag(f"the contraindications of {drug.label} could not be looked up ({exc})",
                                  "check_unavailable"))
                continue
            if against:
                found += [Claim(drug, "warning", p.text, (p,), (), 0.0) for p in against]
                number = {t: i for i, t in enumerate(dict.fromkeys(c.text for c in found), start=1)}
                lines.append(f"What the knowledge graph says of {drug.label} here: "
                             + "; ".join(f"{p.text} [{number[p.text]}]" for p in against) + ".")
            else:
                lines.append(f"The knowledge graph holds no contraindication of {drug.label} in {where}; that does "
                             "not show it is safe.")
        if len(drugs) > 1:
            lines.append("The knowledge graph declares no drug-interaction relation, so interactions between "
                         f"{' and '.join(d.label for d in drugs)} are not checked.")
        texts = {c.text for c in found}
        claims = (*found, *(c for c in synthesis.claims if not (c.kind == "warning" and c.text in texts)))
        warnings = (*dict.fromkeys(c.text for c in found), *(w for w in synthesis.warnings if w not in texts))
        return replace(synthesis, claims=claims, warnings=warnings, safety=tuple(lines), flags=tuple(flags))

    def _contraindications(self, vocab: ClinicalVocabulary, drug: Entity) -> tuple[Path, ...]:
        if drug.iri not in self._contra:
            steps = self._role_steps(vocab, drug, ("contraindicated_in",))
            self._contra[drug.iri] = tuple(Path((s,)) for s in steps)
        return self._contra[drug.iri]

    def _check_treatments(self, vocab: ClinicalVocabulary, question_entities: Sequence[Entity],
                          diagnoses: Sequence[Entity], kept: list[Claim], kinds: dict[str, str], avoid: bool
                          ) -> tuple[list[Claim], list[Claim], list[Claim], list[Conflict], str | None]:
        """Drop a drug that the KG contraindicates in a condition of the question, the diagnosis or a surviving
        claim; with an "avoid" intent, also warn of the drugs the KG contraindicates in the diagnosis."""
        conditions = {e.iri: e for e in question_entities}
        conditions.update({e.iri: e for e in diagnoses})
        conditions.update({c.entity.iri: c.entity for c in kept if c.kind in _CONDITION_KINDS})
        survivors, dropped, warnings, conflicts = [], [], [], []
        failed: list[str] = []
        if not vocab.relations_with_role(*_CONTRA_ROLES) and any(c.kind == "drug" for c in kept):
            failed.append("the knowledge graph declares no relation with a contraindication role")
        for claim in kept:
            if claim.kind != "drug":
                survivors.append(claim)
                continue
            try:
                against = [p for p in self._contraindications(vocab, claim.entity) if _far_end(p, claim.entity).iri
                           in conditions]
            except MirageError as exc:
                failed.append(f"{claim.entity.label} ({exc})")
                survivors.append(claim)
                continue
            if not against:
                survivors.append(claim)
                continue
            where = ", ".join(_far_end(p, claim.entity).label for p in against)
            dropped.append(_with(claim, "contraindicated", f"contraindicated in {where}"))
            warnings.append(Claim(claim.entity, "warning", against[0].text, tuple(against[: self.config.max_citations]),
                                  claim.chains, claim.support))
            conflicts.append(Conflict("treatment", (claim.entity, *(_far_end(p, claim.entity) for p in against)),
                                      None, (), f"{claim.entity.label} is recommended but the knowledge graph "
                                      f"contraindicates it in {where}", tuple(against)))
        if avoid:
            warned = {w.entity.iri for w in warnings}
            for diagnosis in list(conditions.values())[:4]:
                try:
                    steps = self._role_steps(vocab, diagnosis, ("contraindicates",))
                except MirageError as exc:
                    failed.append(f"{diagnosis.label} ({exc})")
                    continue
                for step in steps[:3]:
                    drug = _far_end(Path((step,)), diagnosis)
                    if drug.iri not in warned:
                        warned.add(drug.iri)
                        warnings.append(Claim(drug, "warning", Path((step,)).text, (Path((step,)),), (), 0.0))
        problem = None
        if failed:
            problem = "the contraindication check could not run for " + "; ".join(failed)
        return survivors, dropped, warnings, conflicts, problem

    def _vote_letter(self, options: Sequence[str], chains: Sequence[ChainResult], weights: Sequence[float],
                     paths: Sequence[Path], q_iris: set[str]) -> tuple[str | None, Conflict | None, str | None]:
        """The option the chains pick, weighted by their diagnosis-vote weight; ties go to the option the KG
        evidence supports (its entities appear in a path with the question's), then to the earlier letter. With no
        chain pick, the option the evidence alone supports. Returns the letter, the vote, and a flag when the KG
        does not back the pick."""
        letters = LETTERS[: len(options)]
        totals: dict[str, float] = {}
        for i, chain in enumerate(chains):
            letter = extract_letter(chain.answer, options)
            if letter is not None:
                totals[letter] = totals.get(letter, 0.0) + weights[i]
        backed = {letter: self._option_support(option, paths, q_iris) for letter, option in zip(letters, options)}
        if totals:
            best = max(totals, key=lambda x: (totals[x], backed[x], -letters.index(x)))
            conflict = None
            if len(totals) > 1:
                votes = tuple(sorted(totals.items(), key=lambda kv: -kv[1]))
                conflict = Conflict("choice", (), None, votes, f"chains pick different options; {best} wins the vote")
            note = None if backed[best] else f"option {best} is the model's own pick, {NOT_SUPPORTED}"
            return best, conflict, note
        if any(backed.values()):
            best = max(letters, key=lambda x: (backed[x], -letters.index(x)))
            return best, None, f"no chain picked an option; {best} is the one the knowledge-graph evidence names"
        return None, None, None

    def _option_support(self, option: str, paths: Sequence[Path], q_iris: set[str]) -> int:
        entities = {e.iri for e, _, _ in self._mentions(option)} - q_iris
        return sum(1 for p in paths if (_node_iris(p) & entities) and (_node_iris(p) & q_iris))

    # -- wording --------------------------------------------------------------------------------------------------

    def prompt(self, synthesis: Synthesis) -> str | None:
        """The writer's prompt, or None when there is nothing for the model to word (no supported claim, or a
        multiple-choice pick with no claim to explain it)."""
        if not synthesis.claims and not (synthesis.options and synthesis.letter is None):
            return None
        options = ()
        if synthesis.options:
            options = tuple(f"{letter}. {text}" for letter, text in zip(LETTERS, synthesis.options))
        return self.backend.format_chat(
            prompts.synthesizer_messages(synthesis.question, synthesis.facts, synthesis.warnings, options=options,
                                         gaps=synthesis.gaps,
                                         structured=wording_form(self.config, self.backend, synthesis)))

    def constraint(self, synthesis: Synthesis) -> OutputConstraint | None:
        """The writer's output constraint (cited sentences, the option letter), where the engine can hold it."""
        return wording_constraint(self.config, self.backend, synthesis)

    def merge_prompt(self, question: str, chains: Sequence[ChainResult]) -> str:
        """Without the synthesizer: one prompt over the chains' answers (the reference code's way)."""
        return self.backend.format_chat(prompts.merge_messages(question, [(c.sub_question, c.answer) for c in chains]))

    def abstention(self, synthesis: Synthesis) -> str:
        """What the graph held and why no claim survived, and no guess."""
        return f"{self.held_statement(synthesis)} So I will not guess. Please ask a doctor."

    def no_claim_text(self, synthesis: Synthesis) -> str:
        """The answer when no claim survived and the model's own answer is shown apart (``no_support="flag"``)."""
        return (f"No claim of the knowledge graph supports an answer to this question. {self.held_statement(synthesis)}"
                " The model's own answer is shown apart, labelled as not supported by the knowledge graph.")

    def held_statement(self, synthesis: Synthesis) -> str:
        """What the graph held for the question (its entities, the facts the chains saw about them) and why no
        claim survived (what the chains' answers named, and why each was dropped)."""
        labels = [e.label for e in synthesis.question_entities]
        if not labels:
            parts = ["Nothing in the question links to the knowledge graph."]
        else:
            parts = [f"The knowledge graph links the question to {', '.join(labels)}."]
            if synthesis.held:
                parts.append("Among the facts the reasoning saw: " + "; ".join(p.text for p in synthesis.held) + ".")
            else:
                parts.append("The reasoning saw no fact about them.")
        dropped = [f"{c.entity.label} ({c.reason})" for c in synthesis.dropped[:4]]
        if dropped:
            parts.append("No claim survived: the chains' answers named " + "; ".join(dropped) + ".")
        else:
            parts.append("No claim survived: the chains' answers named nothing the knowledge graph holds.")
        return " ".join(parts)

    def finish(self, synthesis: Synthesis, completion: Completion | str | None) -> tuple[str, tuple[str, ...]]:
        """The answer text and its flags. Text no claim supports is never given as the graph's answer: a free-text
        answer no claim supports says what the graph held and shows the chains' own answer apart (its harmful
        sentences and doses withheld), or abstains; a worded answer that is unsafe, drops the claims the question
        asked for or asserts what no claim supports is replaced by the cited claims, verbalised; the writer's other
        sentences that rest on no claim are shown apart. A multiple-choice answer opens with its letter. A safety
        question's answer leads with what the graph says of the drug and the patient's conditions."""
        flags = list(synthesis.flags)
        raw = completion if isinstance(completion, str) or completion is None else completion.text
        if raw and raw.strip().startswith("{"):  # a structured reply as cited sentences, then the advice its
            # grammar leaves no room for (the synthesizer's own sentence, as in the cited claims' verbalisation)
            raw = render(raw, len(synthesis.facts))
            raw = f"{raw} {SEE_A_DOCTOR}" if raw and not synthesis.options else raw
        text = _tidy(raw or "")
        if isinstance(completion, Completion) and completion.finish_reason == "length":
            text = whole_sentences(text)
        if synthesis.options:
            return self._finish_choice(synthesis, text, flags)
        if not synthesis.claims:
            if synthesis.abstained:
                return self._lead(synthesis, self.abstention(synthesis)), tuple(flags)
            own, withheld = self._withhold(synthesis, normalise_units(synthesis.model_answer))
            flags += withheld
            flags.append(Flag(f"the answer is the model's own, {NOT_SUPPORTED}", "unsupported_text", detail=own))
            return self._lead(synthesis, self.no_claim_text(synthesis)), tuple(flags)
        text, problems, notes = self.check_wording(synthesis, text)
        if problems:
            text = self.fallback_text(synthesis)
            flags += self._said_of_shown(synthesis, problems, text)
        else:
            flags += notes
            text, moved = self._keep_supported(synthesis, text)
            if moved:
                flags.append(Flag(f"{len(moved)} sentence(s) of the model's wording rest on no claim or assert more "
                                  "than the claims they cite; they are shown apart, labelled as not supported by the "
                                  "knowledge graph", "unsupported_text", detail=" ".join(moved)))
            left = self._left_out(synthesis, text)
            if left:  # what is left of the wording once those sentences went no longer answers the question
                text = self.fallback_text(synthesis)
                flags += self._said_of_shown(synthesis, [Flag(
                    f"the model's supported sentences leave out {', '.join(left)}", "missing_claim",
                    detail="\t".join(left))], text, "the model's supported sentences")
        return self._lead(synthesis, text), tuple(flags)

    def _left_out(self, synthesis: Synthesis, text: str, named: set[str] | None = None) -> list[str]:
        """The labels of what the question asked for (the diagnosis, the first claim of each asked-for kind) that
        ``text`` does not name (``named``: the entities it names, when already linked)."""
        named = {e.iri for e, _, _ in self._mentions(text)} if named is None else named
        required = [d for d in synthesis.diagnoses if d.iri not in {e.iri for e in synthesis.question_entities}]
        for intent in synthesis.intents:
            if intent in INTENT_ANSWERS:
                kind = INTENT_ANSWERS[intent][0]
                required += [c.entity for c in synthesis.claims if c.kind == kind][:1]
        return [e.label for e in dict.fromkeys(required)
                if e.iri not in named and e.label.casefold() not in text.casefold()]

    def _said_of_shown(self, synthesis: Synthesis, flags: Sequence[str], shown: str,
                       wording: str = "the model's wording") -> list[str]:
        """``flags`` with each left-out flag said of ``shown``, the text the reader gets: what it still leaves
        out, or that the model's ``wording`` left it out and the cited claims, which name it, replaced it."""
        out: list[str] = []
        for flag in flags:
            if not isinstance(flag, Flag) or flag.code != "missing_claim" or not flag.detail:
                out.append(flag)
                continue
            labels = flag.detail.split("\t")
            still = [label for label in self._left_out(synthesis, shown) if label in labels]
            if still:
                out.append(Flag(f"the answer leaves out {', '.join(still)}", "missing_claim", detail=flag.detail))
            else:
                out.append(Flag(f"{wording} left out {', '.join(labels)}, so the answer gives the cited claims "
                                "instead, which name it", "missing_claim", detail=flag.detail))
        return out

    def _lead(self, synthesis: Synthesis, text: str) -> str:
        """``text`` led by the safety answer, unless it already opens with it."""
        if not synthesis.safety:
            return text
        lead = " ".join(synthesis.safety)
        return text if text.startswith(lead) else f"{lead}\n\n{text}"

    def _withhold(self, synthesis: Synthesis, text: str) -> tuple[str, list[Flag]]:
        """The model's own text with each harmful or dose sentence replaced by a note of what was withheld."""
        found = self._mentions(text)
        out, flags, at = [], [], 0
        for sentence in _sentences(text):
            start = text.find(sentence, at)
            at = start + len(sentence)
            spans = [(e, s, t) for e, s, t in found if start <= s < at]
            bad = [f for f in self.sentence_problems(synthesis, sentence, spans, set(), entities=False)
                   if f.code in ("harmful_instruction", "unsupported_dose")]
            if bad:
                out.append(f"[withheld: {bad[0].code.replace('_', ' ')}]")
                flags += [Flag(f"the model's own answer: {f}; the sentence is withheld", f.code) for f in bad]
            else:
                out.append(sentence.strip())
        return " ".join(out), flags

    def _keep_supported(self, synthesis: Synthesis, text: str) -> tuple[str, list[str]]:
        """``text`` without the sentences that name no claim (advice and the synthesizer's own sentences stay),
        and those sentences; the cited claims, verbalised, when nothing that states a fact is left."""
        _, checks = self.review(synthesis, text, ())
        moved = [c.text for c in checks if not c.supported]
        if not moved:
            return text, []
        kept = [c for c in checks if c.supported]
        if not [c for c in kept if c.claims]:
            return self.fallback_text(synthesis), moved
        keep = {c.text for c in kept}
        paragraphs = []
        for paragraph in text.split("\n\n"):
            sentences = [x.strip() for x in _sentences(paragraph) if x.strip() in keep]
            if sentences:
                paragraphs.append(" ".join(sentences))
        return "\n\n".join(paragraphs), moved

    def _finish_choice(self, synthesis: Synthesis, text: str, flags: list[str]) -> tuple[str, tuple[str, ...]]:
        options = synthesis.options
        letter = synthesis.letter
        if letter is None:
            letter = extract_letter(text, options)
            if letter is not None:
                flags.append(f"no chain picked an option; {letter} is the writer's own pick, {NOT_SUPPORTED}")
        if letter is None:
            letter = _closest_option(options, " ".join((text, synthesis.model_answer)))
            flags.append(f"the model named no option; {letter} is the option closest to what it wrote, "
                         f"{NOT_SUPPORTED}")
        explanation = ""
        if synthesis.claims:
            checked, problems, notes = self.check_wording(synthesis, _drop_letter_line(text))
            explanation = self.fallback_text(synthesis) if problems else checked
            flags += self._said_of_shown(synthesis, problems, explanation) if problems else notes
        head = f"Answer: {letter}. {options[LETTERS.index(letter)]}"
        return (f"{head}\n\n{explanation}" if explanation else head), tuple(flags)

    def check_wording(self, synthesis: Synthesis, text: str) -> tuple[str, list[str], list[str]]:
        """``text`` (units normalised, unstated warnings appended), what is wrong with it (no text; an entity no
        claim supports; a recommendation that names no supported drug or procedure, "drink bleach, it treats
        asthma"; a diagnosis or an asked-for claim left out: the caller falls back on the claims) and notes (a
        contraindicated drug named without its warning: the warning is appended)."""
        if not text:
            return "", [Flag("the model wrote no usable answer; the claims are listed as they are",
                             "empty_wording")], []
        text = normalise_units(text)
        problems: list[str] = []
        notes: list[str] = []
        allowed = {e.iri for e in synthesis.question_entities}
        for claim in synthesis.claims:
            allowed.add(claim.entity.iri)
            allowed.update(n.iri for p in claim.citations for n in p.nodes)
        warnings = {c.entity.iri: c for c in synthesis.claims if c.kind == "warning"}
        treatments = {c.entity.iri for c in synthesis.claims if c.kind in ("drug", "procedure")}
        found = self._mentions(text)
        named = {e.iri for e, _, _ in found}
        unstated: list[str] = []
        for entity, _, _ in found:
            warning = warnings.pop(entity.iri, None)
            if warning is not None:
                # The writer named a drug the graph contraindicates here (small models even recommend it): the
                # warning must be in the text the user reads, not only in the claims.
                if warning.text.lower() not in text.lower():
                    unstated.append(warning.text)
                    notes.append(Flag(f"the answer mentions {entity.label}, which the knowledge graph "
                                      f"contraindicates ({warning.text})", "contraindicated"))
            elif entity.iri not in allowed:
                problems.append(Flag(f"the model's wording mentions {entity.label}, which no surviving claim "
                                     "supports", "unsupported_entity"))
                allowed.add(entity.iri)
        at = 0
        for sentence in _sentences(text):
            start = text.find(sentence, at)
            at = start + len(sentence)
            inside = [(ent, s, e) for ent, s, e in found if start <= s < at]
            # harmful substances and actions, drugs the graph contraindicates here, doses: whatever else it names
            problems += self.sentence_problems(synthesis, sentence, inside, allowed, entities=False)
            if RECOMMENDS.search(sentence) and not _NEGATED.search(sentence):
                if not any(ent.iri in treatments for ent, _, _ in inside):
                    problems.append(Flag(f"the model's wording recommends what no claim supports: "
                                         f"{sentence.strip()!r}", "unsupported_recommendation"))
        missing = self._left_out(synthesis, text, named)
        if missing:
            problems.append(Flag(f"the model's wording leaves out {', '.join(missing)}", "missing_claim",
                                 detail="\t".join(missing)))
        if unstated:
            text += "\n\n" + " ".join(f"Warning: {w}." for w in unstated)
        return text, problems, notes

    def fallback_text(self, synthesis: Synthesis) -> str:
        """The cited claims verbalised plainly: what it may be, the facts (numbered), gaps and warnings."""
        parts = []
        diagnoses = [d.label for d in synthesis.diagnoses
                     if d.iri not in {e.iri for e in synthesis.question_entities}]
        if diagnoses:
            parts.append(f"The knowledge graph points to {' or '.join(diagnoses)}.")
        facts = [c.text for c in synthesis.claims if c.kind != "warning"]
        if facts:
            # numbered as the writer's prompt numbers them (warnings included), so [n] names one claim everywhere
            number = {fact: i for i, fact in enumerate(synthesis.facts, start=1)}
            numbered = " ".join(f"{fact} [{number[fact]}]." for fact in dict.fromkeys(facts))
            parts.append(f"From the knowledge graph: {numbered}")
        parts += list(synthesis.gaps)
        parts += [f"Warning: {w}." for w in synthesis.warnings]
        parts.append(SEE_A_DOCTOR)
        return " ".join(parts)

    def review(self, synthesis: Synthesis, text: str, flags: Sequence[str], abstained: bool = False
               ) -> tuple[Support, tuple[SentenceCheck, ...]]:
        """The verdict on the finished ``text`` and one check per sentence: the claims it rests on (``[n]`` markers,
        the claims' entities it names, the facts it repeats) and whether the graph supports it. Sentences the
        synthesizer wrote itself (the cited facts, gaps, warnings, the abstention) rest on the graph by
        construction; advice to see a doctor states no fact; anything else needs a claim and no problem."""
        claims = list(synthesis.claims)
        facts = synthesis.facts
        ours = {s.strip() for part in self._own_texts(synthesis) for s in _sentences(part)}
        found = self._mentions(text)
        allowed = self._allowed(synthesis)
        checks: list[SentenceCheck] = []
        start = 0
        for sentence in _sentences(text):
            at = text.find(sentence, start)
            start = at + len(sentence)
            named: set[int] = set()
            for n in re.findall(r"\[(\d+)\]", sentence):
                if 1 <= int(n) <= len(facts):
                    named.update(i for i, c in enumerate(claims) if c.text == facts[int(n) - 1])
            spans = [(e, s, t) for e, s, t in found if at <= s < start]
            iris = {e.iri for e, _, _ in spans}
            folded = sentence.casefold()
            for i, c in enumerate(claims):
                if c.entity.iri in iris or c.text.casefold() in folded or _names(folded, c.entity.label):
                    named.add(i)
            clean = sentence.strip()
            if clean in ours:
                checks.append(SentenceCheck(clean, tuple(sorted(named)), True,
                                            "written by the synthesizer from the knowledge graph"))
                continue
            problems = [str(f) for f in self.sentence_problems(synthesis, sentence, spans, allowed)]
            if problems:
                checks.append(SentenceCheck(clean, tuple(sorted(named)), False, "; ".join(problems)))
            elif re.search(r"\?(?:[\"')\]]|\s*\[\d+\])*$", clean):
                checks.append(SentenceCheck(clean, tuple(sorted(named)), False, "a question asserts nothing"))
            elif _ADVICE.search(sentence) and not named:
                checks.append(SentenceCheck(clean, (), True, "advice; states no medical fact"))
            elif named:
                gap = self._assertion_gap(synthesis, text, sentence, at, named)
                checks.append(SentenceCheck(clean, tuple(sorted(named)), gap is None,
                                            gap or "states what the claims it cites state"))
            else:
                checks.append(SentenceCheck(clean, (), False, "no claim of the knowledge graph supports it"))
        return self._verdict(synthesis, checks, flags, abstained), tuple(checks)

    def _assertion_gap(self, synthesis: Synthesis, text: str, sentence: str, at: int, named: set[int]) -> str | None:
        """Why ``sentence`` (at ``at`` in ``text``) asserts more than its cited claims state, or None
        (``sentence_check``): the claims of its ``[n]`` markers, else the claims it names (``named``)."""
        numbers = sentence_check.markers(sentence)
        facts = synthesis.facts
        bad = [n for n in numbers if not 1 <= n <= len(facts)]
        cited_facts = {facts[n - 1] for n in numbers if 1 <= n <= len(facts)}
        if numbers:
            cited = [c for c in synthesis.claims if c.text in cited_facts]
        else:
            cited = [c for i, c in enumerate(synthesis.claims) if i in named]
        end = at + len(sentence)
        mentions = [(e, s - at, t - at, method) for e, s, t, method in self._linked(text) if at <= s < end]
        return sentence_check.assertion_gap(sentence, mentions, cited, synthesis.question_entities,
                                            by_marker=bool(numbers), bad_markers=bad)

    def _verdict(self, synthesis: Synthesis, checks: Sequence[SentenceCheck], flags: Sequence[str],
                 abstained: bool) -> Support:
        codes = {flag_json(f)["code"] for f in flags}
        if abstained:
            return Support("unsupported", "no claim of the knowledge graph survived; the answer abstains")
        if not synthesis.claims and not (synthesis.options and synthesis.letter is not None):
            return Support("unsupported", "no claim of the knowledge graph supports an answer; what the model "
                                          "wrote is shown apart, under its own label")
        if synthesis.options and (synthesis.letter is None or "model_pick" in codes
                                  or any("own pick" in f or "closest" in f for f in flags)):
            return Support("unsupported", "the knowledge graph does not back the option picked")
        replaced = [c for c in ("harmful_instruction", "unsupported_dose", "unsupported_entity",
                                "unsupported_recommendation", "missing_claim", "empty_wording") if c in codes]
        if replaced:
            return Support("partial", "the model's wording was replaced by the cited claims ("
                           + ", ".join(c.replace("_", " ") for c in replaced) + ")")
        if "unsupported_text" in codes:
            return Support("partial", "the answer shows the cited claims; the model's sentences no claim supports "
                                      "are shown apart, under their own label")
        if "check_unavailable" in codes:
            return Support("partial", "a check could not run; the answer is not fully checked")
        factual = [c for c in checks if c.reason != "advice; states no medical fact"]
        unsupported = [c for c in factual if not c.supported]
        if unsupported and len(unsupported) == len(factual):
            return Support("unsupported", "no sentence of the answer rests on a claim of the knowledge graph")
        if unsupported:
            return Support("partial", f"{len(unsupported)} of {len(factual)} sentences rest on no claim")
        return Support("grounded", "every sentence rests on claims the knowledge graph supports, cited")

    def _own_texts(self, synthesis: Synthesis) -> list[str]:
        """What the synthesizer writes itself from the graph (never the model's words)."""
        return [self.fallback_text(synthesis), self.abstention(synthesis), self.no_claim_text(synthesis),
                *synthesis.safety, *synthesis.gaps,
                *(f"Warning: {w}." for w in synthesis.warnings), *(c.text + "." for c in synthesis.claims)]

    def _allowed(self, synthesis: Synthesis) -> set[str]:
        """The entities a worded answer may name: the question's, the claims' and those on their cited paths."""
        allowed = {e.iri for e in synthesis.question_entities}
        for claim in synthesis.claims:
            allowed.add(claim.entity.iri)
            allowed.update(n.iri for p in claim.citations for n in p.nodes)
        return allowed

    def sentence_problems(self, synthesis: Synthesis, sentence: str, spans: Sequence[tuple[Entity, int, int]],
                          allowed: set[str], *, entities: bool = True) -> list[Flag]:
        """What makes one sentence unsafe or unsupported, whatever else it names: a harmful substance or action
        (``ontologies/harmful.tsv``), a drug the graph contraindicates in the question's conditions named as if it
        were safe, a dose no claim states, and (``entities``) an entity no surviving claim supports. A check that
        cannot run is a problem too: the sentence is not shown as checked."""
        problems: list[Flag] = []
        for words, term in harmful_in(sentence):
            problems.append(Flag(f"it tells the reader to use or do something harmful ({words!r}: {term.why})",
                                 "harmful_instruction"))
        if not _WARNS.search(sentence):
            try:
                for drug, where in self._contraindicated_named(synthesis, spans):
                    problems.append(Flag(f"it names {drug.label} as if it were safe, but the knowledge graph "
                                         f"contraindicates it in {where}", "harmful_instruction"))
            except MirageError as exc:
                problems.append(Flag(f"the contraindication check could not run on this sentence ({exc})",
                                     "check_unavailable"))
        stated = self._stated_doses(synthesis)
        for dose in DOSE.finditer(normalise_units(sentence)):
            if _dose_key(dose.group(0)) not in stated:
                problems.append(Flag(f"it states a dose ({dose.group(0).strip()}) that no claim states",
                                     "unsupported_dose"))
        if entities:
            for entity, _, _ in spans:
                if entity.iri not in allowed:
                    problems.append(Flag(f"it names {entity.label}, which no surviving claim supports",
                                         "unsupported_entity"))
        return problems

    def _conditions(self, synthesis: Synthesis) -> dict[str, Entity]:
        """The patient's conditions: the question's entities, the diagnosis, the claims of a condition kind."""
        conditions = {e.iri: e for e in synthesis.question_entities}
        conditions.update({e.iri: e for e in synthesis.diagnoses})
        conditions.update({c.entity.iri: c.entity for c in synthesis.claims if c.kind in _CONDITION_KINDS})
        return conditions

    def _contraindicated_named(self, synthesis: Synthesis, spans: Sequence[tuple[Entity, int, int]]
                               ) -> list[tuple[Entity, str]]:
        """The drugs among ``spans`` that the KG contraindicates in one of the patient's conditions, with where.
        MirageError when the KG cannot answer."""
        if not spans:
            return []
        conditions = self._conditions(synthesis)
        warned = {c.entity.iri: c for c in synthesis.claims if c.kind == "warning"}
        vocab, problem = self.vocabulary()
        if problem is not None:
            raise MirageError(problem)
        out = []
        for entity, _, _ in spans:
            if entity.iri in conditions and entity.iri not in warned:
                continue
            against = [p for p in self._contraindications(vocab, entity) if _far_end(p, entity).iri in conditions]
            if entity.iri in warned and not against:
                against = list(warned[entity.iri].citations)
            if against:
                out.append((entity, ", ".join(dict.fromkeys(_far_end(p, entity).label for p in against))))
        return out

    @staticmethod
    def _stated_doses(synthesis: Synthesis) -> set[str]:
        """Every dose a claim or one of its cited paths states, as :func:`_dose_key` reads it."""
        texts = [c.text for c in synthesis.claims] + [p.text for c in synthesis.claims for p in c.citations]
        return {_dose_key(m.group(0)) for t in texts for m in DOSE.finditer(normalise_units(t))}

    def synthesize(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                   *, seed: int | None = None) -> tuple[Synthesis, str, tuple[str, ...], Completion | None]:
        """One question end to end (the coordinator batches the wording step of many)."""
        synthesis = self.answer_safety(self.analyse(question, question_entities, chains))
        prompt = self.prompt(synthesis)
        completion = None
        if prompt is not None:
            completion = self.backend.generate([prompt], (), self.config.synthesizer_params(seed),
                                               constraint=self.constraint(synthesis))[0]
        text, flags = self.finish(synthesis, completion)
        return synthesis, text, flags, completion


SEE_A_DOCTOR = "Please see a doctor about your situation."
_SENTENCE_END = re.compile(r"[.!?](?:[\"')\]]|\s*\[\d+\])*(?=\s|$)")
#: a word that recommends doing something (the synthesizer's and the wording check's rule)
RECOMMENDS = re.compile(r"\b(?:take|taking|drink|use|using|try|prescribe[sd]?|recommend\w*|treat(?:s|ed|ing)?|"
                         r"cure[sd]?|helps? (?:with|against)|relieve[sd]?|dose)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|no|avoid|don't|do not|contraindicated)\b|see a doctor|ask a doctor|"
                      r"talk to|consult", re.IGNORECASE)


_ADVICE = re.compile(r"\b(?:see|ask|call|consult|talk to|contact) (?:a|your) (?:doctor|physician|pharmacist|clinician|"
                     r"nurse|GP)\b|\bnot medical advice\b|\bseek (?:urgent )?(?:medical )?(?:care|help|attention)\b",
                     re.IGNORECASE)


# "can I take / give X?", "is X safe with Y?", "should my child use X?"
_SAFETY_QUESTION = re.compile(r"\b(?:can|could|may|should|shall)\b[^?.]{0,40}?\b(?:take|taking|give|giving|use|using|"
                              r"have|drink|mix)\b|\b(?:is|are)\b[^?.]{0,60}\bsafe\b|\bsafe (?:to|for|with|in|during)\b|"
                              r"\b(?:ok|okay|alright|fine) to (?:take|give|use|mix)\b", re.IGNORECASE)

# a sentence that warns against what it names ("Aspirin is contraindicated in influenza", "do not give aspirin")
_WARNS = re.compile(r"contraindicat\w*|\bavoid\w*|\b(?:do not|don't|never|should not|shouldn't|must not|mustn't|"
                    r"cannot|can't) (?:be )?(?:take|taking|taken|give|giving|given|use|using|used)\b|\bnot safe\b|"
                    r"\bunsafe\b|\bdangerous\b|\brisk of\b|\bwarning\b", re.IGNORECASE)


def _dose_key(dose: str) -> str:
    return re.sub(r"\s+", " ", dose.strip().casefold())


def _names(folded: str, label: str) -> bool:
    """Whether the casefolded sentence names ``label`` as a whole word or phrase."""
    return bool(label) and re.search(rf"(?<!\w){re.escape(label.casefold())}(?!\w)", folded) is not None


def whole_sentences(text: str) -> str:
    """``text`` cut after its last complete sentence (a model that ran out of tokens stops mid-sentence)."""
    ends = list(_SENTENCE_END.finditer(text))
    return text[: ends[-1].end()].rstrip() if ends else text


def _sentences(text: str) -> list[str]:
    out, last = [], 0
    for match in _SENTENCE_END.finditer(text):
        out.append(text[last:match.end()])
        last = match.end()
    if text[last:].strip():
        out.append(text[last:])
    return [s for s in out if s.strip()]


def _tidy(text: str) -> str:
    text = strip_think(text)
    if "<think>" in text:  # it never finished thinking: no answer in it
        return ""
    text = re.sub(r"<\|KG_[A-Z_]+\|>", " ", text)
    return text.strip()


def _drop_letter_line(text: str) -> str:
    """The writer's explanation without its "Answer: X" line (the letter is stated once, by the synthesizer)."""
    return re.sub(r"(?im)^\s*(?:final\s+)?answer\s*[:：]\s*[\(\[]?[A-J]\b[^\n]*\n?", "", text).strip()


def _closest_option(options: Sequence[str], text: str) -> str:
    """The option sharing the most words with ``text`` (the first on a tie), for a model that named none."""
    words = set(re.findall(r"\w+", text.casefold()))

    def overlap(option: str) -> int:
        own = set(re.findall(r"\w+", option.casefold()))
        chars = sum(1 for ch in set(option) if not ch.isspace() and ch in text)  # scripts without spaces
        return len(own & words) * 10 + chars

    scores = [overlap(o) for o in options]
    return LETTERS[scores.index(max(scores))]


def _model_answer(chains: Sequence[ChainResult], normalised: Sequence[str]) -> str:
    """The chains' own answer: each sub-question's first answer (normalised), once."""
    seen: dict[str, str] = {}
    for chain, text in zip(chains, normalised):
        if text.strip() and chain.sub_question not in seen:
            seen[chain.sub_question] = text.strip()
    return "\n\n".join(dict.fromkeys(seen.values()))


def _tying_paths(iri: str, own: Sequence[Path], evidence: Sequence[Path], anchors: set[str]) -> list[Path]:
    """The paths that tie ``iri`` to an anchor (a question entity or a diagnosis): a path the chain saw that holds
    both, else two one-step facts it saw joined at a shared entity (anchor - x - iri), itself a path of the KG."""
    direct = [p for p in own if (_node_iris(p) - {iri}) & anchors]
    if direct:
        return direct
    joined = []
    for near in own:
        if len(near.steps) != 1:
            continue
        middle = _far_end(near, Entity(iri, ""))
        if middle.iri in anchors or middle.iri == iri:
            continue
        for far in evidence:
            if len(far.steps) != 1 or far is near:
                continue
            ends = {far.steps[0].subject.iri, far.steps[0].object.iri}
            if middle.iri in ends and (ends - {middle.iri}) & anchors and iri not in ends:
                anchor = _far_end(far, middle)
                joined.append(Path((_walked(far.steps[0], anchor.iri), _walked(near.steps[0], middle.iri))))
    return joined[:3]


def _walked(step: Step, start: str) -> Step:
    """``step`` walked from the entity ``start``."""
    return replace(step, direction="forward" if step.subject.iri == start else "backward")


def _far_end(path: Path, entity: Entity) -> Entity:
    step = path.steps[0]
    return step.object if step.subject.iri == entity.iri else step.subject


def _node_iris(path: Path) -> set[str]:
    return {n.iri for n in path.nodes}


def _held_facts(paths: Sequence[Path], q_iris: set[str], limit: int = 3) -> tuple[Path, ...]:
    """What the graph held for the question, for an answer no claim supports: the facts the chains saw about the
    question's entities, those through the entity tied to most of them first (Marfan syndrome for arachnodactyly
    and lens dislocation), then shorter, then alphabetical; once each."""
    touching = list({_path_text_key(p): p for p in paths if _node_iris(p) & q_iris}.values())
    cover: dict[str, set[str]] = {}
    for path in touching:
        for node in _node_iris(path) - q_iris:
            cover.setdefault(node, set()).update(_node_iris(path) & q_iris)

    def strength(path: Path) -> tuple[int, int, str]:
        best = max((len(cover[n]) for n in _node_iris(path) - q_iris), default=0)
        return -best, len(path.steps), path.text

    return tuple(sorted(touching, key=strength)[:limit])


def _path_text_key(path: Path) -> tuple[tuple[str, str, str], ...]:
    return tuple((s.subject.iri, s.relation.iri, s.object.iri) for s in path.steps)


def _rank_paths(paths: Sequence[Path], q_iris: set[str]) -> list[Path]:
    """Paths that touch the question first, then shorter ones, then alphabetical (deterministic)."""
    return sorted(paths, key=lambda p: (not (_node_iris(p) & q_iris), len(p.steps), p.text))


def _top(claims: list[Claim], limit: int) -> list[Claim]:
    """The strongest ``limit`` claims, warnings always kept."""
    warnings = [c for c in claims if c.kind == "warning"]
    rest = [c for c in claims if c.kind != "warning"]
    return rest[: max(0, limit - len(warnings))] + warnings


def _with(claim: Claim, status: Status, reason: str, citations: Sequence[Path] | None = None) -> Claim:
    cites = tuple(citations) if citations is not None else claim.citations
    text = cites[0].text if cites else claim.entity.label
    return replace(claim, text=text, citations=cites[:3], status=status, reason=reason)


def _neg(label: str) -> tuple[int, ...]:
    """Sort key that makes alphabetically earlier labels win ties under ``max``."""
    return tuple(-ord(ch) for ch in label.casefold())
