"""A differential diagnosis from the graph, no model: the conditions that explain a question's findings, ranked by
how much of the findings each explains, each finding weighted by how specific it is (its inverse document frequency
over the conditions: a finding half the conditions share says little) and, where the source gives one, by how often
it occurs in the condition (HPOA frequencies).

Which edges tie a condition to a finding comes from the ontology's clinical roles (``has_finding`` / ``finding_of``
in ``ontologies/``: EMCKG's has_symptom, HPO's has_phenotype, SNOMED CT's definitional manifestation, ...), never
from relation names; a condition the question names explains itself."""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage_kg.errors import InputError
from mirage_kg.model.records import Direction, Entity, Path, Step
from mirage_kg.model.namespaces import RDFS_SUBCLASS
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.graph.core import Graph
    from mirage_kg.linking.linker import Mention

__all__ = ["Candidate", "Differential", "Finding", "condition_count", "differential", "finding_relations"]

FINDING_ROLES = ("has_finding", "finding_of")
#: roles that tie a condition to what the question mentions beside findings (a drug taken, a test done), read
#: from that entity: such context counts toward a condition's coverage at ``CONTEXT_WEIGHT``
CONTEXT_ROLES = ("treats", "prevents", "test_for", "causes")
CONTEXT_WEIGHT = 0.5
#: a condition annotated with a more specific form of a finding (its rdfs:subClassOf child) explains the finding,
#: less surely than one annotated with the finding itself
DESCENDANT_STRENGTH = 0.6
#: how much a candidate's attestation (its finding profile's size, on a log scale, relative to the largest among the
#: candidates) can move its score: at equal coverage a condition the sources describe at length comes before a
#: syndrome known from a handful of features (the prior of a naive Bayes ranking, kept small)
ATTESTATION_WEIGHT = 0.1
#: at most this many conditions tied on coverage are scored (their profiles read), all of them, not the first by id
TIED_POOL = 200
MIN_LINK_SCORE = 0.7  # the retriever's and the paper's cut-off for a soft match


@dataclass(frozen=True)
class Finding:
    """A question's entity that the differential counts: its specificity weight, the conditions it is tied to
    (``df``), the mention it came from, and its role."""

    entity: Entity
    weight: float
    df: int
    mention: str | None = None
    role: str = "finding"  # "finding", "condition" (named by the question) or "context" (a drug, a test)

    def to_json(self) -> dict[str, Any]:
        return {**self.entity.to_json(), "weight": round(self.weight, 4), "conditions": self.df,
                "mention": self.mention, "role": self.role}


@dataclass(frozen=True)
class Candidate:
    """A condition, its score (weighted coverage of the findings, times its fit), the findings it explains and
    leaves unexplained, and the paths (one edge each) from it to every finding it explains."""

    entity: Entity
    score: float
    coverage: float
    explains: tuple[Entity, ...]
    unexplained: tuple[Entity, ...]
    paths: tuple[Path, ...]
    profile: int = 0  # the condition's findings in the KG

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity.to_json(), "score": round(self.score, 4), "coverage": round(self.coverage, 4),
                "explains": [e.to_json() for e in self.explains],
                "unexplained": [e.to_json() for e in self.unexplained],
                "profile": self.profile, "paths": [p.to_json() for p in self.paths]}


