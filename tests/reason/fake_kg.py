"""A small in-memory stand-in for ``mirage_kg.KnowledgeGraph`` with the same public surface the reasoner uses
(entity, anchor, bridge, link, linker.link_one, retrieve), built from mirage_kg's own records. Linking is exact
label/synonym matching (score 1.0) plus a difflib ratio for near misses, so tests control every score; it counts
the graph queries it answers so cache tests can check them."""

from __future__ import annotations

import difflib
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mirage_kg import Candidate, Entity, Evidence, Mention, Path, Relation, RetrievalResult, Step, UnknownEntityError
from mirage_kg.store import OxigraphStore, ensure_schema

KG = "https://w3id.org/mirage-kg/entity/"
MKG = "https://w3id.org/mirage-kg/schema#"
SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"

RELATIONS = {
    "has_symptom": Relation(MKG + "has_symptom", "has symptom", "is a symptom of",
                            "{subject} has symptom {object}", "{object} is a symptom of {subject}"),
    "need_medication": Relation(MKG + "need_medication", "need medication", "is a medication for",
                                "{subject} is treated with the medication {object}",
                                "{object} is a medication for {subject}"),
    "need_medical_test": Relation(MKG + "need_medical_test", "need medical test", "is a test needed for",
                                  "{subject} needs the medical test {object}",
                                  "{object} is a test needed for {subject}"),
    "contraindicated_in": Relation(MKG + "contraindicated_in", "contraindicated in", "contraindicates",
                                   "{subject} is contraindicated in {object}",
                                   "{object} is a contraindication for {subject}"),
    "is_a": Relation(SUBCLASS, "is a", "has subtype", "{subject} is a kind of {object}",
                     "{object} has the subtype {subject}"),
}

# label -> synonyms
ENTITIES: dict[str, tuple[str, ...]] = {
    "Influenza": ("flu",), "Common cold": ("cold",), "Peptic ulcer disease": ("stomach ulcer",),
    "Asthma": (), "Hypertension": ("high blood pressure",), "Diabetes mellitus": ("diabetes",),
    "Type 2 diabetes mellitus": ("type 2 diabetes",), "Type 1 diabetes mellitus": ("type 1 diabetes",),
    "Migraine": (),
    "Fever": (), "Cough": (), "Fatigue": ("tiredness",), "Sore throat": (), "Abdominal pain": (), "Wheezing": (),
    "Headache": (), "Polyuria": (), "Nausea": (),
    "Oseltamivir": ("Tamiflu",), "Paracetamol": ("acetaminophen",), "Omeprazole": (), "Ibuprofen": (),
    "Salbutamol": (), "Propranolol": (), "Lisinopril": (), "Metformin": (), "Sumatriptan": (),
    "Blood glucose test": (),
}

TRIPLES = [
    ("Influenza", "has_symptom", "Fever"), ("Influenza", "has_symptom", "Cough"),
    ("Influenza", "has_symptom", "Fatigue"), ("Influenza", "need_medication", "Oseltamivir"),
    ("Influenza", "need_medication", "Ibuprofen"),
    ("Common cold", "has_symptom", "Cough"), ("Common cold", "has_symptom", "Sore throat"),
    ("Common cold", "need_medication", "Paracetamol"),
    ("Peptic ulcer disease", "has_symptom", "Abdominal pain"), ("Peptic ulcer disease", "has_symptom", "Nausea"),
    ("Peptic ulcer disease", "need_medication", "Omeprazole"),
    ("Ibuprofen", "contraindicated_in", "Peptic ulcer disease"),
    ("Asthma", "has_symptom", "Wheezing"), ("Asthma", "has_symptom", "Cough"),
    ("Asthma", "need_medication", "Salbutamol"), ("Propranolol", "contraindicated_in", "Asthma"),
    ("Hypertension", "has_symptom", "Headache"), ("Hypertension", "need_medication", "Propranolol"),
    ("Hypertension", "need_medication", "Lisinopril"),
    ("Migraine", "has_symptom", "Headache"), ("Migraine", "has_symptom", "Nausea"),
    ("Migraine", "need_medication", "Sumatriptan"), ("Migraine", "need_medication", "Propranolol"),
    ("Diabetes mellitus", "has_symptom", "Fatigue"), ("Diabetes mellitus", "has_symptom", "Polyuria"),
    ("Diabetes mellitus", "need_medical_test", "Blood glucose test"),
    ("Type 2 diabetes mellitus", "is_a", "Diabetes mellitus"),
    ("Type 2 diabetes mellitus", "need_medication", "Metformin"),
    ("Type 1 diabetes mellitus", "is_a", "Diabetes mellitus"),
    ("Type 1 diabetes mellitus", "has_symptom", "Polyuria"),
]


def ent(label: str) -> Entity:
    return Entity(KG + label.replace(" ", "_"), label)


    def to_text(self) -> str:
        return "\n".join(e.path.text for e in self.evidence)


