"""The graph API the reasoner and the CLI share: entity lookup, anchor (an entity's neighbourhood), bridge (the
paths between two entities), verbalisation and path checks, the same over the embedded store and any endpoint.

A *fact* is an edge between two concepts: an IRI object, not ``rdf:type`` nor a label, outside the schema and
manifest graphs (as in ``mirage_kg.graph.stats``); relation and class declarations are not concepts.

``Graph`` reads a store only through the ``Store`` contract; the entity linker and the retriever are built on top of
it (``mirage_kg.linking.linker``, ``mirage_kg.retrieval.retriever``) and joined to it by ``mirage_kg.kg.KnowledgeGraph``.
Edge directions have one vocabulary everywhere: ``"forward"`` (the edge leaves the node it is read from) and
``"backward"``."""

from __future__ import annotations

import math
import os
import string
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from mirage_kg.errors import InputError, UnknownEntityError
from mirage_kg.model.records import Entity, Path, Relation, Step
from mirage_kg.model.namespaces import (MKG, MKG_RELATION, OWL, RDF, RDF_TYPE, RDFS_LABEL, SCHEMA_GRAPH, SKOS_ALT,
                                  SKOS_DEFINITION, SKOS_NOTATION, SKOS_PREF, compress, expand, is_identifier)
from mirage_kg.index.caching import cache_folder, load_records, store_fingerprint
from mirage_kg.store.base import LOADED_AT, LOADED_FROM, MANIFEST_GRAPH, PENDING, Store
from mirage_kg.store.sparql_text import bounded_path_ask
from mirage_kg.model.terms import iri_ref, literal

if TYPE_CHECKING:
    from mirage_kg.index.adjacency import AdjacencyFile
    from mirage_kg.graph.concept_record import ConceptRecord, FactPage, Page
    from mirage_kg.graph.concepts import ConceptGroups
    from mirage_kg.index.degree import DiskDegrees, MemoryDegrees

    DegreeTable = DiskDegrees | MemoryDegrees

#: predicates that never make a fact (their objects are classes, literals or bookkeeping)
NON_FACT_PREDICATES: frozenset[str] = frozenset({
    RDF_TYPE, RDFS_LABEL, SKOS_PREF, SKOS_ALT, SKOS_NOTATION, SKOS_DEFINITION, LOADED_FROM, LOADED_AT, PENDING,
    MKG + "inverseLabel", MKG + "forwardTemplate", MKG + "backwardTemplate",
    # reification of annotated edges (HPO annotations): the node describes an edge, it is not one
    RDF + "subject", RDF + "predicate", RDF + "object",
})
#: types that mark a declaration (a relation, property or ontology), never a concept
DECLARATION_TYPES: tuple[str, ...] = (
    MKG_RELATION, RDF + "Property", OWL + "ObjectProperty", OWL + "DatatypeProperty", OWL + "AnnotationProperty",
    OWL + "TransitiveProperty", OWL + "SymmetricProperty", OWL + "FunctionalProperty", OWL + "Ontology",
)
INVERSE_LABEL = MKG + "inverseLabel"
FORWARD_TEMPLATE = MKG + "forwardTemplate"
BACKWARD_TEMPLATE = MKG + "backwardTemplate"

Direction = Literal["forward", "backward"]
#: what ``anchor(direction=...)`` accepts (the older "out"/"in" spellings too) -> the one vocabulary
DIRECTIONS = {"forward": "forward", "out": "forward", "backward": "backward", "in": "backward", "both": "both"}
_VALUES_CHUNK = 400  # IRIs per VALUES block: keeps queries well under any endpoint's size limit
#: A node with more fact edges than this (the degree index says) is a hub: anchor and the retriever read its edges
#: relation by relation, at most ``HUB_EDGES_PER_RELATION`` each way (in the store's index order), so their cost
#: stops growing with the hub's degree; bridge stays exact (its search starts from the other end).
HUB_DEGREE = 10_000  # the default KG's largest node has 4,199
HUB_EDGES_PER_RELATION = 250
#: bridge's search is exact (every engine gives the same paths) except in one case: extending a partial path *past*
#: a node with more than ``PATH_HUB_DEGREE`` fact edges, it takes at most ``PATH_HUB_EDGES`` of them per relation
#: and direction (the first in the store's index order, so the same every time), and the answer says so
#: (``BridgePaths.capped``; ``hub_edges=0`` lifts it). A path that only enters or leaves a hub is found by lookups
#: from the other side, never by reading the hub's whole neighbourhood, and a hub at either end keeps all its
#: edges. The search extends the other side instead while that costs at most ``2 * PATH_HUB_DEGREE`` partial
#: paths, so at most 3 hops it is cut only beside a large end. Merged concepts are walked uncapped. No shipped KG
#: reaches it (the default KG's largest node has 4,199 edges, EMCKG's 76).
PATH_HUB_DEGREE = 5_000
PATH_HUB_EDGES = 100
#: a hub whose capped edges are in hand is asked about at most this many other nodes one pair at a time (exact)
_HUB_PAIR_LOOKUPS = 4_096
DEGREE_INDEX_ON_DISK = 200_000  # triples past which the degree index is a file beside the store, not a dict
_SPARQL_RECHECK_S = 2.0  # how often a remote store's manifest is re-read to notice loads

_NOT_FACT = ", ".join(iri_ref(p) for p in sorted(NON_FACT_PREDICATES))
_SYSTEM_GRAPHS = f"{iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}"


# --- ids ---------------------------------------------------------------------------------------------------------------

def checked_iri(iri: str) -> str:
    """``iri`` if it is an absolute IRI that can be written into a query; else a ``MirageError``."""
    import pyoxigraph as ox

    iri_ref(iri)  # QueryError for characters that would end or corrupt the token
    try:
        ox.NamedNode(iri)  # RFC 3987 syntax
    except ValueError as exc:
        raise InputError(f"{iri!r} is not a valid absolute IRI ({exc}); give a CURIE with a known prefix or a "
                         "full IRI") from None
    return iri


# --- labels and relation metadata ---------------------------------------------------------------------------------

def label_rank(lang: str | None) -> tuple[int, str]:
    """How a label's language ranks (smaller first): English, then untagged, then any, by tag; then the text."""
    low = (lang or "").lower()
    return (0 if low == "en" or low.startswith("en-") else 1 if not low else 2), low


def pick_label(values: Iterable[tuple[str, str | None]]) -> str | None:
    """The preferred one of several ``(text, language)`` labels: English, then untagged, then any; ties by text."""
    best = min(values, key=lambda item: (*label_rank(item[1]), item[0]), default=None)
    return best[0] if best is not None else None


#: the label predicates ``Graph.labels`` reads, first that a node has (its values then chosen by ``pick_label``)
LABEL_PREDICATES = (SKOS_PREF, RDFS_LABEL)


def readable_name(iri: str) -> str:
    """A relation's fallback label: its local name with ``_`` and camelCase spaced, or its CURIE."""
    import re

    curie = compress(iri)
    local = curie.split(":", 1)[1] if curie != iri else re.split(r"[#/]", iri.rstrip("/#"))[-1]
    if not re.search(r"[A-Za-z]{2}", local):
        return curie
    local = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", local.replace("_", " ").replace("-", " "))
    return " ".join(local.split()).lower() if local.strip() else curie


def _safe_template(template: str | None) -> str | None:
    """A template is used only if its placeholders are exactly ``{subject}``/``{object}``: data must not steer
    ``str.format`` (attribute access, positional fields) or make it raise."""
    if not template:
        return None
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return None
    if any(name not in ("subject", "object") or spec or conv for name, spec, conv in fields):
        return None
    return template


def _guess_inverse(label: str) -> str | None:
    """An inverse reading for a label with no declared one: "has part" -> "is part of", "part of" -> "has part"."""
    words = label.split()
    if len(words) >= 2 and words[0].lower() == "has":
        return "is " + " ".join(words[1:]) + " of"
    if len(words) >= 3 and words[0].lower() == "is" and words[-1].lower() == "of":
        return "has " + " ".join(words[1:-1])
    if len(words) >= 2 and words[-1].lower() == "of" and words[0].lower() not in ("is", "are"):
        return "has " + " ".join(words[:-1])
    return None


# --- the per-store state that changes only when a load commits -----------------------------------------------------

class Neighbour(NamedTuple):
    """A fact edge seen from one node: the relation, which way it runs from that node, and the node at its other
    end. A named tuple so adjacency lists unpack as ``(relation, direction, node)``."""

    relation: str
    direction: Direction
    node: str


class BridgePaths(list):  # type: ignore[type-arg]
    """``bridge``'s paths (a list of ``Path``), and ``capped``: (hub IRI, its fact edges) for each hub the search
    extended past along only ``hub_edges`` of its edges per relation and direction, so that paths through its other
    edges may be missing; empty when the search was exact. ``hub_edges=0`` walks every edge."""

    capped: tuple[tuple[str, int], ...] = ()
    hub_edges: int = 0


@dataclass
class _HubWalk:
    """One bridge call's hub cap (``limit`` edges per relation and direction; 0: none), the hubs whose capped
    edges are in hand, and those the search extended past along them (``cut``)."""

    limit: int
    capped: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)


@dataclass
class _State:
    token: tuple[tuple[str, ...], ...]
    non_concepts: frozenset[str]
    relations: dict[str, Relation] = field(default_factory=dict)
    declared_relations: dict[str, str] | None = None  # lower-cased label/local name -> IRI
    degrees: DegreeTable | None = None  # embedded: the whole degree index (on disk past 200k triples)
    degrees_version: int | None = None  # the store's write count when ``degrees`` was opened
    degree_file_sought: bool = False  # whether labels looked for an index file already built for this state
    hub_anchors_sought: bool = False  # whether the degree index's file was given its hubs' anchors (if it lacked them)
    adjacency: AdjacencyFile | None = None  # every node's edges, in a file beside the degree index's (bridge reads it)
    adjacency_sought: bool = False  # whether ``adjacency`` was looked for (and built where missing) for this state
    degree_cache: dict[str, int] = field(default_factory=dict)  # remote: degrees fetched so far
    groups: ConceptGroups | None = None  # concepts merged by exact match (mirage_kg.graph.concepts)
    concept_count: int | None = None  # nodes with facts: the N of the specificity (IDF) ranking
    hub_relations: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # hub -> (relation, direction)
    #: (hub, relations) -> its capped edges for bridge (``PATH_HUB_EDGES``)
    path_hub_edges: dict[tuple[str, frozenset[str] | None], list[Neighbour]] = field(default_factory=dict)