@dataclass(frozen=True)
class Differential:
    """The ranked candidates (best first) for a question's findings."""

    question: str
    findings: tuple[Finding, ...]
    candidates: tuple[Candidate, ...]
    conditions: int = 0  # the conditions the specificity is counted over
    notes: tuple[str, ...] = field(default=())
    #: every condition that explains a finding (top or not) -> (its coverage, the IRIs of the findings it explains)
    coverage_of: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def top(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def coverage(self, iri: str) -> float:
        """The share of the findings' weight that the condition ``iri`` explains (0: none), top candidate or not."""
        return self.coverage_of.get(iri, (0.0, ()))[0]

    def split(self, iri: str) -> tuple[tuple[Entity, ...], tuple[Entity, ...]]:
        """The findings the condition ``iri`` explains, and those it leaves unexplained (context excepted)."""
        explained = set(self.coverage_of.get(iri, (0.0, ()))[1])
        return (tuple(f.entity for f in self.findings if f.entity.iri in explained or f.entity.iri == iri),
                tuple(f.entity for f in self.findings
                      if f.role != "context" and f.entity.iri not in explained and f.entity.iri != iri))

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "findings": [f.to_json() for f in self.findings],
                "conditions": self.conditions, "candidates": [c.to_json() for c in self.candidates],
                "notes": list(self.notes)}

    def to_text(self) -> str:
        """The candidates as lines a person reads: rank, label, score, what each explains and leaves out."""
        if not self.findings:
            return "no finding linked: nothing to rank"
        if not self.candidates:
            return "findings: " + ", ".join(f.entity.label for f in self.findings) + "\nno condition explains them"
        lines = ["findings: " + ", ".join(f"{f.entity.label} ({f.weight:.2f})" for f in self.findings)]
        for i, c in enumerate(self.candidates, 1):
            lines.append(f"{i:>3}. {c.entity.label} ({c.entity.id}) score {c.score:.3f}: explains "
                         + (", ".join(e.label for e in c.explains) or "nothing")
                         + ("; not " + ", ".join(e.label for e in c.unexplained) if c.unexplained else ""))
        return "\n".join(lines)


# -- the KG's finding relations and its conditions -------------------------------------------------------------

def finding_relations(kg: Graph, kinds: Sequence[str | Any] = ()) -> dict[str, str]:
    """Relation IRI -> its role, for every relation whose role ties a condition to a finding (``has_finding``:
    condition -> finding; ``finding_of``: finding -> condition) or to context (treats, is a test for, ...)."""
    from mirage_kg.model.kinds import ROLES, vocabulary

    vocab = vocabulary(kg, kinds)
    wanted = FINDING_ROLES + CONTEXT_ROLES + tuple(ROLES[r].inverse for r in CONTEXT_ROLES)
    return {r: role for r in vocab.relations_with_role(*wanted) if (role := vocab.role(r)) is not None}


_COUNTS: weakref.WeakKeyDictionary[Any, tuple[Any, int]] = weakref.WeakKeyDictionary()


def condition_count(kg: Graph, relations: dict[str, str]) -> int:
    """How many distinct conditions have a finding in the KG (the N of the specificity), cached per store state."""
    key = (kg.token, tuple(sorted(relations)))
    cached = _COUNTS.get(kg.store)
    if cached is not None and cached[0] == key:
        return cached[1]
    forward = " ".join(iri_ref(r) for r, role in sorted(relations.items()) if role == "has_finding")
    backward = " ".join(iri_ref(r) for r, role in sorted(relations.items()) if role == "finding_of")
    parts = []
    if forward:
        parts.append(f"{{ VALUES ?p {{ {forward} }} GRAPH ?g {{ ?c ?p ?f }} }}")
    if backward:
        parts.append(f"{{ VALUES ?q {{ {backward} }} GRAPH ?g {{ ?f ?q ?c }} }}")
    count = 0
    if parts:
        rows = kg.store.select(
            f"SELECT (COUNT(DISTINCT ?c) AS ?n) WHERE {{ {' UNION '.join(parts)} FILTER(isIRI(?c)) }}")
        count = int(rows[0]["n"].value) if rows else 0
    _COUNTS[kg.store] = (key, count)
    return count


# -- the differential ----------------------------------------------------------------------------------------------

#: a mention's candidates this close to its best are read as the same match (an exact label and an exact synonym)
SAME_MATCH = 0.04
#: the linking methods that match by likeness rather than by a name
SOFT_METHODS = frozenset({"fuzzy", "embedding"})

_Linked = tuple[tuple[tuple[Entity, float], ...], "str | None"]  # (candidates, best first), mention text


def linked_findings(mentions: Iterable[Mention], min_score: float = MIN_LINK_SCORE) -> list[_Linked]:
    """For each mention whose best candidate scores at least ``min_score``: its candidates within ``SAME_MATCH`` of
    the best (a phenotype and a disease of the same name), best first, and the mention's text. A soft match (by
    embedding or fuzzy likeness) names nothing alike: its best candidate alone ("really bad sinus problems" is
    chronic sinusitis at 0.79, not the painful sinuses it resembles at 0.77)."""
    out: list[_Linked] = []
    for mention in mentions:
        best = mention.best
        if best is None or best.score < min_score:
            continue
        if best.method in SOFT_METHODS:  # a likeness, not a name: its best reading stands alone
            same: tuple[tuple[Entity, float], ...] = ((best.entity, best.score),)
        else:
            same = tuple((c.entity, c.score) for c in mention.candidates
                         if c.score >= max(min_score, best.score - SAME_MATCH))
        out.append((same, mention.text))
    return out


