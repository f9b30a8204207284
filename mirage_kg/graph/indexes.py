"""The files derived beside a store that the graph queries read: the degree index (every node's fact degree, and
past ``limits.DEGREE_INDEX_ON_DISK`` triples a file that also holds labels, the best connected nodes' edges and the
hubs' ranked anchors) and the adjacency file beside it, opened or built once per store state and trusted only while
nothing was written through the store since; degrees (a merged concept's too) and the concept count the
specificity ranking divides by."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Literal, overload

from mirage_kg.graph import limits
from mirage_kg.graph.facts import NON_FACT_PREDICATES, NOT_FACT, chunks
from mirage_kg.graph.labels import LABEL_PREDICATES, label_rank
from mirage_kg.graph.state import GraphBase, GraphState
from mirage_kg.index import adjacency as adjacency_index, degree as degree_index
from mirage_kg.index.caching import cache_folder, store_fingerprint
from mirage_kg.index.fact_scan import scan_facts
from mirage_kg.model.namespaces import RDF
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.graph.state import DegreeTable
    from mirage_kg.index.adjacency import AdjacencyFile

DEGREE_QUERY = (
    f"SELECT ?n (COUNT(*) AS ?d) WHERE {{ {{ SELECT DISTINCT ?s ?p ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }} "
    f"FILTER(isIRI(?o) && ?p NOT IN ({NOT_FACT})) }} }} VALUES ?pos {{ 1 2 }} "
    f"BIND(IF(?pos = 1, ?s, ?o) AS ?n) }} GROUP BY ?n")


class IndexedGraph(GraphBase):
    """``GraphBase`` with the degree index and the adjacency file: degrees, and the files' current state."""

    def _file_hub_anchors(self, table: DegreeTable) -> None:
        """Rank and file the hubs' anchors in ``table`` where it lacks them: the anchor layer
        (``mirage_kg.graph.anchor``) does it; a graph without one files none."""

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

    def _with_hub_anchors(self, state: GraphState) -> None:
        """Once per state, the first time its degree index is used: file the hubs' anchors if the file lacks them
        (they are ranked through this graph, so the index is in place first)."""
        if not state.hub_anchors_sought and state.degrees is not None and state.degrees_version == self.store.version:
            state.hub_anchors_sought = True
            self._file_hub_anchors(state.degrees)

    def _with_adjacency(self, state: GraphState) -> None:
        """Once per state, the first time its degree index file is used: open the adjacency file built beside it
        for this store state (``mirage_kg.index.adjacency``), building it first where it is missing and the folder
        can be written (one pass over the store, like the degree index's)."""
        table = state.degrees
        if state.adjacency_sought or not isinstance(table, degree_index.DiskDegrees) or state.degrees_version != self.store.version:
            return
        state.adjacency_sought = True
        fingerprint = table.fingerprint
        if fingerprint is None:  # never: a degree file is opened only when its fingerprint is the store's
            return
        state.adjacency = adjacency_index.open_beside(table.path, fingerprint)
        # a degree file built before the adjacency file existed (or by a read-only process): its edges alone
        if state.adjacency is None and self._may_build_adjacency(table.path) and \
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

    def degrees(self, iris: Iterable[str]) -> dict[str, int]:
        """Fact degree of each entity: distinct fact triples it takes part in (a self-loop counts twice)."""
        wanted = list(dict.fromkeys(iris))
        state = self._state()
        if self.store.indexed:  # the whole index in one pass, cached; an endpoint is asked per batch
            found = self._degree_table().many(wanted)
            return {i: found.get(i, 0) for i in wanted}
        missing = [i for i in wanted if i not in state.degree_cache]
        for chunk in chunks(missing):
            rows = self.store.select(
                f"SELECT ?n (COUNT(*) AS ?d) WHERE {{ SELECT DISTINCT ?n ?dir ?p ?x WHERE {{ "
                f"VALUES ?n {{ {' '.join(iri_ref(i) for i in chunk)} }} "
                f"{{ GRAPH ?g {{ ?n ?p ?x }} BIND(1 AS ?dir) }} UNION {{ GRAPH ?g {{ ?x ?p ?n }} BIND(2 AS ?dir) }} "
                f"FILTER(isIRI(?x) && ?p NOT IN ({NOT_FACT})) }} }} GROUP BY ?n")
            got = {r["n"].value: int(r["d"].value) for r in rows}
            for i in chunk:
                state.degree_cache[i] = got.get(i, 0)
        return {i: state.degree_cache[i] for i in wanted}

    def _degree_table(self) -> DegreeTable:
        """The embedded store's degree index (``mirage_kg.index.degree``), built on first use."""
        state = self._state()
        table = state.degrees
        if table is None:
            table = state.degrees = self._degree_index()
            state.degrees_version = self.store.version
        self._with_hub_anchors(state)
        self._with_adjacency(state)
        return table

    @overload
    def _degree_index(self, build: Literal[True] = ...) -> DegreeTable: ...
    @overload
    def _degree_index(self, build: bool) -> DegreeTable | None: ...

    def _degree_index(self, build: bool = True) -> DegreeTable | None:
        """Every entity's degree in one native pass over the store; past 200k triples kept in a SQLite file
        beside the store, keyed by the store's fingerprint (built once; a query process holds none of it).
        ``build=False``: only a file already built for this store state, else None."""
        def rows(predicates: list[str]) -> Iterable[tuple[str, int]]:
            return degree_index.degree_rows(self.store, predicates, DEGREE_QUERY)

        # where the store names its content without a count (on disk), a cached file is looked for first and the
        # store's size is bounded only when building; else the count that keys the cache decides too
        keyed = self.store.content_key().key is not None
        if not build and not keyed:
            return None  # a file is found only by the store's own key (a count would read every quad)
        size = None if keyed else self.store.triple_count()
        fingerprint = store_fingerprint(self.store, size)
        on_disk = size > limits.DEGREE_INDEX_ON_DISK if size is not None else True
        folder = cache_folder(self.store, fingerprint, self.cache_dir) if on_disk else None
        path = folder / "degrees.sqlite" if folder is not None else None
        if path is not None:
            found = degree_index.open_on_disk(path, fingerprint)
            if found is not None or not build:
                return found
            if size is None and not self._holds_more_than(limits.DEGREE_INDEX_ON_DISK):
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
                    f"?p NOT IN ({NOT_FACT})) }}")
                state.concept_count = int(rows[0]["n"].value) if rows else 0
        return max(state.concept_count, 1)