class Graph:
    """Graph queries over a ``Store``: entities, labels, relations, neighbours, anchor, bridge, path checks.
    ``cache_dir`` is where caches built from the store (the degree index) go when the store has no folder.
    ``merge_equivalents`` (default on) makes anchor and bridge treat a concept and its exact matches (in other
    sources) as one node."""

    def __init__(self, store: Store, *, cache_dir: FsPath | None = None, merge_equivalents: bool = True) -> None:
        self.store = store
        self.merge_equivalents = merge_equivalents
        self.cache_dir = FsPath(cache_dir) if cache_dir is not None else None
        self._state_: _State | None = None
        self._checked_at = 0.0
        self._checked_version: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.location})"

    # --- state ---------------------------------------------------------------------------------------------------
    def _state(self) -> _State:
        """The cached schema-level state, rebuilt when a load has committed since (remote: checked every 2 s)."""
        now = time.monotonic()
        state = self._state_
        version = self.store.version
        if state is not None:
            if version is not None and version == self._checked_version:  # nothing written since: no manifest read
                return state
            if not self.store.indexed and now - self._checked_at < _SPARQL_RECHECK_S:
                return state
        token = load_records(self.store)
        self._checked_at, self._checked_version = now, version
        if state is None or state.token != token:
            state = self._state_ = _State(token=token, non_concepts=self._find_non_concepts())
        return state

    @property
    def token(self) -> tuple[tuple[str, ...], ...]:
        """The manifest's load records: a new value after every committed load (caches built on the graph key
        on it)."""
        return self._state().token

    def refresh(self) -> None:
        """Forget cached state (for changes made with raw updates rather than ``load``)."""
        self._state_ = None

    def non_concepts(self) -> frozenset[str]:
        """IRIs that are relation, property, class-schema or ontology declarations rather than concepts."""
        return self._state().non_concepts

    def _find_non_concepts(self) -> frozenset[str]:
        types = " ".join(iri_ref(t) for t in DECLARATION_TYPES)
        rows = self.store.select_all(
            f"SELECT DISTINCT ?x WHERE {{ {{ GRAPH {iri_ref(SCHEMA_GRAPH)} {{ ?x ?p ?o }} }} UNION "
            f"{{ GRAPH ?g {{ ?x {iri_ref(RDF_TYPE)} ?t }} VALUES ?t {{ {types} }} }} FILTER(isIRI(?x)) }}")
        return frozenset(r["x"].value for r in rows)

    def is_concept(self, iri: str) -> bool:
        return iri not in self._state().non_concepts

    # --- entities ------------------------------------------------------------------------------------------------
    def entity(self, ref: str | Entity) -> Entity:
        """A CURIE, an IRI or an exact label -> the ``Entity``; ``UnknownEntityError`` when the graph lacks it."""
        if isinstance(ref, Entity):
            return ref
        text = ref.strip()
        if not text:
            raise UnknownEntityError(ref, "an empty name links to nothing")
        if is_identifier(text):
            iri = checked_iri(expand(text))
            on_file = self._labels_on_file([iri])  # a node the degree index holds exists: no read of the store
            if iri not in on_file and not self._exists(iri):
                raise UnknownEntityError(ref)
            if iri in self._state().non_concepts:
                raise UnknownEntityError(ref, "it is a relation or class declaration, not a concept")
            return Entity(iri, on_file[iri] or compress(iri) if iri in on_file else self.labels([iri])[iri])
        found = self.entities_named(text)
        if not found:
            raise UnknownEntityError(ref)
        return found[0]

    def entities_named(self, text: str) -> list[Entity]:
        """Concepts whose preferred label (or rdfs:label, or synonym) is exactly ``text``, best kind first."""
        labels = [literal(text), literal(text, lang="en")]
        rows = self.store.select(
            f"SELECT DISTINCT ?e ?k WHERE {{ VALUES ?l {{ {' '.join(labels)} }} "
            f"VALUES ?k {{ {iri_ref(SKOS_PREF)} {iri_ref(RDFS_LABEL)} {iri_ref(SKOS_ALT)} }} "
            f"GRAPH ?g {{ ?e ?k ?l }} FILTER(isIRI(?e)) }}")
        order = {SKOS_PREF: 0, RDFS_LABEL: 1, SKOS_ALT: 2}
        non = self._state().non_concepts
        hits = sorted({(order[r["k"].value], compress(r["e"].value), r["e"].value) for r in rows
                       if r["e"].value not in non})
        seen: list[str] = []
        for _, _, iri in hits:
            if iri not in seen:
                seen.append(iri)
        names = self.labels(seen)
        return [Entity(iri, names[iri]) for iri in seen]

    def _exists(self, iri: str) -> bool:
        if self.store.indexed:
            return (next(self.store.quads(iri), None) is not None
                    or next(self.store.quads(obj=iri), None) is not None)
        ref = iri_ref(iri)
        return self.store.ask(f"ASK {{ {{ GRAPH ?g {{ {ref} ?p ?o }} }} UNION {{ GRAPH ?g {{ ?s ?p {ref} }} }} }}")

    def labels(self, iris: Iterable[str]) -> dict[str, str]:
        """Preferred labels: skos:prefLabel (English first), else rdfs:label, else the CURIE. The embedded store's
        nodes with facts have theirs in the degree index's file once it is built (``_labels_on_file``)."""
        wanted = list(dict.fromkeys(iris))
        on_file = self._labels_on_file(wanted)
        pref: dict[str, list[tuple[str, str | None]]] = {}
        plain: dict[str, list[tuple[str, str | None]]] = {}
        if self.store.indexed:  # point lookups in the index beat one VALUES query
            for iri in wanted:
                if iri in on_file:
                    continue
                for predicate, bucket in zip(LABEL_PREDICATES, (pref, plain)):
                    found = list(self.store.literals(iri, predicate))
                    if found:
                        bucket[iri] = found
                    if iri in pref:
                        break
        else:
            for iri, values in self._literal_values(wanted, (SKOS_PREF, RDFS_LABEL)).items():
                if SKOS_PREF in values:
                    pref[iri] = values[SKOS_PREF]
                if RDFS_LABEL in values:
                    plain[iri] = values[RDFS_LABEL]
        out = {}
        for iri in wanted:
            if iri in on_file:
                out[iri] = on_file[iri] or compress(iri)
            else:
                out[iri] = pick_label(pref.get(iri) or plain.get(iri) or []) or compress(iri)
        return out

    def _labels_on_file(self, iris: Sequence[str]) -> dict[str, str | None]:
        """The labels the degree index's file holds for ``iris`` (None: no label literal), when the file was
        built for this store state and nothing was written through this store since it was opened (a raw write
        this process made is read live, as before the file); an IRI not on file is absent. A file left by an
        earlier process is opened without building one; a store with no index file gives nothing."""
        table = self._current_degree_file()
        return table.labels(iris) if table is not None else {}

    def _current_degree_file(self) -> DegreeTable | None:
        """The degree index for what it says beyond degrees (labels, whether any annotation exists): where it
        was built or found for this store state and nothing was written through the store since; else None."""
        if not self.store.indexed:
            return None
        state = self._state()
        if state.degrees is None and not state.degree_file_sought:
            state.degree_file_sought = True
            state.degrees, state.degrees_version = self._degree_index(build=False), self.store.version
        if state.degrees is None or state.degrees_version != self.store.version:
            return None
        self._with_hub_anchors(state)
        self._with_adjacency(state)
        return state.degrees

    def _with_hub_anchors(self, state: _State) -> None:
        """Once per state, the first time its degree index is used: file the hubs' anchors if the file lacks them
        (they are ranked through this graph, so the index is in place first)."""
        if not state.hub_anchors_sought and state.degrees is not None and state.degrees_version == self.store.version:
            state.hub_anchors_sought = True
            self._file_hub_anchors(state.degrees)

    def _with_adjacency(self, state: _State) -> None:
        """Once per state, the first time its degree index file is used: open the adjacency file built beside it
        for this store state (``mirage_kg.index.adjacency``), building it first where it is missing and the folder
        can be written (one pass over the store, like the degree index's)."""
        from mirage_kg.index import adjacency as adjacency_index
        from mirage_kg.index.degree import DiskDegrees
        from mirage_kg.index.fact_scan import scan_facts

        table = state.degrees
        if state.adjacency_sought or not isinstance(table, DiskDegrees) or state.degrees_version != self.store.version:
            return
        state.adjacency_sought = True
        fingerprint = table.fingerprint
        state.adjacency = adjacency_index.open_beside(table.path, fingerprint)
        # a degree file built before the adjacency file existed (or by a read-only process): its edges alone
        if state.adjacency is None and self._may_build_adjacency(table.path) and fingerprint is not None and \
                adjacency_index.build_beside(table.path, fingerprint, scan_facts(self.store, table.predicates)):
            state.adjacency = adjacency_index.open_beside(table.path, fingerprint)

    def _may_build_adjacency(self, degree_file: FsPath) -> bool:
        """Whether this process builds an adjacency file beside ``degree_file``: a store opened read-only builds
        nothing beside it (a profiling or serving process must not write there), nor where the folder is not
        writable."""
        return not self.store.read_only and os.access(degree_file.parent, os.W_OK)

    def _adjacency_file(self) -> AdjacencyFile | None:
        """The adjacency file while it is current: built for this store state beside a degree index file that
        is, with no write through this store since it was opened (a raw write is read live, as labels are)."""
        if self._current_degree_file() is None:
            return None
        return self._state().adjacency

    def _literal_values(self, iris: Sequence[str], keys: Sequence[str], few_quads: bool = False
                        ) -> dict[str, dict[str, list[tuple[str, str | None]]]]:
        """iri -> predicate -> [(value, language)] of the literals each IRI has for ``keys``, in any graph.
        ``few_quads``: each IRI is the subject of a few quads (a relation's declaration), read in one scan of the
        index rather than one lookup per key (each a few random reads while the store is cold); the same values
        in the same order (the index orders a subject's quads by predicate, then object)."""
        found: dict[str, dict[str, list[tuple[str, str | None]]]] = {}
        if self.store.indexed and few_quads:
            wanted = set(keys)
            for iri in dict.fromkeys(iris):
                for quad in self.store.quads(iri):
                    if quad.predicate.value in wanted and quad.object.kind == "literal":
                        found.setdefault(iri, {}).setdefault(quad.predicate.value, []).append(
                            (quad.object.value, quad.object.lang))
            return found
        if self.store.indexed:
            # point lookups: Oxigraph plans the VALUES query below as a scan of every quad of each key (every
            # label in the store: a second at 2M quads, the first anchor of a process waited for it)
            for iri in dict.fromkeys(iris):
                for key in keys:
                    values = list(self.store.literals(iri, key))
                    if values:
                        found.setdefault(iri, {})[key] = values
            return found
        for chunk in _chunks(iris):
            rows = self.store.select(
                f"SELECT ?s ?k ?v WHERE {{ VALUES ?s {{ {' '.join(iri_ref(i) for i in chunk)} }} "
                f"VALUES ?k {{ {' '.join(iri_ref(k) for k in keys)} }} GRAPH ?g {{ ?s ?k ?v }} "
                f"FILTER(isLiteral(?v)) }}")
            for r in rows:
                found.setdefault(r["s"].value, {}).setdefault(r["k"].value, []).append((r["v"].value, r["v"].lang))
        return found

    # --- relations -----------------------------------------------------------------------------------------------
    def relation(self, iri: str) -> Relation:
        """A relation with its label, inverse label and templates from the schema; falls back to its label or
        local name (and a guessed inverse reading for "has X" / "X of" labels)."""
        full = checked_iri(expand(iri) if not iri.startswith(("http://", "https://", "urn:")) else iri)
        return self.relations([full])[full]

    def relations(self, iris: Iterable[str]) -> dict[str, Relation]:
        state = self._state()
        wanted = [i for i in dict.fromkeys(iris)]
        missing = [i for i in wanted if i not in state.relations]
        table = self._current_degree_file() if missing else None
        if table is not None:
            # every fact relation with the first ones asked for: each is a few point lookups in the store, cold
            # at first (~10 ms each at full size), which anchors seeing a relation for the first time each waited
            missing += [p for p in table.predicates if p not in state.relations and p not in missing]
        if missing:
            meta = self._literal_values(
                missing, (RDFS_LABEL, SKOS_PREF, INVERSE_LABEL, FORWARD_TEMPLATE, BACKWARD_TEMPLATE), few_quads=True)
            for iri in missing:
                m = meta.get(iri, {})
                label = pick_label(m.get(RDFS_LABEL) or m.get(SKOS_PREF) or []) or readable_name(iri)
                inverse = pick_label(m.get(INVERSE_LABEL, [])) or _guess_inverse(label)
                state.relations[iri] = Relation(
                    iri, label, inverse,
                    _safe_template(pick_label(m.get(FORWARD_TEMPLATE, []))),
                    _safe_template(pick_label(m.get(BACKWARD_TEMPLATE, []))),
                )
        return {i: state.relations[i] for i in wanted}

    def resolve_relations(self, relations: Sequence[str] | None) -> frozenset[str] | None:
        """Relation CURIEs, IRIs, labels ("has symptom") or local names ("has_symptom") -> their IRIs (None: all);
        ``InputError`` naming one the graph lacks."""
        return self._resolve_relations(relations)

    def _resolve_relations(self, relations: Sequence[str] | None) -> frozenset[str] | None:
        """CURIEs, IRIs, labels ("has symptom") or local names ("has_symptom") -> relation IRIs."""
        if relations is None:
            return None
        if isinstance(relations, str):
            relations = [relations]
        out = set()
        for rel in relations:
            if is_identifier(rel):
                out.add(checked_iri(expand(rel)))
                continue
            known = self._declared_relations()
            key = " ".join(rel.replace("_", " ").lower().split())
            if key not in known:
                names = ", ".join(sorted({compress(v) for v in known.values()}))
                raise InputError(f"unknown relation {rel!r}; give a CURIE or IRI, or one of: {names}")
            out.add(known[key])
        return frozenset(out)

    def _declared_relations(self) -> dict[str, str]:
        state = self._state()
        if state.declared_relations is None:
            rows = self.store.select(
                f"SELECT DISTINCT ?r WHERE {{ {{ GRAPH ?g {{ ?r {iri_ref(RDF_TYPE)} ?t }} "
                f"VALUES ?t {{ {iri_ref(MKG_RELATION)} {iri_ref(OWL + 'ObjectProperty')} "
                f"{iri_ref(RDF + 'Property')} }} }} "
                f"UNION {{ SELECT DISTINCT ?r WHERE {{ GRAPH ?g {{ ?s ?r ?o }} FILTER(isIRI(?o)) }} LIMIT 5000 }} }}")
            iris = sorted({r["r"].value for r in rows} - NON_FACT_PREDICATES)
            table: dict[str, str] = {}
            for iri, rel in sorted(self.relations(iris).items(), reverse=True):
                for name in (rel.label, readable_name(iri), compress(iri).split(":", 1)[-1]):
                    table[" ".join(name.replace("_", " ").lower().split())] = iri
            state.declared_relations = table
        return state.declared_relations

    # --- adjacency -----------------------------------------------------------------------------------------------
    def neighbours(self, iri: str, relations: frozenset[str] | None = None,
                   per_relation: int | None = None) -> list[Neighbour]:
        """The fact edges at ``iri``, each seen from it: distinct, sorted, a self-loop once (as forward). With
        ``per_relation``, a hub (over ``HUB_DEGREE`` edges) gives at most that many per relation and direction."""
        if per_relation is not None and self.degrees([iri])[iri] > HUB_DEGREE:
            return self._hub_neighbours(iri, relations, per_relation)
        filed = self._state().degrees
        if filed is not None and filed.is_filed(iri):  # a well-connected node: its edges from the index's file
            return sorted(Neighbour(p, d, o) for p, d, o in filed.filed_links(iri)  # type: ignore[union-attr]
                          if relations is None or p in relations)
        return self._stored_neighbours(iri, relations)

    def _stored_neighbours(self, iri: str, relations: frozenset[str] | None) -> list[Neighbour]:
        """``neighbours`` read from the store's index."""
        non = self._state().non_concepts
        seen: set[tuple[str, str, str]] = set()  # plain tuples, made Neighbours once sorted: a named tuple's
        # constructor is a Python call per edge, on anchor's hot path
        # a few relations: an index range each, instead of every edge at the node
        ranges = sorted(relations) if relations is not None and len(relations) <= 8 else [None]
        for rel in ranges:
            for p, o in self.store.links(iri, "forward", rel):
                if p not in NON_FACT_PREDICATES and o not in non and (relations is None or p in relations):
                    seen.add((p, "forward", o))
            for p, o in self.store.links(iri, "backward", rel):
                if o != iri and p not in NON_FACT_PREDICATES and o not in non and (relations is None or p in relations):
                    seen.add((p, "backward", o))
        make = Neighbour._make
        return [make(edge) for edge in sorted(seen)]

    def _hub_neighbours(self, iri: str, relations: frozenset[str] | None, per_relation: int) -> list[Neighbour]:
        """A hub's fact edges, at most ``per_relation`` per (relation, direction): the relations at the hub come
        from one query the engine answers natively (no edge reaches Python), then each relation's edges are read
        until the cap."""
        non = self._state().non_concepts
        found: set[Neighbour] = set()
        for p, direction in self._hub_relations(iri):
            if p in NON_FACT_PREDICATES or (relations is not None and p not in relations):
                continue
            taken: set[Neighbour] = set()
            for _, other in self.store.links(iri, direction, p):
                if other in non or (direction == "backward" and other == iri):
                    continue
                taken.add(Neighbour(p, direction, other))  # type: ignore[arg-type]
                if len(taken) >= per_relation:
                    break
            found |= taken
        return sorted(found)

    def _hub_relations(self, iri: str) -> list[tuple[str, str]]:
        """(relation, direction) pairs at a hub, cached per graph state: on the embedded store one index probe per
        fact predicate and direction (the degree index lists the predicates), else one query the engine answers
        natively (no edge reaches Python)."""
        state = self._state()
        if iri not in state.hub_relations:
            if self.store.indexed:
                state.hub_relations[iri] = sorted(
                    (p, direction) for p in self._degree_table().predicates for direction in ("forward", "backward")
                    if next(self.store.links(iri, direction, p), None) is not None)
                return state.hub_relations[iri]
            node = iri_ref(iri)
            rows = self.store.select(
                f"SELECT DISTINCT ?p ?dir WHERE {{ {{ GRAPH ?g {{ {node} ?p ?x }} BIND(1 AS ?dir) }} UNION "
                f"{{ GRAPH ?g {{ ?x ?p {node} }} BIND(2 AS ?dir) }} FILTER(isIRI(?x)) }}")
            state.hub_relations[iri] = sorted({(r["p"].value, "forward" if r["dir"].value == "1" else "backward")
                                               for r in rows})
        return state.hub_relations[iri]

    def degrees(self, iris: Iterable[str]) -> dict[str, int]:
        """Fact degree of each entity: distinct fact triples it takes part in (a self-loop counts twice)."""
        wanted = list(dict.fromkeys(iris))
        state = self._state()
        if self.store.indexed:  # the whole index in one pass, cached; an endpoint is asked per batch
            found = self._degree_table().many(wanted)
            return {i: found.get(i, 0) for i in wanted}
        missing = [i for i in wanted if i not in state.degree_cache]
        for chunk in _chunks(missing):
            rows = self.store.select(
                f"SELECT ?n (COUNT(*) AS ?d) WHERE {{ SELECT DISTINCT ?n ?dir ?p ?x WHERE {{ "
                f"VALUES ?n {{ {' '.join(iri_ref(i) for i in chunk)} }} "
                f"{{ GRAPH ?g {{ ?n ?p ?x }} BIND(1 AS ?dir) }} UNION {{ GRAPH ?g {{ ?x ?p ?n }} BIND(2 AS ?dir) }} "
                f"FILTER(isIRI(?x) && ?p NOT IN ({_NOT_FACT})) }} }} GROUP BY ?n")
            got = {r["n"].value: int(r["d"].value) for r in rows}
            for i in chunk:
                state.degree_cache[i] = got.get(i, 0)
        return {i: state.degree_cache[i] for i in wanted}

    _DEGREE_QUERY = (
        f"SELECT ?n (COUNT(*) AS ?d) WHERE {{ {{ SELECT DISTINCT ?s ?p ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }} "
        f"FILTER(isIRI(?o) && ?p NOT IN ({_NOT_FACT})) }} }} VALUES ?pos {{ 1 2 }} "
        f"BIND(IF(?pos = 1, ?s, ?o) AS ?n) }} GROUP BY ?n")

    def _degree_table(self) -> DegreeTable:
        """The embedded store's degree index (``mirage_kg.index.degree``), built on first use."""
        state = self._state()
        if state.degrees is None:
            state.degrees, state.degrees_version = self._degree_index(), self.store.version
        self._with_hub_anchors(state)
        self._with_adjacency(state)
        return state.degrees

    def _degree_index(self, build: bool = True) -> DegreeTable | None:
        """Every entity's degree in one native pass over the store; past 200k triples kept in a SQLite file
        beside the store, keyed by the store's fingerprint (built once; a query process holds none of it).
        ``build=False``: only a file already built for this store state, else None."""
        from mirage_kg.index import adjacency as adjacency_index, degree as degree_index
        from mirage_kg.index.fact_scan import scan_facts

        def rows(predicates: list[str]) -> Iterable[tuple[str, int]]:
            return degree_index.degree_rows(self.store, predicates, self._DEGREE_QUERY)

        # where the store names its content without a count (on disk), a cached file is looked for first and the
        # store's size is bounded only when building; else the count that keys the cache decides too
        keyed = self.store.content_key().key is not None
        if not build and not keyed:
            return None  # a file is found only by the store's own key (a count would read every quad)
        size = None if keyed else self.store.triple_count()
        fingerprint = store_fingerprint(self.store, size)
        on_disk = size > DEGREE_INDEX_ON_DISK if size is not None else True
        folder = cache_folder(self.store, fingerprint, self.cache_dir) if on_disk else None
        path = folder / "degrees.sqlite" if folder is not None else None
        if path is not None:
            found = degree_index.open_on_disk(path, fingerprint)
            if found is not None or not build:
                return found
            if size is None and not self._holds_more_than(DEGREE_INDEX_ON_DISK):
                folder = path = None
        if not build:
            return None
        predicates = degree_index.fact_predicates(self.store, NON_FACT_PREDICATES)
        if folder is None or path is None:
            return degree_index.in_memory(rows(predicates), predicates)
        (folder / "degrees.json").unlink(missing_ok=True)  # the dict this file replaces (before this file)
        # one pass over the store builds both files a query reads: this one and the adjacency file beside it
        scan = scan_facts(self.store, predicates, LABEL_PREDICATES, label_rank)
        table = degree_index.build_on_disk(path, fingerprint, scan,
                                           lambda: degree_index.in_memory(scan.degree_rows(), predicates),
                                           self._state().non_concepts, self._holds_annotation_records())
        if isinstance(table, degree_index.DiskDegrees) and self._may_build_adjacency(path):
            adjacency_index.build_beside(path, fingerprint, scan)
        return table

    def _holds_annotation_records(self) -> bool:
        """Whether any quad names an annotated edge's end (``rdf:subject`` / ``rdf:object``, what
        ``ranking.annotation_frequencies`` walks from a concept): two index probes."""
        return any(next(self.store.quads(None, RDF + end, None), None) is not None for end in ("subject", "object"))

    def _holds_more_than(self, count: int) -> bool:
        """Whether the store holds more than ``count`` quads, reading at most that many (not a whole count)."""
        rows = self.store.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ SELECT * WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }} "
                                 f"LIMIT {count + 1} }}")
        return int(rows[0]["n"].value) > count

    # --- merged concepts and specificity ------------------------------------------------------------------------
    @property
    def groups(self) -> ConceptGroups:
        """The concepts merged by ``skos:exactMatch`` (empty when ``merge_equivalents`` is off)."""
        state = self._state()
        if state.groups is not None:  # anchor asks several times a call: no import statement each time
            return state.groups
        from mirage_kg.graph.concepts import ConceptGroups, exact_match_pairs

        if not self.merge_equivalents:
            state.groups = ConceptGroups()
        else:
            state.groups = ConceptGroups.from_pairs(exact_match_pairs(self.store, state.non_concepts))
        return state.groups

    def same_as(self, entity: str | Entity) -> list[Entity]:
        """The other members of ``entity``'s merged concept (its exact matches across sources), by id."""
        center = self.entity(entity)
        others = [i for i in self.groups.of(center.iri) if i != center.iri]
        names = self.labels(others)
        return [Entity(i, names[i]) for i in others]

    # --- a concept's page (mirage_kg.graph.concept_record) ---------------------------------------------------------
    def concept(self, entity: str | Entity, limit: int = 20) -> ConceptRecord:
        """What the concept's page shows: definition, synonyms, cross-references, types, parents, the first
        ``limit`` children and annotations (frequency, evidence, references), its one fact count and that count
        split by relation, its sources, and which sections its sources give nothing for."""
        from mirage_kg.graph.concept_record import describe

        return describe(self, self.entity(entity), limit)

    def concept_facts(self, entity: str | Entity, relation: str | None = None, direction: str = "both",
                      offset: int = 0, limit: int = 50) -> FactPage:
        """A page of the concept's facts (of one relation and direction when given), with their counts."""
        from mirage_kg.graph.concept_record import facts_page

        return facts_page(self, self.entity(entity), relation, direction, offset, limit)

    def concept_children(self, entity: str | Entity, offset: int = 0, limit: int = 20) -> Page:
        """A page of the concept's direct subclasses, by label, with their count."""
        from mirage_kg.graph.concept_record import children_page

        return children_page(self, self.entity(entity), offset, limit)

    def concept_annotations(self, entity: str | Entity, offset: int = 0, limit: int = 20) -> Page:
        """A page of the annotations on the concept's edges (HPOA frequency, evidence, references), with their
        count."""
        from mirage_kg.graph.concept_record import annotations_page

        return annotations_page(self, self.entity(entity), offset, limit)

    def walk(self, iri: str, relations: frozenset[str] | None = None,
             per_relation: int | None = None) -> list[tuple[str, str, str, str, str]]:
        """Fact edges at ``iri``'s node, a merged concept taken as one: (relation, "forward"|"backward", the
        other node, stored subject, stored object). Edges inside a group (its exact matches) are identity, not
        facts; one stored edge per (relation, direction, other node); a fact stored both ways (as EMCKG often
        does) is one fact, its forward copy."""
        groups = self.groups
        merged = groups.representative
        if iri not in merged:  # a concept merged with none (every node of a store without exact matches)
            edges = self.neighbours(iri, relations, per_relation)
            if not any(n in merged for _, _, n in edges):  # nor are its neighbours
                return _as_stored(iri, edges)
        node = groups.rep(iri)
        found: dict[tuple[str, str, str], tuple[str, str]] = {}
        for member in groups.of(node):
            for p, d, n in self.neighbours(member, relations, per_relation):
                other = groups.rep(n)
                if other == node:
                    continue
                key = (p, d, other)
                real = (member, n) if d == "forward" else (n, member)
                if key not in found or real < found[key]:
                    found[key] = real
        return sorted((p, d, n, *found[(p, d, n)]) for p, d, n in found
                      if d == "forward" or (p, "forward", n) not in found)

    def _anchor_walk(self, iri: str, relations: frozenset[str] | None,
                     per_relation: int) -> list[tuple[str, str, str, str, str]]:
        """``walk`` for anchor: a node whose edges may come from the adjacency file (``_edges_on_file``, no hub
        past ``HUB_DEGREE``) and whose neighbours are merged with none has them read from there (two lookups in a
        small file, where the store decodes every edge's terms, a random block each the first time a node is read,
        which was most of a typical anchor at full size); the same edges, the file holding what
        ``_stored_neighbours`` reads."""
        on_file = self._edges_on_file((iri,), relations, HUB_DEGREE).get(iri)
        if on_file is not None:
            merged = self.groups.representative
            if not any(n in merged for _, _, n in on_file):
                return _as_stored(iri, on_file)
        return self.walk(iri, relations, per_relation)

    def _edges_on_file(self, nodes: Iterable[str], relations: frozenset[str] | None, max_degree: int,
                       ends: Iterable[str] = ()) -> dict[str, list[Neighbour]]:
        """The stored fact edges of each of ``nodes`` that may be read from the adjacency file, sorted, of
        ``relations`` (None: all), an edge to a declaration (schema class, relation) left out as the store's walk
        leaves it: the file current (``_adjacency_file``), the node merged with no other concept, its adjacency not
        on the degree index's file (that one is read there), and its degree at most ``max_degree`` unless it is
        one of ``ends`` (a hub keeps its capped read). A node absent from the answer is read as before. Anchor
        and bridge both ask here, so they decide and filter alike."""
        wanted = list(dict.fromkeys(nodes))
        adjacency = self._adjacency_file() if wanted else None
        if adjacency is None:
            return {}
        state = self._state()
        table, merged, keep = state.degrees, self.groups.representative, set(ends)
        degree = self.degrees(wanted)
        wanted = [n for n in wanted if n not in merged and not table.is_filed(n)  # type: ignore[union-attr]
                  and (n in keep or degree[n] <= max_degree)]
        if not wanted:
            return {}
        # one node (anchor) is decoded without numpy: array set-up would cost more than its dozen edges
        found = {wanted[0]: adjacency.node_edges(wanted[0])} if len(wanted) == 1 else adjacency.edges(wanted)
        non = state.non_concepts
        return {n: sorted(Neighbour(p, d, o) for p, d, o in found.get(n, ())  # type: ignore[arg-type]
                          if o not in non and (relations is None or p in relations)) for n in wanted}

    def _node_degrees(self, nodes: Iterable[str]) -> dict[str, int]:
        """Degree of each node, a merged concept counting all its members' facts."""
        wanted = list(dict.fromkeys(nodes))
        groups = self.groups
        members = {n: groups.of(n) for n in wanted}
        raw = self.degrees({m for ms in members.values() for m in ms})
        return {n: sum(raw[m] for m in ms) for n, ms in members.items()}

    def _concept_count(self) -> int:
        state = self._state()
        if state.concept_count is None:
            if self.store.indexed:
                state.concept_count = len(self._degree_table())
            else:
                rows = self.store.select(
                    f"SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE {{ GRAPH ?g {{ ?s ?p ?o }} FILTER(isIRI(?o) && "
                    f"?p NOT IN ({_NOT_FACT})) }}")
                state.concept_count = int(rows[0]["n"].value) if rows else 0
        return max(state.concept_count, 1)

    # --- anchor --------------------------------------------------------------------------------------------------
    def anchor(self, entity: str | Entity, k: int = 10, relations: Sequence[str] | None = None,
               direction: str = "both", rank_by: str | None = None, rank: str = "specificity") -> list[Step]:
        """The entity's neighbourhood: for each (relation, direction) up to ``k`` neighbours, ranked by ``rank``
        (``"specificity"``: the neighbour's IDF in the KG times the annotation frequency the source gives, see
        ``mirage_kg.graph.ranking``; ``"degree"``: best connected first) or, with ``rank_by``, by similarity to that
        text; ordered by relation id, direction (forward first), rank, id. A merged concept's members all
        contribute (each step is a stored triple of one member). Every step starts at the anchor's node."""
        from mirage_kg.graph.ranking import RANKINGS

        if k < 1:
            raise InputError(f"k must be at least 1, not {k}")
        want = DIRECTIONS.get(direction)
        if want is None:
            raise InputError(f"direction must be forward (out), backward (in) or both, not {direction!r}")
        if rank not in RANKINGS:
            raise InputError(f"rank must be one of {', '.join(RANKINGS)}, not {rank!r}")
        center = self.entity(entity)
        rels = self._resolve_relations(relations)
        filed = self._filed_hub_anchor(center.iri, k, rels, want, rank) if not rank_by else None
        chosen, real = filed if filed is not None else self._ranked_edges(center.iri, k, rels, want, rank_by, rank)
        names = self.labels({x for e in chosen for x in real[e]} | {center.iri})
        relmeta = self.relations({p for p, _, _ in chosen})
        steps = []
        for p, d, n in chosen:
            s, o = real[(p, d, n)]
            subject = center if s == center.iri else Entity(s, names[s])
            obj = center if o == center.iri else Entity(o, names[o])
            steps.append(Step(subject, relmeta[p], obj, d))  # type: ignore[arg-type]
        return steps

    def _ranked_edges(self, iri: str, k: int, rels: frozenset[str] | None, want: str, rank_by: str | None,
                      rank: str) -> tuple[list[tuple[str, str, str]], dict[tuple[str, str, str], tuple[str, str]]]:
        """Anchor's choice at ``iri``'s node: the (relation, direction, neighbour) edges kept (the top ``k`` of each
        (relation, direction)), in anchor's order, and each one's stored (subject, object). What a hub's filed
        anchor holds is made by this same code (``_file_hub_anchors``)."""
        from mirage_kg.graph.ranking import annotation_frequencies, neighbour_scores

        # a hub's edges are read up to a cap per relation (ranked among those): anchor costs the same at any degree
        edges = [e for e in self._anchor_walk(iri, rels, max(k, HUB_EDGES_PER_RELATION))
                 if want == "both" or e[1] == want]
        if not edges:
            return [], {}
        others = sorted({n for _, _, n, _, _ in edges})
        if rank_by or rank == "degree":
            by_node = self._rank_scores(others, rank_by)
            score = {(p, d, n): by_node[n] for p, d, n, _, _ in edges}
        else:
            members = list(self.groups.of(iri))
            # a store the degree index's file says has no annotation record needs no lookup at each anchor
            table = self._current_degree_file()
            frequencies = annotation_frequencies(self.store, members) if table is None or table.annotated else {}
            score = neighbour_scores([(p, d, n) for p, d, n, _, _ in edges], self._node_degrees(others),
                                     self._concept_count(), frequencies, members, self.groups.rep)
        real = {(p, d, n): (s, o) for p, d, n, s, o in edges}
        by_group: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for p, d, n, _, _ in edges:
            by_group.setdefault((p, d), []).append((p, d, n))
        ids = {n: compress(n) for n in others}
        chosen: list[tuple[str, str, str]] = []
        for group in by_group.values():
            if len(group) > k:  # the final sort below orders a group as this one does: only a cut needs it
                group.sort(key=lambda e: (-score[e], ids[e[2]]))
                del group[k:]
            chosen.extend(group)
        chosen.sort(key=lambda e: (compress(e[0]), 0 if e[1] == "forward" else 1, -score[e], ids[e[2]]))
        return chosen, real

    def _hub_anchor_settings(self) -> dict[str, object]:
        """What a filed hub anchor depends on beyond the store's content (which keys the file), and which nodes
        are filed (``min_degree`` edges or more)."""
        from mirage_kg.index.degree import FILED_DEGREE, HUB_ANCHOR_DEPTH
        from mirage_kg.graph.ranking import RANKING_VERSION

        return {"hub_degree": HUB_DEGREE, "per_relation": HUB_EDGES_PER_RELATION, "depth": HUB_ANCHOR_DEPTH,
                "merged": self.merge_equivalents, "min_degree": min(FILED_DEGREE, HUB_DEGREE + 1),
                "ranking": RANKING_VERSION}

    def _filed_hub_anchor(self, iri: str, k: int, rels: frozenset[str] | None, want: str, rank: str
                          ) -> tuple[list[tuple[str, str, str]], dict[tuple[str, str, str], tuple[str, str]]] | None:
        """``_ranked_edges`` for a hub whose anchor is on file (ranked for every relation and direction, the first
        ``depth`` of each group): its rows at positions below ``k``, of the wanted relations and direction. The
        same answer: a group's candidates (its capped edges, the cap being the same for any ``k`` up to it) and
        each neighbour's score do not depend on the other groups, so a group's top ``k`` is the first ``k`` of its
        filed order, and anchor's order restricted to fewer edges is their filed order. None (rank as before)
        when nothing is filed for this hub, under these settings, for this store state."""
        if not self.store.indexed:
            return None
        self._degree_table()  # built or opened now if not yet (anchor reads degrees anyway)
        table = self._current_degree_file()
        if table is None:  # no file, or a raw write since it was opened: read live
            return None
        ours = self._hub_anchor_settings()
        # the degree first (it is in memory once the entity was looked up): most nodes are far below the filed
        # ones, and need not read and parse the file's settings at every anchor; a filed ``min_degree`` differing
        # from ours is refused below anyway
        if self.degrees([iri])[iri] < ours["min_degree"]:  # type: ignore[operator]
            return None  # no node of so few edges is filed (its degree is what walk reads first anyway)
        settings = table.hub_anchor_settings()
        if settings is None or k > settings["depth"] or any(settings.get(key) != value for key, value in ours.items()):
            return None
        rows = table.hub_anchor_rows(iri, rank, k)
        if rows is None:
            return None
        chosen, real = [], {}
        for p, d, n, end, _ in rows:
            if (rels is None or p in rels) and (want == "both" or d == want):
                chosen.append((p, d, n))
                real[(p, d, n)] = (iri, end) if d == "forward" else (end, iri)
        return chosen, real

    def _file_hub_anchors(self, table: DegreeTable) -> None:
        """Rank the anchor of every hub (over ``HUB_DEGREE`` edges) and every other node of ``FILED_DEGREE`` edges
        or more (whose anchor ranks all its edges: as costly), each a concept merged with no other, once per
        ranking, and file the order in the degree index's file (``DiskDegrees.file_hub_anchors``), where the file
        has none yet and can be written: ~0.1 s a node, done once per store state."""
        from mirage_kg.index.degree import HUB_ANCHOR_DEPTH, DiskDegrees, HubAnchorRow
        from mirage_kg.progress import progress_bar
        from mirage_kg.graph.ranking import RANKINGS

        settings = self._hub_anchor_settings()
        if not isinstance(table, DiskDegrees):
            return
        filed = table.hub_anchor_settings()
        if filed is not None and all(filed.get(key) == value for key, value in settings.items()):
            return
        if not os.access(table.path, os.W_OK) or not os.access(table.path.parent, os.W_OK):
            return
        hubs = [iri for (iri,) in table._db.execute("SELECT iri FROM degrees WHERE degree >= ? ORDER BY iri",
                                                     (settings["min_degree"],))]
        groups = self.groups

        def anchors() -> Iterator[tuple[str, str, list[HubAnchorRow]]]:
            with progress_bar("degree index: hub anchors", total=len(hubs), unit="hubs") as advance:
                for hub in hubs:
                    if len(groups.of(hub)) == 1:
                        for rank in RANKINGS:
                            chosen, real = self._ranked_edges(hub, HUB_EDGES_PER_RELATION, None, "both", None, rank)
                            rows: list[HubAnchorRow] = []
                            position: dict[tuple[str, str], int] = {}
                            for p, d, n in chosen:
                                at = position[(p, d)] = position.get((p, d), -1) + 1
                                if at < HUB_ANCHOR_DEPTH:
                                    s, o = real[(p, d, n)]
                                    rows.append((p, d, n, o if d == "forward" else s, at))
                            yield hub, rank, rows
                    advance(1)

        table.file_hub_anchors(settings, anchors())

    def _rank_scores(self, iris: list[str], rank_by: str | None) -> dict[str, float]:
        if not rank_by:
            return {i: float(d) for i, d in self._node_degrees(iris).items()}
        names = self.labels(iris)
        sims = self.similarity(rank_by, [names[i] for i in iris])
        degree = self.degrees(iris)
        # similarity decides; degree only breaks exact ties (it is far below any similarity difference)
        return {i: s + 1e-9 * math.log1p(degree[i]) for i, s in zip(iris, sims)}

    def similarity(self, text: str, labels: Sequence[str]) -> list[float]:
        """How close ``text`` is to each label, in [0, 1]: the linker's measure, which ``KnowledgeGraph``
        supplies; a bare ``Graph`` has none."""
        raise InputError("ranking by similarity to a text needs a linker: use mirage_kg.KnowledgeGraph")

    # --- bridge --------------------------------------------------------------------------------------------------
    def bridge(self, a: str | Entity, b: str | Entity, max_hops: int = 3, max_paths: int = 20,
               relations: Sequence[str] | None = None, rank: str = "specificity",
               hub_edges: int | None = None) -> BridgePaths:
        """All simple paths of at most ``max_hops`` edges between ``a`` and ``b``, each edge walked either way
        (its step says which), merged concepts taken as one node. Shortest first; equal lengths ordered, with
        ``rank="specificity"``, by how specific the intermediate nodes are (hubs last, ``ranking.path_cost``),
        then by node ids, relation ids and directions (forward first); the first ``max_paths``.

        ``hub_edges``: how many edges per relation and direction the embedded store's search takes when it must
        extend a partial path past a hub (``PATH_HUB_DEGREE``; None: ``PATH_HUB_EDGES``; 0: every edge). The
        answer's ``capped`` names the hubs where that cut the search (an endpoint's search is never cut)."""
        from mirage_kg.graph.ranking import RANKINGS, path_cost

        if max_hops < 1:
            raise InputError(f"max_hops must be at least 1, not {max_hops}")
        if max_paths < 1:
            raise InputError(f"max_paths must be at least 1, not {max_paths}")
        if rank not in RANKINGS:
            raise InputError(f"rank must be one of {', '.join(RANKINGS)}, not {rank!r}")
        if hub_edges is not None and hub_edges < 0:
            raise InputError(f"hub_edges must be 0 (every edge) or more, not {hub_edges}")
        walk = _HubWalk(PATH_HUB_EDGES if hub_edges is None else hub_edges)
        source, target = self.entity(a), self.entity(b)
        groups = self.groups
        start, goal = groups.rep(source.iri), groups.rep(target.iri)
        if start == goal:
            return BridgePaths()
        rels = self._resolve_relations(relations)
        merged = bool(groups.members)
        # a path through merged nodes may need more stored edges than hops, so the bounded ASK cannot decide it
        # an endpoint first answers whether any walk exists (one bounded ASK), so the patterns run only when they
        # will find something; the embedded store's search is bounded by itself and cheaper than that ASK, which
        # the engine evaluates through every hub next to either end (0.6 s against 0.05 s, measured)
        if not merged and not self.store.indexed and not self.connected(source.iri, target.iri, max_hops, rels):
            return BridgePaths()
        raw_paths: list[tuple[tuple[str, str, str, str], ...]] = []
        memo: dict[str, list[tuple[str, str, str]]] = {}
        real: dict[tuple[str, str, str], tuple[str, str]] = {}
        for hops in range(1, max_hops + 1):
            if self.store.indexed or merged:
                found = self._paths_by_search(start, goal, hops, rels, memo, real, walk)
            else:
                found = self._paths_by_sparql(start, goal, hops, rels)
            found = once_each_way(found)
            if rank == "specificity" and found:
                inner = {n for path in found for n in path_inner_nodes(path)}
                degree = self._node_degrees(inner)
                found.sort(key=lambda path: (path_cost([degree[n] for n in path_inner_nodes(path)]),
                                             path_sort_key(path)))
            else:
                found.sort(key=path_sort_key)
            raw_paths.extend(found)
            if len(raw_paths) >= max_paths:
                break

        def stored(step: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
            s, p, o, d = step
            s, o = real.get((s, p, o), (s, o))
            return s, p, o, d

        out = BridgePaths(self._materialise([tuple(stored(step) for step in path) for path in raw_paths[:max_paths]]))
        if walk.cut:
            degree = self.degrees(walk.cut)
            out.capped = tuple((n, degree[n]) for n in sorted(walk.cut) if degree[n] > len(memo.get(n, ())))
            out.hub_edges = walk.limit
        return out

    def connected(self, a: str, b: str, max_hops: int, relations: frozenset[str] | None = None) -> bool:
        """Whether any walk of at most ``max_hops`` fact-like edges joins ``a`` and ``b``: one bounded
        property-path ASK (never ``*``/``+``). It may say yes where no simple path through concepts exists;
        it never says no where one does."""
        if relations is not None:
            if not relations:
                return False
            step = "(" + "|".join(f"{iri_ref(r)}|^{iri_ref(r)}" for r in sorted(relations)) + ")"
        else:
            banned = sorted(NON_FACT_PREDICATES)
            step = "!(" + "|".join([iri_ref(p) for p in banned] + ["^" + iri_ref(p) for p in banned]) + ")"
        return self.store.ask(bounded_path_ask(iri_ref(a), step, max_hops, iri_ref(b),
                                               nested=self.store.nested_optional_paths))

    def _paths_by_search(self, a: str, b: str, hops: int, rels: frozenset[str] | None,
                         memo: dict[str, list[tuple[str, str, str]]],
                         real: dict[tuple[str, str, str], tuple[str, str]] | None = None,
                         walk: _HubWalk | None = None) -> list[tuple[tuple[str, str, str, str], ...]]:
        """Paths of exactly ``hops`` edges by meeting in the middle over the store's index: partial paths from
        ``a`` and from ``b`` (``hops - 1`` edges between them, each added on the side that fans out least), joined
        by one middle edge. With
        merged concepts the walk is over nodes (``_walk``) and ``real`` maps each node-level triple to the stored
        one. ``walk``: the hub cap (``_HubWalk``), and where it cut the search."""
        walk = walk if walk is not None else _HubWalk(PATH_HUB_EDGES)
        adj = self._adjacency_of(rels, memo, real, (a, b), walk)
        merged = real is not None and bool(self.groups.members)
        # which side to extend: the one whose partial paths fan out least (the degree index says), so a hub at
        # either end, or next to it, is never expanded when the other side is small; any split finds the same paths
        left: list[tuple[list[str], list[tuple[str, str, str, str]]]] = [([a], [])]
        right: list[tuple[list[str], list[tuple[str, str, str, str]]]] = [([b], [])]
        table = self._state().degrees if self.store.indexed and not merged else None
        joined: list[tuple[tuple[str, str, str, str], ...]] = []
        for extension in range(hops - 1):
            # the last edge added next to an untouched end on file: partial paths ending at a node on file are
            # finished by one join of the two nodes' edges in the file, not by binding each of their neighbours
            last = extension == hops - 2 and table is not None
            cost_left = self._fan_out(left, memo, merged, rels, (a, b))
            cost_right = self._fan_out(right, memo, merged, rels, (a, b))
            extend_left = cost_left <= cost_right
            # past a hub the walk is capped: extend the other side instead while that stays affordable
            if walk.limit and not merged and self.store.indexed:
                past_left, past_right = self._past_hub(left, walk), self._past_hub(right, walk)
                if extend_left and past_left and not past_right and cost_right <= 2 * PATH_HUB_DEGREE:
                    extend_left = False
                elif not extend_left and past_right and not past_left and cost_left <= 2 * PATH_HUB_DEGREE:
                    extend_left = True
            if extend_left:
                if last and right == [([b], [])] and table.is_filed(b):  # type: ignore[union-attr]
                    left, done = self._joined_on_file(left, b, rels, from_right=False)
                    joined += done
                self._prefetch_adjacency([nodes[-1] for nodes, _ in left], memo, rels, (a, b), merged)
                left = _extend(left, adj, avoid=b)
            else:
                if last and left == [([a], [])] and table.is_filed(a):  # type: ignore[union-attr]
                    right, done = self._joined_on_file(right, a, rels, from_right=True)
                    joined += done
                self._prefetch_adjacency([nodes[-1] for nodes, _ in right], memo, rels, (a, b), merged)
                right = _extend(right, adj, avoid=a)
        left_ends: dict[str, list[tuple[list[str], list[tuple[str, str, str, str]]]]] = {}
        right_ends: dict[str, list[tuple[list[str], list[tuple[str, str, str, str]]]]] = {}
        for nodes, steps in left:
            left_ends.setdefault(nodes[-1], []).append((nodes, steps))
        for nodes, steps in right:
            right_ends.setdefault(nodes[-1], []).append((nodes, steps))
        middle = self._middle_edges(set(left_ends), set(right_ends), memo, rels, real, (a, b), walk)
        out = []
        for (x, y), edges in middle.items():
            for lnodes, lsteps in left_ends[x]:
                for rnodes, rsteps in right_ends[y]:
                    if not set(lnodes).isdisjoint(rnodes):
                        continue
                    back = [(s, p, o, "backward" if d == "forward" else "forward") for s, p, o, d in reversed(rsteps)]
                    for edge in edges:
                        out.append(tuple(lsteps) + (edge,) + tuple(back))
        return out if merged else out + joined

    def _past_hub(self, layer: list[tuple[list[str], list[tuple[str, str, str, str]]]], walk: _HubWalk) -> bool:
        """Whether extending ``layer`` would go past a hub along its capped edges (a node inside the path)."""
        return any(len(nodes) > 1 and (nodes[-1] in walk.capped or self._is_path_hub(nodes[-1])) for nodes, _ in layer)

    def _joined_on_file(self, layer: list[tuple[list[str], list[tuple[str, str, str, str]]]], far: str,
                        rels: frozenset[str] | None, from_right: bool,
                        ) -> tuple[list[tuple[list[str], list[tuple[str, str, str, str]]]],
                                   list[tuple[tuple[str, str, str, str], ...]]]:
        """The partial paths of ``layer`` whose end is on file, finished two edges further at ``far`` (an end on
        file) by one join per end node in the file (exact: the file holds every edge of a node it lists);
        returns the partial paths left to extend and the finished paths, walked from ``a`` to ``b``
        (``from_right``: ``layer`` grew from ``b``)."""
        table = self._state().degrees
        rest, by_end = [], {}
        for nodes, steps in layer:
            y = nodes[-1]
            if y == far or not table.is_filed(y):  # type: ignore[union-attr]
                rest.append((nodes, steps))
            else:
                by_end.setdefault(y, []).append((nodes, steps))
        done: list[tuple[tuple[str, str, str, str], ...]] = []
        for y, partials in by_end.items():
            for x, rel_y, from_y, rel_far, from_far in table.filed_common_links(y, far):  # type: ignore[union-attr]
                if x == far or (rels is not None and (rel_y not in rels or rel_far not in rels)):
                    continue
                # each step walked from the layer's side: y to x, then x to far (the far end sees that edge reversed)
                y_to_x = (y, rel_y, x, "forward") if from_y == "forward" else (x, rel_y, y, "backward")
                x_to_far = (far, rel_far, x, "backward") if from_far == "forward" else (x, rel_far, far, "forward")
                for nodes, steps in partials:
                    if x in nodes:
                        continue
                    walk = steps + [y_to_x, x_to_far]
                    if from_right:  # walked from b: read it back from a
                        walk = [(s, p, o, "backward" if d == "forward" else "forward") for s, p, o, d in reversed(walk)]
                    done.append(tuple(walk))
        return rest, done

    def _is_path_hub(self, n: str) -> bool:
        return self.store.indexed and self.degrees([n])[n] > PATH_HUB_DEGREE

    def _path_hub_edges(self, n: str, rels: frozenset[str] | None, limit: int | None = None) -> list[Neighbour]:
        """A hub's capped edges for walking through it (``limit``, by default ``PATH_HUB_EDGES``, per relation and
        direction), cached per graph state for the default limit: there are few hubs."""
        if limit is not None and limit != PATH_HUB_EDGES:
            return self._hub_neighbours(n, rels, limit)
        cache = self._state().path_hub_edges
        key = (n, rels)
        if key not in cache:
            cache[key] = self._hub_neighbours(n, rels, PATH_HUB_EDGES)
        return cache[key]

    def _fan_out(self, layer: list[tuple[list[str], list[tuple[str, str, str, str]]]],
                 memo: dict[str, list[tuple[str, str, str]]], merged: bool, rels: frozenset[str] | None,
                 search_ends: tuple[str, ...] = ()) -> int:
        """How many partial paths extending ``layer`` by one edge would make (edges in hand are counted, the
        others estimated by degree; a hub capped in an earlier search counts its capped edges, unless it is one of
        this search's ``search_ends``, whose whole adjacency ``_adjacency_of`` reads)."""
        ends: dict[str, int] = {}
        for nodes, _ in layer:
            ends[nodes[-1]] = ends.get(nodes[-1], 0) + 1
        unknown = [n for n in ends if n not in memo]
        degree = (self._node_degrees(unknown) if merged else self.degrees(unknown)) if unknown else {}
        capped = self._state().path_hub_edges
        for n in unknown:
            if n in search_ends:  # an end's whole adjacency is what extending it reads
                continue
            if (n, rels) in capped:  # a hub walked before: its capped edges are in hand
                degree[n] = len(capped[(n, rels)])
            elif not merged and self.store.indexed and degree[n] > PATH_HUB_DEGREE:
                # a hub is walked through along its capped edges: counting all its edges made the side next to a
                # hub look dearer than a hub end of 50k-200k edges, which was then expanded whole (seconds)
                degree[n] = len(self._path_hub_edges(n, rels))
        return sum(count * (len(memo[n]) if n in memo else degree[n]) for n, count in ends.items())

    def _adjacency_of(self, rels: frozenset[str] | None, memo: dict[str, list[tuple[str, str, str]]],
                      real: dict[tuple[str, str, str], tuple[str, str]] | None, ends: tuple[str, ...] = (),
                      walk: _HubWalk | None = None) -> Any:
        """The memoised adjacency a path search walks: stored edges, or merged nodes' (recording in ``real``).
        A hub (past ``PATH_HUB_DEGREE``) other than the search's ``ends`` gives its capped edges (``walk``'s limit;
        0: all), and walking them is recorded in ``walk.cut``."""
        merged = real is not None and bool(self.groups.members)
        walk = walk if walk is not None else _HubWalk(PATH_HUB_EDGES)

        def adj(n: str) -> list[tuple[str, str, str]]:
            if n in walk.capped:
                walk.cut.add(n)
            if n not in memo:
                if not merged:
                    hub = bool(walk.limit) and n not in ends and self._is_path_hub(n)
                    if hub:
                        memo[n] = self._path_hub_edges(n, rels, walk.limit)
                        walk.capped.add(n)
                        walk.cut.add(n)
                    else:
                        memo[n] = self.neighbours(n, rels)
                else:
                    memo[n] = []
                    for p, d, other, s, o in self.walk(n, rels):
                        memo[n].append(Neighbour(p, d, other))  # type: ignore[arg-type]
                        real[(n, p, other) if d == "forward" else (other, p, n)] = (s, o)  # type: ignore[index]
            return memo[n]
        return adj

    def _middle_edges(self, xs: set[str], ys: set[str], memo: dict[str, list[tuple[str, str, str]]],
                      rels: frozenset[str] | None, real: dict[tuple[str, str, str], tuple[str, str]] | None = None,
                      ends: tuple[str, ...] = (), walk: _HubWalk | None = None,
                      ) -> dict[tuple[str, str], list[tuple[str, str, str, str]]]:
        """Fact edges between a node of ``xs`` and a different node of ``ys``, as steps walked from x to y: from
        adjacency already in hand, else whichever is cheaper of point lookups per pair, expanding one side, and,
        for the nodes whose adjacency is on file (``degree_index.FILED_DEGREE``), asking the file which of the
        other side's nodes they link to (estimated from the degree index when it is built). A hub walked along
        capped edges (``walk``) is asked about the other side's nodes pair by pair instead (exact), up to
        ``_HUB_PAIR_LOOKUPS`` of them."""
        out: dict[tuple[str, str], list[tuple[str, str, str, str]]] = {}
        walk = walk if walk is not None else _HubWalk(PATH_HUB_EDGES)
        adj = self._adjacency_of(rels, memo, real, ends, walk)
        merged = real is not None and bool(self.groups.members)
        # the file holds stored triples, so not across merged concepts
        table = self._state().degrees if self.store.indexed and not merged else None

        on_file = set() if table is None else {n for n in xs | ys if n not in memo and table.is_filed(n)}

        def edges_from(n: str, others: set[str]) -> Iterable[tuple[str, str, str]]:
            if n in on_file:  # one indexed lookup for all of ``others``, not a read of every edge at a hub
                return [e for e in table.filed_links_to(n, others)  # type: ignore[union-attr]
                        if rels is None or e[0] in rels]
            if not merged and len(others) <= _HUB_PAIR_LOOKUPS and (n in walk.capped or (
                    walk.limit and n not in memo and n not in ends and self._is_path_hub(n))):
                return self._edges_between(n, others, rels)  # a hub's capped edges would miss some
            return adj(n)

        def from_xs() -> None:
            for x in xs:
                for p, d, n in edges_from(x, ys):
                    if n in ys and n != x:
                        out.setdefault((x, n), []).append((x, p, n, "forward") if d == "forward" else (n, p, x, "backward"))

        def from_ys() -> None:
            for y in ys:
                for p, d, n in edges_from(y, xs):
                    if n in xs and n != y:
                        out.setdefault((n, y), []).append((y, p, n, "backward") if d == "forward" else (n, p, y, "forward"))

        if all(x in memo for x in xs):
            from_xs()
            return out
        if all(y in memo for y in ys):
            from_ys()
            return out
        if self.store.indexed:
            # a filed node's lookup costs about a quarter of an edge read per node asked about
            filed_x = len(ys) / 4 * len(on_file & xs) + len(xs)
            filed_y = len(xs) / 4 * len(on_file & ys) + len(ys)
            unknown = [n for n in xs | ys if n not in memo and n not in on_file]
            if filed_x <= filed_y and xs.isdisjoint(unknown):
                from_xs()  # every x is in hand or on file, and cheaper than any plan: no degree to look up
                return out
            if filed_y < filed_x and ys.isdisjoint(unknown):
                from_ys()
                return out
            degree = self._node_degrees(unknown) if merged else self.degrees(unknown)
            cost_x = sum(degree[x] for x in xs if x in degree) + filed_x
            cost_y = sum(degree[y] for y in ys if y in degree) + filed_y
        else:  # no index: assume a typical degree
            cost_x, cost_y = 32 * len(xs), 32 * len(ys)
        # a membership check is two index seeks (one each way): about two edge reads when the store's pages are
        # in memory, far more when they are not (a seek reads a random block, an adjacency list reads on)
        cost_pairs = 4 * len(xs) * len(ys)
        if not merged and self._adjacency_file() is not None:
            # a side read from the adjacency file costs two lookups in a small file, against two seeks in the
            # whole store per pair (random blocks of 15 GB when its pages are cold)
            cost_pairs *= 16
        # point lookups read stored triples, so not across merged concepts
        if cost_pairs < min(cost_x, cost_y) and not merged:
            for x in xs:
                for y in ys:
                    if x == y:
                        continue
                    found = [(x, p, y, "forward") for p in self.store.predicates_between(x, y)]
                    found += [(y, p, x, "backward") for p in self.store.predicates_between(y, x)]
                    found = sorted({f for f in found if f[1] not in NON_FACT_PREDICATES
                                    and (rels is None or f[1] in rels)})
                    if found:
                        out[(x, y)] = found
        elif cost_x <= cost_y:
            self._prefetch_adjacency(xs - on_file, memo, rels, ends, merged)
            from_xs()
        else:
            self._prefetch_adjacency(ys - on_file, memo, rels, ends, merged)
            from_ys()
        return out

    def _edges_between(self, n: str, others: set[str], rels: frozenset[str] | None) -> list[Neighbour]:
        """The fact edges between ``n`` and each of ``others``, seen from ``n``, by point lookups (both ends
        bound): a hub's edges to a few nodes without reading its neighbourhood."""
        non = self._state().non_concepts
        found: set[tuple[str, str, str]] = set()
        for y in others:
            if y == n or y in non:
                continue
            for p in self.store.predicates_between(n, y):
                if p not in NON_FACT_PREDICATES and (rels is None or p in rels):
                    found.add((p, "forward", y))
            for p in self.store.predicates_between(y, n):
                if p not in NON_FACT_PREDICATES and (rels is None or p in rels):
                    found.add((p, "backward", y))
        return [Neighbour._make(edge) for edge in sorted(found)]

    def _prefetch_adjacency(self, nodes: Iterable[str], memo: dict[str, list[tuple[str, str, str]]],
                            rels: frozenset[str] | None, ends: tuple[str, ...], merged: bool) -> None:
        """Put the adjacency of ``nodes`` that a search is about to walk into ``memo`` in one read of the
        adjacency file (``_edges_on_file``), where the store would decode every edge term by term: the same
        edges ``_adjacency_of`` reads (a hub walked through keeps its capped edges, a node on the degree index's
        file its filed ones, so those are left to it, as is everything when concepts are merged)."""
        if not merged:
            memo.update(self._edges_on_file((n for n in nodes if n not in memo), rels, PATH_HUB_DEGREE, ends))

    def _paths_by_sparql(self, a: str, b: str, hops: int,
                         rels: frozenset[str] | None) -> list[tuple[tuple[str, str, str, str], ...]]:
        """Paths of exactly ``hops`` edges with one explicit SPARQL pattern (any endpoint)."""
        rows = self.store.select(hop_query(a, b, hops, rels))
        non = self._state().non_concepts
        out = []
        for r in rows:
            path_nodes = [a] + [r[f"n{i}"].value for i in range(1, hops)] + [b]
            if any(n in non for n in path_nodes[1:-1]):
                continue
            steps = []
            for i in range(hops):
                x, y, p = path_nodes[i], path_nodes[i + 1], r[f"p{i}"].value
                steps.append((x, p, y, "forward") if r[f"d{i}"].value == "f" else (y, p, x, "backward"))
            out.append(tuple(steps))
        return out

    def _materialise(self, raw_paths: list[tuple[tuple[str, str, str, str], ...]]) -> list[Path]:
        iris = {n for path in raw_paths for s, _, o, _ in path for n in (s, o)}
        names = self.labels(iris)
        relmeta = self.relations({p for path in raw_paths for _, p, _, _ in path})
        return [Path(tuple(Step(Entity(s, names[s]), relmeta[p], Entity(o, names[o]), d)  # type: ignore[arg-type]
                           for s, p, o, d in path)) for path in raw_paths]

    # --- checks and text -----------------------------------------------------------------------------------------
    def path_exists(self, path: Path) -> bool:
        """Whether every step's triple is in the store (a cited path must be real)."""
        if not path.steps:
            return False
        if self.store.indexed:
            return all(next(self.store.quads(s.subject.iri, s.relation.iri, s.object.iri), None) is not None
                       for s in path.steps)
        body = " ".join(f"GRAPH ?g{i} {{ {iri_ref(s.subject.iri)} {iri_ref(s.relation.iri)} {iri_ref(s.object.iri)} }}"
                        for i, s in enumerate(path.steps))
        return self.store.ask(f"ASK {{ {body} }}")

    def sources(self, triples: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], tuple[str, ...]]:
        """The named graphs (sources) that hold each triple."""
        wanted = list(dict.fromkeys(triples))
        out: dict[tuple[str, str, str], set[str]] = {t: set() for t in wanted}
        for chunk in _chunks(wanted, 200):
            values = " ".join(f"({iri_ref(s)} {iri_ref(p)} {iri_ref(o)})" for s, p, o in chunk)
            rows = self.store.select(
                f"SELECT ?s ?p ?o ?g WHERE {{ VALUES (?s ?p ?o) {{ {values} }} GRAPH ?g {{ ?s ?p ?o }} "
                f"FILTER(?g NOT IN ({_SYSTEM_GRAPHS})) }}")
            for r in rows:
                out[(r["s"].value, r["p"].value, r["o"].value)].add(r["g"].value)
        return {t: tuple(sorted(g)) for t, g in out.items()}

    def verbalise(self, item: Step | Path) -> str:
        """The sentence(s) for a step or a path, read in its walking direction."""
        return item.text