_Edge = tuple[float, str, str, str]  # (strength, stored subject, relation, stored object)


def differential(kg: Graph, findings: str | Sequence[Entity | str], *, top: int = 10,
                 kinds: Sequence[str | Any] = (), min_score: float = MIN_LINK_SCORE,
                 descendants: bool = True, mentions: Sequence[Mention] | None = None) -> Differential:
    """Rank the conditions that explain ``findings``: a question (linked here; each mention's best candidate at or
    above ``min_score``) or entities (``Entity``, CURIE or IRI).

    Each linked entity is a **finding** (a condition has it through a ``has_finding``/``finding_of`` edge), a
    **named condition** (a disease the question names: it explains itself), or **context** (a drug taken, a test
    done: a condition it treats or tests for explains it, at ``CONTEXT_WEIGHT``); anything else is left out. A
    finding weighs its specificity, ``log((N + 1) / (df + 1))`` over the N conditions with findings, df of them
    having it, times its link score. A candidate's coverage is the weight of what it explains (times the
    annotation frequencies its sources give, summed to at most 1) over the weight of all; its score is the
    coverage times ``1 - ATTESTATION_WEIGHT + ATTESTATION_WEIGHT * attestation``, the attestation being
    ``log(1 + profile) / log(1 + largest profile)`` over the candidates, a profile being a condition's findings
    (every condition tied with the last one that can reach the top is scored, up to ``TIED_POOL``).
    The ``top`` best come back, best first, each with what it explains and leaves out and its supporting paths.
    ``descendants``: a condition annotated with a direct subclass of a finding explains
    it too (at ``DESCENDANT_STRENGTH``)."""
    if top < 1:
        raise InputError(f"top must be at least 1, not {top}")
    question, linked = _linked_input(kg, findings, min_score, mentions)
    relations = finding_relations(kg, kinds)
    if not any(role in FINDING_ROLES for role in relations.values()):
        return Differential(question, (), (), 0, ("the knowledge graph declares no relation with a finding role "
                                                  "(has_finding / finding_of): nothing to rank",))
    conditions = condition_count(kg, relations)
    if not conditions:
        return Differential(question, (), (), 0, ("no condition in the knowledge graph has a finding "
                                                  "(a has_finding / finding_of edge): nothing to rank",))
    findings_out, edges_of = _weighed_findings(kg, linked, relations, conditions, kinds, descendants)
    if not findings_out:
        return Differential(question, (), (), conditions)
    total = sum(f.weight for f in findings_out)
    gained, support = _gains(kg, findings_out, edges_of)
    if not gained:
        return Differential(question, tuple(findings_out), (), conditions)
    profile, scored, best = _ranked(kg, gained, total, relations, top)
    out = _candidates(kg, best, findings_out, support, scored, profile)
    groups = kg.groups
    iri_of = {groups.rep(f.entity.iri): f.entity.iri for f in findings_out}
    covered = {c: (gained[c] / total, tuple(iri_of[n] for n in support[c])) for c in gained}
    return Differential(question, tuple(findings_out), tuple(out), conditions, coverage_of=covered)


def _linked_input(kg: Graph, findings: str | Sequence[Entity | str], min_score: float,
                  mentions: Sequence[Mention] | None) -> tuple[str, list[_Linked]]:
    """The question as text and its linked findings: a question's mentions (linked here unless given), or the
    entities given, each its own certain match."""
    if isinstance(findings, str):
        if mentions is None:
            from mirage_kg.linking.linker import Linker

            linker = getattr(kg, "linker", None) or Linker(kg)  # a KnowledgeGraph's own, else one on the graph
            mentions = linker.link(findings, top=5)
        return findings, linked_findings(mentions, min_score)
    question = ", ".join(f if isinstance(f, str) else f.label for f in findings)
    return question, [(((f if isinstance(f, Entity) else kg.entity(f), 1.0),), None) for f in findings]


