"""What an entity is (disease, finding, drug, test, ...) and what a relation means clinically (treats, is
contraindicated in, is a finding of, is a test for), read from the ontology rather than from relation names.

Kinds come from ``MKG:entityKind`` annotations on classes (``ontologies/kinds.ttl``: UMLS semantic types, SNOMED CT
hierarchies and FSN tags, HPO, MONDO, ICD-10-CM chapters, the schema's classes), resolved through an entity's
``rdf:type`` and ``rdfs:subClassOf`` ancestors, nearest first; then its SNOMED CT FSN semantic tag; then the
``rdfs:domain``/``rdfs:range`` and roles of the relations it takes part in. Roles are ``MKG:clinicalRole``
annotations on properties (the schema and ``kinds.ttl``). The shipped files, any such annotations loaded into the
store, and extra Turtle files all count; results are cached per vocabulary, which ``vocabulary(kg)`` keeps per
store until a load commits."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any, Protocol

from mirage_kg.errors import InputError
from mirage_kg.model.records import Step
from mirage_kg.model.namespaces import FULLY_SPECIFIED_NAME, MKG, RDF_TYPE, RDFS, RDFS_SUBCLASS, ontologies_dir
from mirage_kg.store.base import Store
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.graph.core import Graph

__all__ = ["CONCEPT", "KINDS", "ROLES", "ClinicalVocabulary", "RoleEnds", "clinical_vocabulary", "vocabulary"]

ENTITY_KIND = MKG + "entityKind"
CLINICAL_ROLE = MKG + "clinicalRole"
FSN_TAG = MKG + "fsnTag"
RDFS_DOMAIN = RDFS + "domain"
RDFS_RANGE = RDFS + "range"

#: the kinds, in the order that settles a tie between ancestors at the same distance
KINDS: tuple[str, ...] = ("disease", "finding", "drug", "test", "procedure", "substance", "anatomy", "gene",
                          "organism", "device", "observable", "qualifier")
CONCEPT = "concept"  # the kind of an entity nothing maps


@dataclass(frozen=True)
class RoleEnds:
    """A role read subject -> object, the kinds it implies for each end (None: any), and its inverse role."""

    subject: str | None
    object: str | None
    inverse: str


#: role -> its ends; each role's inverse reads the same edge the other way
ROLES: dict[str, RoleEnds] = {
    "treats": RoleEnds("drug", "disease", "treated_by"),
    "treated_by": RoleEnds("disease", "drug", "treats"),
    "prevents": RoleEnds("drug", "disease", "prevented_by"),
    "prevented_by": RoleEnds("disease", "drug", "prevents"),
    "contraindicated_in": RoleEnds("drug", None, "contraindicates"),
    "contraindicates": RoleEnds(None, "drug", "contraindicated_in"),
    "finding_of": RoleEnds("finding", "disease", "has_finding"),
    "has_finding": RoleEnds("disease", "finding", "finding_of"),
    "test_for": RoleEnds("test", "disease", "has_test"),
    "has_test": RoleEnds("disease", "test", "test_for"),
    "finding_site": RoleEnds(None, "anatomy", "finding_site_of"),
    "finding_site_of": RoleEnds("anatomy", None, "finding_site"),
    "caused_by": RoleEnds("disease", None, "causes"),
    "causes": RoleEnds(None, "disease", "caused_by"),
}

_MAX_DEPTH = 40  # ancestor levels walked (SNOMED CT and HPO are far shallower)
_VALUES_CHUNK = 300


def _shipped_files() -> list[FsPath]:
    return [ontologies_dir() / name for name in ("schema.ttl", "kinds.ttl")]


@dataclass
class _Mapping:
    class_kind: dict[str, str]
    roles: dict[str, str]
    fsn_tags: dict[str, str]
    domains: dict[str, set[str]]
    ranges: dict[str, set[str]]

    def absorb(self, subject: str, predicate: str, obj: str, tag_kinds: dict[str, tuple[str | None, str | None]]
               ) -> None:
        if predicate == ENTITY_KIND:
            kind = obj.strip().lower()
            self.class_kind[subject] = kind
            tag_kinds.setdefault(subject, (None, None))
            tag_kinds[subject] = (tag_kinds[subject][0], kind)
        elif predicate == FSN_TAG:
            tag_kinds.setdefault(subject, (None, None))
            tag_kinds[subject] = (obj.strip().lower(), tag_kinds[subject][1])
        elif predicate == CLINICAL_ROLE:
            self.roles[subject] = obj.strip().lower()
        elif predicate == RDFS_DOMAIN:
            self.domains.setdefault(subject, set()).add(obj)
        elif predicate == RDFS_RANGE:
            self.ranges.setdefault(subject, set()).add(obj)


def _read_files(files: Sequence[str | FsPath]) -> list[tuple[str, str, str]]:
    import pyoxigraph as ox

    triples = []
    for file in files:
        path = FsPath(file)
        if not path.is_file():
            raise InputError(f"kinds file {path} does not exist; give a Turtle file of MKG:entityKind / "
                             "MKG:clinicalRole annotations (see ontologies/kinds.ttl)")
        try:
            for quad in ox.parse(path=str(path), format=ox.RdfFormat.TURTLE):
                triples.append((_term_key(quad.subject), quad.predicate.value, quad.object.value))
        except (SyntaxError, ValueError, OSError) as exc:
            raise InputError(f"{path}: not readable as Turtle ({exc}); fix the file or drop --kinds") from exc
    return triples


def _term_key(term: Any) -> str:
    import pyoxigraph as ox

    return term.value if isinstance(term, ox.NamedNode) else f"_:{term.value}"


class ClinicalVocabulary:
    """Kinds and roles over one store. ``extra`` Turtle files extend (and override) the shipped mapping."""

    CONCEPT = CONCEPT
    KINDS = KINDS
    ROLES = ROLES

    def __init__(self, store: Store | None, extra: Sequence[str | FsPath] = ()) -> None:
        self.store = store
        self.extra = tuple(str(f) for f in extra)
        self._mapping = self._load_mapping()
        self._parents: dict[str, tuple[str, ...]] = {}
        self._kinds: dict[str, str] = {}

    # --- the mapping -----------------------------------------------------------------------------------------
    def _load_mapping(self) -> _Mapping:
        mapping = _Mapping({}, {}, {}, {}, {})
        tags: dict[str, tuple[str | None, str | None]] = {}
        rows = _read_files(_shipped_files())
        if self.store is not None:
            rows += self._store_annotations()
        rows += _read_files(self.extra)  # last, so a user's file overrides the shipped mapping
        for s, p, o in rows:
            mapping.absorb(s, p, o, tags)
        for tag, kind in tags.values():
            if tag and kind:
                mapping.fsn_tags[tag] = kind
        unknown_roles = sorted({r for r in mapping.roles.values() if r not in ROLES})
        if unknown_roles:
            raise InputError(f"unknown clinical role(s) {', '.join(unknown_roles)}; use one of {', '.join(ROLES)}")
        return mapping

    def _store_annotations(self) -> list[tuple[str, str, str]]:
        assert self.store is not None
        preds = " ".join(iri_ref(p) for p in (ENTITY_KIND, FSN_TAG, CLINICAL_ROLE, RDFS_DOMAIN, RDFS_RANGE))
        rows = self.store.select(f"SELECT ?s ?p ?o WHERE {{ VALUES ?p {{ {preds} }} ?s ?p ?o }}")
        out = []
        for row in rows:
            s = row["s"]
            out.append((s.value if s.kind == "uri" else f"_:store:{s.value}", row["p"].value, row["o"].value))
        return out

    # --- roles -----------------------------------------------------------------------------------------------
    def role(self, relation: str) -> str | None:
        """The clinical role of a relation read subject -> object, if it has one."""
        return self._mapping.roles.get(relation)

    def relations_with_role(self, *roles: str) -> frozenset[str]:
        """Every relation IRI declared with one of ``roles``."""
        wanted = set(roles)
        return frozenset(r for r, role in self._mapping.roles.items() if role in wanted)

    @staticmethod
    def inverse(role: str) -> str:
        """The role that reads the same edge the other way ("treats" -> "treated_by")."""
        return ROLES[role].inverse

    def role_from(self, step: Step, iri: str) -> str | None:
        """The role of ``step`` read from the entity ``iri`` (one of its ends): a "treats" edge read from its
        object is "treated_by"."""
        role = self.role(step.relation.iri)
        if role is None:
            return None
        if step.subject.iri == iri:
            return role
        if step.object.iri == iri:
            return ROLES[role].inverse
        return None

    def end_kinds(self, relation: str) -> tuple[str | None, str | None]:
        """The kinds a relation implies for its subject and its object: from its role, else its domain/range."""
        role = self.role(relation)
        subject, obj = (ROLES[role].subject, ROLES[role].object) if role else (None, None)
        if subject is None:
            subject = self._declared_kind(self._mapping.domains.get(relation, ()))
        if obj is None:
            obj = self._declared_kind(self._mapping.ranges.get(relation, ()))
        return subject, obj

    def _declared_kind(self, classes: Iterable[str]) -> str | None:
        kinds = {self._mapping.class_kind[c] for c in classes if c in self._mapping.class_kind}
        return _best(kinds)

    # --- kinds -----------------------------------------------------------------------------------------------
    def kind(self, iri: str) -> str:
        return self.kinds([iri])[iri]

    def kinds(self, iris: Iterable[str]) -> dict[str, str]:
        """IRI -> kind for every IRI (``"concept"`` where nothing maps one), resolved in batches and cached."""
        wanted = list(dict.fromkeys(iris))
        todo = [i for i in wanted if i not in self._kinds]
        if todo:
            found = self._by_ancestors(todo)
            rest = [i for i in todo if i not in found]
            if rest:
                found.update(self._by_fsn(rest))
            rest = [i for i in todo if i not in found]
            if rest:
                found.update(self._by_edges(rest))
            for iri in todo:
                self._kinds[iri] = found.get(iri, CONCEPT)
        return {i: self._kinds[i] for i in wanted}

    def _by_ancestors(self, iris: list[str]) -> dict[str, str]:
        """The kind of the nearest ancestor (by rdf:type or rdfs:subClassOf, itself included) that has one."""
        class_kind = self._mapping.class_kind
        found: dict[str, str] = {}
        frontier = {i: {i} for i in iris}
        seen = {i: {i} for i in iris}
        for _ in range(_MAX_DEPTH):
            for iri, nodes in list(frontier.items()):
                kind = _best({class_kind[n] for n in nodes if n in class_kind})
                if kind is not None:
                    found[iri] = kind
                    del frontier[iri]
            if not frontier or self.store is None:
                break
            parents = self._parents_of({n for nodes in frontier.values() for n in nodes})
            for iri, nodes in list(frontier.items()):
                nxt = {p for n in nodes for p in parents.get(n, ())} - seen[iri]
                if not nxt:
                    del frontier[iri]
                    continue
                seen[iri] |= nxt
                frontier[iri] = nxt
        return found

    def _parents_of(self, iris: set[str]) -> dict[str, tuple[str, ...]]:
        assert self.store is not None
        todo = sorted(i for i in iris if i not in self._parents and not i.startswith("_:"))
        for chunk in _chunks(todo):
            values = " ".join(iri_ref(i) for i in chunk)
            rows = self.store.select(
                f"SELECT DISTINCT ?x ?c WHERE {{ VALUES ?x {{ {values} }} "
                f"?x {iri_ref(RDF_TYPE)}|{iri_ref(RDFS_SUBCLASS)} ?c FILTER(isIRI(?c)) }}")
            found: dict[str, list[str]] = {}
            for row in rows:
                found.setdefault(row["x"].value, []).append(row["c"].value)
            for iri in chunk:
                self._parents[iri] = tuple(sorted(found.get(iri, ())))
        return {i: self._parents.get(i, ()) for i in iris}

    def _by_fsn(self, iris: list[str]) -> dict[str, str]:
        tags = self._mapping.fsn_tags
        if self.store is None or not tags:
            return {}
        found: dict[str, str] = {}
        for chunk in _chunks(iris):
            values = " ".join(iri_ref(i) for i in chunk)
            rows = self.store.select(
                f"SELECT ?x ?n WHERE {{ VALUES ?x {{ {values} }} ?x {iri_ref(FULLY_SPECIFIED_NAME)} ?n }}")
            for row in rows:
                name = row["n"].value.rstrip()
                if name.endswith(")") and "(" in name:
                    kind = tags.get(name[name.rfind("(") + 1:-1].strip().lower())
                    if kind is not None:
                        found.setdefault(row["x"].value, kind)
        return found

    def _by_edges(self, iris: list[str]) -> dict[str, str]:
        """The kind most of an entity's edges imply through their relation's role or domain/range."""
        telling = {r for r in set(self._mapping.roles) | set(self._mapping.domains) | set(self._mapping.ranges)
                   if any(self.end_kinds(r))}
        if self.store is None or not telling:
            return {}
        rels = " ".join(iri_ref(r) for r in sorted(telling))
        votes: dict[str, dict[str, int]] = {}
        for chunk in _chunks(iris):
            values = " ".join(iri_ref(i) for i in chunk)
            rows = self.store.select(
                f"SELECT ?x ?p ?d (COUNT(*) AS ?n) WHERE {{ VALUES ?x {{ {values} }} VALUES ?p {{ {rels} }} "
                f"{{ ?x ?p ?o BIND(\"s\" AS ?d) }} UNION {{ ?o ?p ?x BIND(\"o\" AS ?d) }} }} GROUP BY ?x ?p ?d")
            for row in rows:
                subject_kind, object_kind = self.end_kinds(row["p"].value)
                kind = subject_kind if row["d"].value == "s" else object_kind
                if kind is not None:
                    tally = votes.setdefault(row["x"].value, {})
                    tally[kind] = tally.get(kind, 0) + int(row["n"].value)
        return {x: max(sorted(t, key=_rank), key=lambda k: t[k]) for x, t in votes.items()}

    def kinds_from_steps(self, iri: str, steps: Iterable[Step]) -> str | None:
        """The kind the given edges imply for ``iri`` (for entities the ontology leaves a bare concept)."""
        tally: dict[str, int] = {}
        for step in steps:
            subject_kind, object_kind = self.end_kinds(step.relation.iri)
            for node, kind in ((step.subject, subject_kind), (step.object, object_kind)):
                if kind is not None and node.iri == iri:
                    tally[kind] = tally.get(kind, 0) + 1
        return max(sorted(tally, key=_rank), key=lambda k: tally[k]) if tally else None


def _rank(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def _best(kinds: Iterable[str]) -> str | None:
    ordered = sorted(kinds, key=lambda k: (_rank(k), k))
    return ordered[0] if ordered else None


def _chunks(items: Sequence[str], size: int = _VALUES_CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class HoldsStore(Protocol):
    """A graph as the vocabulary needs it (any ``KnowledgeGraphLike``): its store."""

    @property
    def store(self) -> Store: ...


_CACHE: weakref.WeakKeyDictionary[Any, tuple[Any, ClinicalVocabulary]] = weakref.WeakKeyDictionary()


def vocabulary(kg: Graph | HoldsStore | Store, extra: Sequence[str | FsPath] = ()) -> ClinicalVocabulary:
    """The vocabulary of a knowledge graph (or store), cached until a load commits to the store or ``extra``
    changes."""
    from mirage_kg.index.caching import load_records

    store = kg if isinstance(kg, Store) else kg.store
    key = (load_records(store), tuple(str(f) for f in extra))
    cached = _CACHE.get(store)
    if cached is not None and cached[0] == key:
        return cached[1]
    vocab = ClinicalVocabulary(store, extra)
    _CACHE[store] = (key, vocab)
    return vocab


clinical_vocabulary = vocabulary  # the name ``mirage_kg`` exports