# --- helpers ----------------------------------------------------------------------------------------------------------

def _as_stored(iri: str, edges: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str, str, str]]:
    """``walk``'s answer at a node merged with none, among neighbours merged with none, from its edges (distinct,
    sorted): each edge is its own stored triple, a self-loop dropped, a fact stored both ways kept forward."""
    forward = {(p, n) for p, d, n in edges if d == "forward"}
    return [(p, d, n, iri, n) if d == "forward" else (p, d, n, n, iri) for p, d, n in edges
            if n != iri and (d == "forward" or (p, n) not in forward)]


def once_each_way(paths: Sequence[tuple[tuple[str, str, str, str], ...]]
                  ) -> list[tuple[tuple[str, str, str, str], ...]]:
    """Paths that differ only in which copy of a fact stored both ways they walk (``a -r-> b`` forward or
    ``b -r-> a`` backward) are one path: the one walking most edges forward (the first by ``path_sort_key``)."""
    best: dict[tuple[tuple[str, str, str], ...], tuple[tuple[str, str, str, str], ...]] = {}
    for path in paths:
        key = tuple((s, p, o) if d == "forward" else (o, p, s) for s, p, o, d in path)
        if key not in best or path_sort_key(path) < path_sort_key(best[key]):
            best[key] = path
    return list(best.values())