def _weighed_findings(kg: Graph, linked: list[_Linked], relations: dict[str, str], conditions: int,
                      kinds: Sequence[str | Any], descendants: bool
                      ) -> tuple[list[Finding], dict[str, dict[str, _Edge]]]:
    """Each linked entity as a finding, a named condition or context, with its weight; and for each, the edges
    from the conditions it is tied to (a mention's node counted once)."""
    from mirage_kg.model.kinds import vocabulary

    groups = kg.groups
    kind_of = vocabulary(kg, kinds).kinds(groups.rep(e.iri) for same, _ in linked for e, _ in same)
    max_weight = math.log(conditions + 1) if conditions else 1.0
    findings_out: list[Finding] = []
    edges_of: dict[str, dict[str, _Edge]] = {}  # finding node -> condition node -> its edge
    for same, mention in linked:
        # a mention that names a finding and a condition alike ("obesity": HPO's phenotype, MONDO's disease) is
        # read as the finding: the differential explains findings
        entity, score = same[0]
        node = groups.rep(entity.iri)
        found = _conditions_of(kg, node, relations, ("finding_of",), descendants)
        for other, other_score in same[1:] if not found else ():
            other_node = groups.rep(other.iri)
            other_found = _conditions_of(kg, other_node, relations, ("finding_of",), descendants)
            if other_found and other_node not in edges_of:
                entity, score, node, found = other, other_score, other_node, other_found
                break
        if node in edges_of:
            continue
        named = kind_of.get(node) == "disease"
        role = "condition" if named else "finding"
        if not found and not named:
            found = _conditions_of(kg, node, relations, CONTEXT_ROLES, False)
            role = "context"
            if not found and kind_of.get(node) != "finding":
                continue  # an organ, a qualifier: nothing a condition explains
            if not found:
                role = "finding"  # a finding no condition in the KG has: it stays unexplained
        weight = (math.log((conditions + 1) / (len(found) + 1)) if conditions else 1.0) + 1e-6
        if named:
            weight = max(weight, max_weight)
        if role == "context":
            weight *= CONTEXT_WEIGHT
        edges_of[node] = found
        findings_out.append(Finding(entity, weight * score, len(found), mention, role))
    return findings_out, edges_of


def _gains(kg: Graph, findings_out: list[Finding], edges_of: dict[str, dict[str, _Edge]]
           ) -> tuple[dict[str, float], dict[str, dict[str, _Edge | None]]]:
    """Condition node -> the weight of the findings it explains; and condition node -> finding node -> the edge
    that explains it (None: a named condition explaining itself)."""
    groups = kg.groups
    gained: dict[str, float] = {}
    support: dict[str, dict[str, _Edge | None]] = {}
    for finding in findings_out:
        node = groups.rep(finding.entity.iri)
        if finding.role == "condition":  # a condition the question names explains itself
            gained[node] = gained.get(node, 0.0) + finding.weight
            support.setdefault(node, {})[node] = None
        for condition, edge in edges_of[node].items():
            if condition == node:
                continue
            gained[condition] = gained.get(condition, 0.0) + finding.weight * edge[0]
            support.setdefault(condition, {})[node] = edge
    return gained, support


def _ranked(kg: Graph, gained: dict[str, float], total: float, relations: dict[str, str], top: int
            ) -> tuple[dict[str, int], dict[str, tuple[float, float]], list[str]]:
    """The profile sizes and (score, coverage) of the conditions that can reach the top, and the ``top`` best."""
    # the fit needs each candidate's profile size: only for those that can still reach the top (with every
    # condition tied with the last of them, up to TIED_POOL: the first by id need not be the best attested)
    finding_rels = frozenset(r for r, role in relations.items() if role in FINDING_ROLES)
    ordered = sorted(gained, key=lambda c: (-round(gained[c], 9), c))
    size = max(3 * top, 30)
    if len(ordered) > size:
        last = round(gained[ordered[size - 1]], 9)
        size = max(size, min(TIED_POOL, sum(1 for c in ordered if round(gained[c], 9) >= last)))
    pool = ordered[:size]
    profile = {c: len({n for _, _, n, _, _ in kg.walk(c, finding_rels)}) for c in pool}
    largest = math.log1p(max(profile.values(), default=0)) or 1.0
    scored = {}
    for c in pool:
        coverage = gained[c] / total
        attestation = math.log1p(profile[c]) / largest
        scored[c] = (coverage * (1 - ATTESTATION_WEIGHT + ATTESTATION_WEIGHT * attestation), coverage)
    best = sorted(pool, key=lambda c: (-round(scored[c][0], 9), -round(scored[c][1], 9), c))[:top]
    return profile, scored, best


