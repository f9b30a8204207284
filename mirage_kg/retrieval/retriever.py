"""The LLM-free retriever: link a question, lead with the differential's best candidates and the facts that tie
them to the findings, rank the hubs the question's entities point to, expand the best, and bridge the entities;
returns verbalised evidence within an entity budget. It is the evaluation's baseline and the seed evidence every
reasoning chain starts from. It uses graph structure and the ontology's clinical roles, no relation names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage_kg.graph.core import Graph
from mirage_kg.graph.facts import Neighbour
from mirage_kg.graph.limits import HUB_EDGES_PER_RELATION
from mirage_kg.linking.linker import Linker, Mention
from mirage_kg.model.records import Direction, Entity, Evidence, Path, Step

if TYPE_CHECKING:
    from mirage_kg.retrieval.differential import Differential

_Hop = tuple[str, str, str, Direction]  # one step: (subject, relation, object, direction)


@dataclass(frozen=True)
class RetrievalResult:
    """What ``retrieve`` found for a question: its mentions, the linked entities and the evidence."""

    question: str
    mentions: tuple[Mention, ...]
    entities: tuple[Entity, ...]
    evidence: tuple[Evidence, ...]
    mention_of: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # entity IRI -> mention
    #: the conditions that explain the question's findings (``mirage_kg.retrieval.differential``), whose facts lead the evidence
    differential: Differential | None = field(default=None, compare=False, repr=False)

    def evidence_entities(self) -> set[str]:
        """Ids (CURIEs) of every entity the evidence names."""
        return {node.id for ev in self.evidence for node in ev.path.nodes}

    def to_text(self) -> str:
        """The evidence as verbalised facts, one per line, for a prompt."""
        return "\n".join(ev.text for ev in self.evidence)

    def to_json(self) -> dict[str, Any]:
        from mirage_kg.model.namespaces import compress

        return {
            "question": self.question,
            "entities": [{"id": e.id, "label": e.label, "mention": self.mention_of.get(e.iri)} for e in self.entities],
            "differential": [c.to_json() for c in self.differential.candidates] if self.differential else [],
            "evidence": [{"text": ev.text, "nodes": [n.id for n in ev.path.nodes],
                          "steps": [s.to_json() for s in ev.path.steps],
                          "source": compress(ev.sources[0]) if ev.sources else None} for ev in self.evidence],
        }


class Retriever:
    """``retrieve(question, budget)`` over a ``Graph`` and a ``Linker``: graph structure only, no relation names.
    Without a ``linker`` it uses the graph's own (a ``KnowledgeGraph`` has one), else builds one on the graph.

    1. **Link** the question; each mention's candidates scoring at least ``min_score`` (up to ``per_mention``)
       become question entities, weighted by score and rank.
    2. **Hubs**: every neighbour of a question entity, and each question entity itself (counted ``self_weight``
       times), scores the summed weights of the question entities it touches, times the square root of its degree
       (a well-connected hub explains more); the best ``max_hubs`` are kept, ranked.
    3. **Spread**: each hub's neighbours score ``1 / (rank + 1)`` of the hub divided by ``|neighbours| ** alpha``,
       summed over hubs, times ``degree ** beta`` (a prior for well-attested entities).
    4. **Evidence**: first the facts tying the ``lead`` best candidates of the differential diagnosis to the
       findings they explain (so a reader, or a model, sees the differential), then the facts tying hubs to question
       entities, short bridges between the best question entities, then hub facts to the best-scored entities,
       until ``budget`` entities are in. One fact per connected pair (a store may state a fact both ways)."""

    def __init__(self, kg: Graph, linker: Linker | None = None, *, min_score: float = 0.7, per_mention: int = 3, max_hubs: int = 10,
                 self_weight: float = 2.0, alpha: float = 0.5, beta: float = 0.5, bridge_hops: int = 2,
                 bridge_pairs: int = 3, bridge_paths: int = 2, lead: int = 3) -> None:
        self.kg = kg
        self._linker = linker
        self.min_score = min_score
        self.per_mention = per_mention
        self.max_hubs = max_hubs
        self.self_weight = self_weight
        self.alpha = alpha
        self.beta = beta
        self.bridge_hops = bridge_hops
        self.bridge_pairs = bridge_pairs
        self.bridge_paths = bridge_paths
        self.lead = lead

    # --- linking -------------------------------------------------------------------------------------------------
    @property
    def linker(self) -> Linker:
        """The linker given, else the graph's current one (rebuilt by it after a load), else one built here."""
        if self._linker is not None:
            return self._linker
        own = getattr(self.kg, "linker", None)
        if own is not None:
            return own
        self._linker = Linker(self.kg)
        return self._linker

    def question_entities(
            self, mentions: Sequence[Mention]) -> tuple[dict[str, float], dict[str, Entity], dict[str, str]]:
        """IRI -> weight (link score over candidate rank), IRI -> Entity, IRI -> the mention's text."""
        weights: dict[str, float] = {}
        entities: dict[str, Entity] = {}
        mention_of: dict[str, str] = {}
        for mention in mentions:
            good = [c for c in mention.candidates if c.score >= self.min_score][: self.per_mention]
            for rank, cand in enumerate(good):
                w = cand.score / (1 + rank)
                iri = cand.entity.iri
                if w > weights.get(iri, 0.0):
                    weights[iri] = w
                    entities[iri] = cand.entity
                    mention_of[iri] = mention.text
        return weights, entities, mention_of

    # --- the whole thing -----------------------------------------------------------------------------------------
    def retrieve(self, question: str, budget: int = 100) -> RetrievalResult:
        mentions = tuple(self.linker.link(question, top=5))
        weights, entities, mention_of = self.question_entities(mentions)
        diagnosis = self.differential(question, mentions)
        return self.retrieve_linked(question, mentions, weights, entities, mention_of, budget, diagnosis)

    def differential(self, question: str, mentions: Sequence[Mention]) -> Differential | None:
        """The differential diagnosis of the linked question (None when ``lead`` is 0)."""
        if self.lead < 1:
            return None
        from mirage_kg.retrieval.differential import differential

        return differential(self.kg, question, mentions=mentions, top=max(self.lead, 5),
                            min_score=self.min_score)

    def retrieve_linked(self, question: str, mentions: tuple[Mention, ...], weights: dict[str, float],
                        entities: dict[str, Entity], mention_of: dict[str, str], budget: int,
                        diagnosis: Differential | None = None) -> RetrievalResult:
        """The steps after linking, for entities linked by other means (weights: IRI -> link weight); the evidence
        leads with the supporting facts of ``diagnosis``'s best ``lead`` candidates."""
        ranked_q = sorted(weights, key=lambda i: (-weights[i], i))
        linked = tuple(entities[i] for i in ranked_q)
        if budget < 1 or not weights:
            return RetrievalResult(question, mentions, linked, (), mention_of, diagnosis)
        lead = [path for c in (diagnosis.candidates[: self.lead] if diagnosis else ()) for path in c.paths]
        # a hub's edges up to a cap per relation (``HUB_DEGREE``): the expansion costs the same at any degree
        adjacency = {q: self.kg.neighbours(q, per_relation=HUB_EDGES_PER_RELATION) for q in ranked_q}
        hubs = self.rank_hubs(weights, adjacency)
        evidence = self._collect(ranked_q, adjacency, hubs, budget, lead)
        return RetrievalResult(question, mentions, linked, evidence, mention_of, diagnosis)

    def rank_hubs(self, weights: dict[str, float], adjacency: dict[str, list[Neighbour]]) -> list[str]:
        """The best ``max_hubs`` hubs, best first."""
        score: dict[str, float] = {}
        for q, edges in adjacency.items():
            if not edges:
                continue
            for n in {n for _, _, n in edges}:
                score[n] = score.get(n, 0.0) + weights[q]
            score[q] = score.get(q, 0.0) + self.self_weight * weights[q]
        if not score:
            return []
        degree = self.kg.degrees(score)
        final = {n: s * math.sqrt(degree[n]) for n, s in score.items()}
        return sorted(final, key=lambda n: (-round(final[n], 9), -degree[n], n))[: self.max_hubs]

    def _collect(self, ranked_q: list[str], adjacency: dict[str, list[Neighbour]], hubs: list[str],
                 budget: int, lead: Sequence[Path] = ()) -> tuple[Evidence, ...]:
        kg = self.kg
        facts: dict[frozenset[str], tuple[_Hop, float]] = {}  # pair -> (step, score)
        paths: list[tuple[tuple[_Hop, ...], float]] = []
        used: set[str] = set()

        def add_fact(a: str, p: str, d: str, n: str, score: float) -> bool:
            key = frozenset((a, n))
            if key in facts:
                return True
            new = {a, n} - used
            if len(used) + len(new) > budget:
                return False
            used.update(new)
            facts[key] = ((a, p, n, "forward") if d == "forward" else (n, p, a, "backward"), score)
            return True

        q_set = set(ranked_q)
        hub_rank = {h: 1.0 / (1 + i) for i, h in enumerate(hubs)}
        spread: dict[str, float] = {}
        via: dict[str, tuple[str, str, Direction]] = {}  # entity -> (best hub, predicate, direction)
        for hub in hubs:
            if hub not in adjacency:
                adjacency[hub] = kg.neighbours(hub, per_relation=HUB_EDGES_PER_RELATION)
            one_edge: dict[str, tuple[str, Direction]] = {}  # outgoing edges first, then by relation id
            for p, d, n in sorted(adjacency[hub], key=lambda e: (e[1] != "forward", e[0])):
                one_edge.setdefault(n, (p, d))
            share = hub_rank[hub] / max(len(one_edge), 1) ** self.alpha
            for n, (p, d) in one_edge.items():
                spread[n] = spread.get(n, 0.0) + share
                if n not in via or hub_rank[hub] > hub_rank[via[n][0]]:
                    via[n] = (hub, p, d)
        # 0. the differential: its best candidates' facts with the findings they explain
        for path in lead:
            for step in path.steps:
                add_fact(step.subject.iri, step.relation.iri, "forward", step.object.iri, 2.0)
        # 1. why each hub is there: its facts with the question entities
        for hub in hubs:
            for p, d, n in adjacency[hub]:
                if n in q_set:
                    add_fact(hub, p, d, n, hub_rank[hub])
        # 2. how the best question entities hang together
        pairs = [(a, b) for i, a in enumerate(ranked_q[:3]) for b in ranked_q[i + 1:3]][: self.bridge_pairs]
        for a, b in pairs:
            for path in kg.bridge(a, b, max_hops=self.bridge_hops, max_paths=self.bridge_paths):
                nodes = {n.iri for n in path.nodes}
                if len(used | nodes) <= budget:
                    used |= nodes
                    paths.append((tuple((s.subject.iri, s.relation.iri, s.object.iri, s.direction)
                                        for s in path.steps), 0.5))
        # 3. the hubs' neighbourhoods, best-scored entities first
        degree = kg.degrees(spread)
        final = {n: s * degree[n] ** self.beta for n, s in spread.items()}
        for n in sorted(final, key=lambda n: (-final[n], n)):
            if len(used) >= budget:
                break
            hub, p, d = via[n]
            if n != hub:
                add_fact(hub, p, d, n, final[n])
        return self._evidence(list(facts.values()), paths)

    def _evidence(self, facts: list[tuple[_Hop, float]],
                  paths: list[tuple[tuple[_Hop, ...], float]]) -> tuple[Evidence, ...]:
        kg = self.kg
        all_paths = [((step,), score) for step, score in facts] + paths
        iris = {x for path, _ in all_paths for s, _, o, _ in path for x in (s, o)}
        names = kg.labels(iris)
        relations = kg.relations({p for path, _ in all_paths for _, p, _, _ in path})
        sources = kg.sources({(s, p, o) for path, _ in all_paths for s, p, o, _ in path})
        out = []
        for path, score in all_paths:
            steps = tuple(Step(Entity(s, names[s]), relations[p], Entity(o, names[o]), d)
                          for s, p, o, d in path)
            graphs = sorted({g for s, p, o, _ in path for g in sources.get((s, p, o), ())})
            out.append(Evidence(Path(steps), tuple(graphs), score))
        return tuple(out)
