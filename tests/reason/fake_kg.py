"""A small in-memory stand-in for ``mirage_kg.KnowledgeGraph``: the surface the reasoner asks for
(``mirage_kg.KnowledgeGraphLike``: entity, anchor, bridge, link, linker.link_one, retrieve, path_exists, store),
built from mirage_kg's own records, with every answer computed in a few lines the tests can read. It counts the
graph queries it answers so cache tests can check them.

It answers as the real graph does over the same triples (``real_kg`` builds that graph;
``tests/reason/test_kg_conformance.py`` holds the two to each other): linking scores a label as written 1.0
(exact), a synonym as written 0.98, a normalised label 0.96, a normalised synonym 0.94, and when none matches,
0.9 x rapidfuzz's token-sort ratio of at least ``FUZZY_CUTOFF`` (fuzzy); anchor orders by relation id, direction
(forward first), the neighbour's degree (the more specific first) and id. Retrieval is simpler than the real
retriever's: each mention's best candidate in the order of the text (the real one ranks them by weight and adds
look-alikes), with every fact of each."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rapidfuzz import fuzz

from mirage_kg import (
    Candidate,
    Entity,
    Evidence,
    KnowledgeGraph,
    Mention,
    Path,
    Relation,
    RetrievalResult,
    Step,
    UnknownEntityError,
)
from mirage_kg.graph.facts import DIRECTIONS
from mirage_kg.linking.linker import FUZZY_CUTOFF, METHODS
from mirage_kg.linking.text import fold, normalise, tokens
from mirage_kg.model.namespaces import SKOS_ALT, SKOS_PREF, compress, is_identifier
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


#: a CURIE or an IRI written in a text (``<...>`` or ``prefix:local``)
IDENTIFIER = re.compile(r"<[^<>\s]+>|\b[A-Za-z][\w.\-]*:[\w.\-]*\w")
#: the real linker's score and method of each dictionary match, best first (``mirage_kg.linking.linker``)
LABEL, SYNONYM, NORMALISED_LABEL, NORMALISED_SYNONYM = (1.0, "exact"), (0.98, "synonym"), (0.96, "normalised"), \
    (0.94, "synonym")


class FakeLinker:
    def __init__(self, kg: FakeKG) -> None:
        self.kg = kg
        self.names: dict[str, Entity] = {}  # every label and synonym, folded -> its entity (for ``link``'s spans)
        self.written: list[tuple[str, bool, Entity]] = []  # (name as written, a synonym?, entity)
        for label, synonyms in kg.entities.items():
            for name in (label, *synonyms):
                self.names[name.casefold()] = ent(label)
                self.written.append((name, name != label, ent(label)))

    def link_one(self, name: str, top: int = 5) -> list[Candidate]:
        self.kg.counts["link_one"] += 1
        return self._candidates(name, top)

    def _candidates(self, name: str, top: int) -> list[Candidate]:
        text = name.strip()
        if not text:
            return []
        if ":" in text and is_identifier(text):  # a CURIE or an IRI passes straight through
            try:
                return [Candidate(self.kg.entity(text), 1.0, "id")]
            except UnknownEntityError:
                return []
        key, folded = normalise(text), fold(text)
        best: dict[str, tuple[float, str, Entity]] = {}

        def offer(entity: Entity, score: float, method: str) -> None:
            if entity.iri not in best or score > best[entity.iri][0]:
                best[entity.iri] = (score, method, entity)

        for written, synonym, entity in self.written:
            if written == text:
                offer(entity, *(SYNONYM if synonym else LABEL))
            elif normalise(written) == key:
                offer(entity, *(NORMALISED_SYNONYM if synonym else NORMALISED_LABEL))
        if not best and len(folded) >= 4:  # look-alikes only for a name found nowhere as it is
            query = " ".join(sorted(folded.split()))
            for written, _, entity in self.written:
                ratio = fuzz.token_sort_ratio(query, " ".join(sorted(fold(written).split())))
                if ratio >= FUZZY_CUTOFF:
                    offer(entity, 0.9 * ratio / 100.0, "fuzzy")
        ranked = sorted(best.values(), key=lambda b: (-b[0], METHODS.index(b[1]), b[2].iri))
        return [Candidate(entity, round(score, 6), method) for score, method, entity in ranked[:top]]

    def link(self, text: str, top: int = 5) -> list[Mention]:
        """CURIEs and IRIs written in the text, then the longest runs of words whose normalised form is a name,
        left to right. A span's candidates are its dictionary matches (the real linker may add look-alikes
        below them)."""
        self.kg.counts["link"] += 1
        out: list[Mention] = []
        for m in IDENTIFIER.finditer(text):
            found = self._candidates(m.group(0).strip("<>"), top)
            if found:
                out.append(Mention(m.group(0), m.start(), m.end(), tuple(found)))
        taken = [(m.start, m.end) for m in out]
        names = {normalise(name) for name in self.names}
        longest = max(len(name.split()) for name in names)
        words = tokens(text)
        i = 0
        while i < len(words):
            for n in range(min(longest, len(words) - i), 0, -1):
                start, end = words[i][1], words[i + n - 1][2]
                if normalise(text[start:end]) in names and not any(start < e and s < end for s, e in taken):
                    out.append(Mention(text[start:end], start, end, tuple(self._candidates(text[start:end], top))))
                    i += n
                    break
            else:
                i += 1
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
        """An IRI, a CURIE, or a label or synonym as written (labels first) -> the entity, as the real graph."""
        if isinstance(ref, Entity):
            return ref
        text = ref.strip()
        for label in self.entities:
            if text in (ent(label).iri, compress(ent(label).iri), label):
                return ent(label)
        for label, synonyms in self.entities.items():
            if text in synonyms:
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
        want = DIRECTIONS[direction]
        steps = [s for s in self._steps(center) if want in ("both", s.direction)]
        if relations is not None:
            steps = [s for s in steps if s.relation.iri in set(relations)]
        degree: dict[str, int] = {}
        for subject, _, obj in self.triples:
            for node in (ent(subject).iri, ent(obj).iri):
                degree[node] = degree.get(node, 0) + 1
        steps.sort(key=lambda s: (compress(s.relation.iri), s.direction != "forward", degree[s.end.iri],
                                  compress(s.end.iri)))
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
        if not path.steps:
            return False
        keys = {(ent(s).iri, RELATIONS[r].iri, ent(o).iri) for s, r, o in self.triples}
        return all((s.subject.iri, s.relation.iri, s.object.iri) in keys for s in path.steps)


def real_kg(entities: dict[str, tuple[str, ...]] | None = None, triples: Sequence[tuple[str, str, str]] | None = None
            ) -> KnowledgeGraph:
    """The real ``KnowledgeGraph`` over the fake's entities (their labels and synonyms) and triples, embeddings
    off: what the fake stands in for."""
    entities = ENTITIES if entities is None else entities
    triples = TRIPLES if triples is None else triples
    store = OxigraphStore()
    ensure_schema(store)
    lines = [f"<{ent(s).iri}> <{RELATIONS[r].iri}> <{ent(o).iri}> .\n" for s, r, o in triples]
    for label, synonyms in entities.items():
        lines.append(f'<{ent(label).iri}> <{SKOS_PREF}> "{label}"@en .\n')
        lines.extend(f'<{ent(label).iri}> <{SKOS_ALT}> "{synonym}"@en .\n' for synonym in synonyms)
    store.load(io.BytesIO("".join(lines).encode()), media_type="application/n-triples", graph="urn:fake-kg",
               source="fake KG")
    return KnowledgeGraph(store, embedding_model="none")