class FakeLinker:
    def __init__(self, kg: FakeKG) -> None:
        self.kg = kg
        self.names: dict[str, Entity] = {}
        for label, synonyms in kg.entities.items():
            for name in (label, *synonyms):
                self.names[name.casefold()] = ent(label)

    def link_one(self, name: str, top: int = 5) -> list[Candidate]:
        self.kg.counts["link_one"] += 1
        key = name.strip().casefold()
        if key in self.names:
            return [Candidate(self.names[key], 1.0, "exact")]
        scored = sorted(((difflib.SequenceMatcher(None, key, n).ratio(), n) for n in self.names), reverse=True)
        return [Candidate(self.names[n], round(s, 3), "fuzzy") for s, n in scored[:top]]

    def link(self, text: str, top: int = 5) -> list[Mention]:
        self.kg.counts["link"] += 1
        taken: list[tuple[int, int]] = []
        out = []
        for name in sorted(self.names, key=len, reverse=True):
            for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE):
                if any(m.start() < e and s < m.end() for s, e in taken):
                    continue
                taken.append((m.start(), m.end()))
                out.append(Mention(m.group(0), m.start(), m.end(), (Candidate(self.names[name], 1.0, "exact"),)))
        return sorted(out, key=lambda m: m.start)


@dataclass
class FakeKG:
    entities: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(ENTITIES))
    triples: list[tuple[str, str, str]] = field(default_factory=lambda: list(TRIPLES))
    counts: dict[str, int] = field(default_factory=lambda: {"anchor": 0, "bridge": 0, "link": 0, "link_one": 0,
                                                            "retrieve": 0})

    def __post_init__(self) -> None:
        self.linker = FakeLinker(self)
        self._store: OxigraphStore | None = None

    @property
    def store(self) -> OxigraphStore:
        """A real store holding the schema and the fake's triples, so kinds and roles resolve as on a real KG
        (here from the schema's domain/range and roles: the fake's entities carry no types)."""
        if self._store is None:
            store = OxigraphStore()
            ensure_schema(store)
            lines = [f"<{ent(s).iri}> <{RELATIONS[r].iri}> <{ent(o).iri}> .\n" for s, r, o in self.triples]
            store.load(io.BytesIO("".join(lines).encode()), media_type="application/n-triples",
                       graph="urn:fake-kg", source="fake KG")
            self._store = store
        return self._store

    def entity(self, ref: str | Entity) -> Entity:
        if isinstance(ref, Entity):
            return ref
        for label in self.entities:
            if ref.casefold() == label.casefold() or ref == ent(label).iri:
                return ent(label)
        raise UnknownEntityError(ref)

    def _steps(self, center: Entity) -> list[Step]:
        steps = []
        for s, r, o in self.triples:
            if ent(s).iri == center.iri:
                steps.append(Step(ent(s), RELATIONS[r], ent(o), "forward"))
            elif ent(o).iri == center.iri:
                steps.append(Step(ent(s), RELATIONS[r], ent(o), "backward"))
        return steps

    def anchor(self, entity: str | Entity, k: int = 10, relations: Sequence[str] | None = None,
               direction: str = "both", rank_by: str | None = None) -> list[Step]:
        self.counts["anchor"] += 1
        center = self.entity(entity)
        steps = self._steps(center)
        if relations is not None:
            steps = [s for s in steps if s.relation.iri in set(relations)]
        if direction == "out":
            steps = [s for s in steps if s.direction == "forward"]
        elif direction == "in":
            steps = [s for s in steps if s.direction == "backward"]
        groups: dict[tuple[str, str], list[Step]] = {}
        for s in steps:
            groups.setdefault((s.relation.iri, s.direction), []).append(s)
        return [s for g in groups.values() for s in g[:k]]

    def bridge(self, a: str | Entity, b: str | Entity, max_hops: int = 3, max_paths: int = 20,
               relations: Sequence[str] | None = None) -> list[Path]:
        self.counts["bridge"] += 1
        source, target = self.entity(a), self.entity(b)
        found: list[tuple[Step, ...]] = []
        frontier: list[tuple[Entity, tuple[Step, ...], frozenset[str]]] = [(source, (), frozenset({source.iri}))]
        for _ in range(max_hops):
            nxt = []
            for node, steps, seen in frontier:
                for step in self._steps(node):
                    if relations is not None and step.relation.iri not in relations:
                        continue
                    other = step.end
                    if other.iri == target.iri:
                        found.append(steps + (step,))
                    elif other.iri not in seen:
                        nxt.append((other, steps + (step,), seen | {other.iri}))
            frontier = nxt
        found.sort(key=lambda st: (len(st), [s.text for s in st]))
        return [Path(st) for st in found[:max_paths]]

    def link(self, text: str, top: int = 5) -> list[Mention]:
        return self.linker.link(text, top)

    def retrieve(self, question: str, budget: int = 100) -> RetrievalResult:
        self.counts["retrieve"] += 1
        mentions = tuple(self.link(question))
        entities = tuple(dict.fromkeys(m.candidates[0].entity for m in mentions))
        evidence = []
        for e in entities:
            for step in self._steps(e):
                evidence.append(Evidence(Path((step,)), ("fake",), 1.0))
        return RetrievalResult(question, mentions, entities, tuple(evidence[:budget]))

    def path_exists(self, path: Path) -> bool:
        keys = {(ent(s).iri, RELATIONS[r].iri, ent(o).iri) for s, r, o in self.triples}
        return all((s.subject.iri, s.relation.iri, s.object.iri) in keys for s in path.steps)
