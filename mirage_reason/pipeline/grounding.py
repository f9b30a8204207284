"""What the knowledge graph says of an answer's words: the entities a text mentions (linked once per text), the text
with the entities it names written as their canonical labels, what each entity is (its kind in the ontology), whether
one diagnosis is a kind of another, an entity's edges of a role, a drug's contraindications, and the graph's
differential for a question. Nothing here knows a relation or class name: kinds and roles come from
``mirage_kg.model.kinds``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirage_kg import ClinicalVocabulary, Entity, MirageError, Path, Step, clinical_vocabulary

from mirage_reason.pipeline.choices import parse_options
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.sentence_check import NAMING_METHODS
from mirage_reason.pipeline.sentences import normalise_units

if TYPE_CHECKING:
    from mirage_kg import Differential, KnowledgeGraphLike

__all__ = ["RDFS_SUBCLASS", "Grounding", "UnavailableVocabulary", "entity_kind"]

RDFS_SUBCLASS = "http://www.w3.org/2000/01/rdf-schema#subClassOf"


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


class UnavailableVocabulary(ClinicalVocabulary):
    """The vocabulary when the KG cannot be read: the shipped mapping only, with no entity to look up (every one
    resolves to a bare concept, so the checks that need kinds cannot fire, and the answer says so)."""

    def __init__(self) -> None:
        super().__init__(None)


class Grounding:
    """The KG lookups of one synthesizer, each cached for its lifetime (the links of the last texts, is-a answers,
    role edges, contraindications)."""

    def __init__(self, kg: KnowledgeGraphLike, config: MirageConfig) -> None:
        self.kg = kg
        self.config = config
        self._isa: dict[tuple[str, str], bool] = {}
        self._contra: dict[str, tuple[Path, ...]] = {}
        self._by_role: dict[tuple[str, tuple[str, ...]], tuple[Step, ...]] = {}
        self._link_cache: dict[str, list[tuple[Entity, int, int, str]]] = {}

    def vocabulary(self) -> tuple[ClinicalVocabulary, str | None]:
        """The KG's kinds and roles, or an empty vocabulary and why when the KG cannot be read."""
        try:
            return clinical_vocabulary(self.kg, self.config.kinds), None
        except MirageError as exc:
            return UnavailableVocabulary(), f"the knowledge graph's kinds and roles could not be read ({exc})"

    # -- linking --------------------------------------------------------------------------------------------------

    def mentions(self, text: str) -> list[tuple[Entity, int, int]]:
        """(entity, start, end) for every mention of ``text`` that links above the threshold."""
        return [(e, s, t) for e, s, t, _ in self.linked(text)]

    def linked(self, text: str) -> list[tuple[Entity, int, int, str]]:
        """``mentions`` with the method that found each entity (exact, synonym, ..., embedding); the last texts
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
        mentions = self.mentions(text) if mentions is None else mentions
        strong = {(s, t) for _, s, t, method in self.linked(text) if method in NAMING_METHODS}
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

    # -- the ontology -----------------------------------------------------------------------------------------------

    def kinds(self, vocab: ClinicalVocabulary, entities: Sequence[Entity], paths: Sequence[Path]) -> dict[str, str]:
        """Each entity's kind (``entity_kind``), read in one batch; from ``paths`` alone where the KG fails."""
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

    def differential(self, question: str) -> Differential | None:
        """The graph's differential for the question's findings (``mirage_kg.retrieval.differential``), read off the
        retriever's linking with no evidence budget; None for a multiple-choice question or when the KG cannot
        answer (the vote then counts the question entities the chains' paths tie to each diagnosis)."""
        if parse_options(question):
            return None
        try:
            return self.kg.retrieve(question, budget=0).differential
        except MirageError:
            return None

    def is_a_related(self, a: Entity, b: Entity) -> bool:
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

    def role_steps(self, vocab: ClinicalVocabulary, entity: Entity, roles: tuple[str, ...]) -> tuple[Step, ...]:
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

    def contraindications(self, vocab: ClinicalVocabulary, drug: Entity) -> tuple[Path, ...]:
        """The KG's contraindications of ``drug``, one-step paths. MirageError when the KG cannot answer."""
        if drug.iri not in self._contra:
            steps = self.role_steps(vocab, drug, ("contraindicated_in",))
            self._contra[drug.iri] = tuple(Path((s,)) for s in steps)
        return self._contra[drug.iri]