def path_inner_nodes(path: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """The nodes a raw path walks through, its two ends excluded."""
    return [o if d == "forward" else s for s, _, o, d in path[:-1]]


def path_sort_key(path: Sequence[tuple[str, str, str, str]]) -> tuple[Any, ...]:
    """Bridge order: length, then the walked node ids, then relation ids, then directions (forward first)."""
    nodes = [path[0][0] if path[0][3] == "forward" else path[0][2]]
    for s, _, o, d in path:
        nodes.append(o if d == "forward" else s)
    return (len(path), tuple(compress(n) for n in nodes), tuple(compress(p) for _, p, _, _ in path),
            tuple(0 if d == "forward" else 1 for *_, d in path))


def hop_query(a: str, b: str, hops: int, relations: frozenset[str] | None = None, named_graphs: bool = True) -> str:
    """The SELECT for every walk of exactly ``hops`` fact edges from ``a`` to ``b`` through distinct IRIs, each
    edge either way (``?d<i>`` is "f" or "b"). ``named_graphs=False`` reads the default graph instead of
    ``GRAPH ?g`` patterns (for an engine without named graphs)."""
    nodes = [iri_ref(a)] + [f"?n{i}" for i in range(1, hops)] + [iri_ref(b)]

    def triple(i: int, s: str, o: str) -> str:
        return f"GRAPH ?g{i} {{ {s} ?p{i} {o} }}" if named_graphs else f"{s} ?p{i} {o}"

    parts = []
    for i in range(hops):
        x, y = nodes[i], nodes[i + 1]
        parts.append(f"{{ {{ {triple(i, x, y)} BIND(\"f\" AS ?d{i}) }} UNION "
                     f"{{ {triple(i, y, x)} BIND(\"b\" AS ?d{i}) }} "
                     f"FILTER(?p{i} NOT IN ({_NOT_FACT})) {_in_filter(f'?p{i}', relations)} }}")
    inner = [f"?n{i}" for i in range(1, hops)]
    filters = [f"isIRI({v})" for v in inner]
    for i, v in enumerate(inner):
        filters += [f"{v} != {nodes[0]}", f"{v} != {nodes[-1]}"] + [f"{v} != {w}" for w in inner[i + 1:]]
    where = " ".join(parts) + (f" FILTER({' && '.join(filters)})" if filters else "")
    names = " ".join([f"?p{i} ?d{i}" for i in range(hops)] + inner)
    return f"SELECT DISTINCT {names} WHERE {{ {where} }}"


def _extend(layer: list[tuple[list[str], list[tuple[str, str, str, str]]]], adj: Any, avoid: str,
            ) -> list[tuple[list[str], list[tuple[str, str, str, str]]]]:
    """The simple partial paths one edge longer than those of ``layer`` that never touch ``avoid``."""
    nxt = []
    for nodes, steps in layer:
        for p, d, n in adj(nodes[-1]):
            if n == avoid or n in nodes:
                continue
            step = (nodes[-1], p, n, "forward") if d == "forward" else (n, p, nodes[-1], "backward")
            nxt.append((nodes + [n], steps + [step]))
    return nxt


def _in_filter(var: str, relations: frozenset[str] | None) -> str:
    if relations is None:
        return ""
    if not relations:
        return "FILTER(false)"
    return f"FILTER({var} IN ({', '.join(iri_ref(r) for r in sorted(relations))}))"


def _chunks(items: Sequence[Any], size: int = _VALUES_CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]