def _candidates(kg: Graph, best: list[str], findings_out: list[Finding],
                support: dict[str, dict[str, _Edge | None]], scored: dict[str, tuple[float, float]],
                profile: dict[str, int]) -> list[Candidate]:
    """The best conditions as candidates: labelled, with what each explains and leaves out and the one-edge path
    behind each finding it explains."""
    groups = kg.groups
    names = kg.labels(set(best) | {x for c in best for e in support[c].values() if e for x in (e[1], e[3])})
    relmeta = kg.relations({e[2] for c in best for e in support[c].values() if e})
    out = []
    for c in best:
        explains, paths = [], []
        for finding in findings_out:
            node = groups.rep(finding.entity.iri)
            if node not in support[c]:
                continue
            explains.append(finding.entity)
            step_edge = support[c][node]
            if step_edge is None:
                continue
            _, s, p, o = step_edge
            # read from the condition: forward when it is the stored subject
            direction: Direction = "forward" if groups.rep(s) == c else "backward"
            paths.append(Path((Step(Entity(s, names[s]), relmeta[p], Entity(o, names[o]), direction),)))
        # context the candidate does not touch is no gap in it: only findings and named conditions are "unexplained"
        unexplained = tuple(f.entity for f in findings_out
                            if f.role != "context" and groups.rep(f.entity.iri) not in support[c])
        out.append(Candidate(Entity(c, names[c]), scored[c][0], scored[c][1], tuple(explains), unexplained,
                             tuple(paths), profile[c]))
    return out


def _conditions_of(kg: Graph, node: str, relations: dict[str, str], wanted: Sequence[str],
                   descendants: bool) -> dict[str, _Edge]:
    """Condition node -> (strength, stored subject, relation, stored object) for each condition tied to ``node``
    (or, with ``descendants``, to a direct subclass of it) by an edge whose role read from ``node`` is one of
    ``wanted`` ("finding_of": ``node`` is a finding of the condition); the strength is the annotation frequency
    where the source records one (an excluded feature explains nothing), times ``DESCENDANT_STRENGTH`` through a
    subclass."""
    from mirage_kg.model.kinds import ROLES
    from mirage_kg.graph.ranking import annotation_frequencies

    rels = frozenset(r for r, role in relations.items() if role in wanted or ROLES[role].inverse in wanted)
    if not rels:
        return {}
    sources = [(node, 1.0)]
    if descendants:
        sources += [(n, DESCENDANT_STRENGTH) for p, d, n in kg.neighbours(node, frozenset({RDFS_SUBCLASS}))
                    if d == "backward"]
    found: dict[str, _Edge] = {}
    for finding, strength in sources:
        edges = kg.walk(finding, rels)
        if not edges:
            continue
        members = set(kg.groups.of(finding))
        # what the sources say of each condition's edge: the frequencies of its members' records, summed (sources
        # that agree make a feature surer), at most 1; an edge no record annotates counts 1
        frequency_of: dict[tuple[str, str], float] = {}
        excluded: set[tuple[str, str]] = set()
        for (s, p, o), frequency in annotation_frequencies(kg.store, sorted(members)).items():
            end = s if o in members else o
            key = (kg.groups.rep(end), p)
            frequency_of[key] = min(1.0, frequency_of.get(key, 0.0) + frequency)
            if frequency <= 0.0:
                excluded.add(key)
        for p, d, other, s, o in edges:
            role = relations[p]
            if (role if d == "forward" else ROLES[role].inverse) not in wanted:
                continue
            frequency = frequency_of.get((other, p), 1.0)
            if frequency <= 0.0 or ((other, p) in excluded and frequency < 0.5):
                continue
            value = strength * frequency
            if other not in found or value > found[other][0]:
                found[other] = (value, s, p, o)
    return found
