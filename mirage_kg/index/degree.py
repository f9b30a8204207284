"""The fact degree of every node (the distinct fact triples it takes part in; a self-loop counts twice), kept in a
SQLite file beside the store, so a query process reads degrees by key instead of holding millions of them in a
dict (a small store keeps a dict, counted natively: ``degree_rows``).

The file is built from one streamed pass over the store (``mirage_kg.index.fact_scan``: every fact edge as integer ids,
each node's best label candidate), the same pass the adjacency file beside it is built from, with numpy sorts
and bulk inserts in key order (``build_on_disk``). The same file keeps the whole adjacency of the
best-connected nodes (``FILED_DEGREE`` edges or more, at most ``FILED_EDGES`` edges in all): bridge asks it which of
many nodes a hub is linked to in one indexed lookup, where the store would need two seeks per node or a read of
every edge at the hub (each decoded term a separate read in the engine).

Beside each degree the file keeps the node's display label (the one ``Graph.labels`` picks): anchor and bridge
show labels of many nodes at random places in the store, one point read each, while the same nodes' degrees are
on the same pages of this small file (see ``LabelRow``).

A hub's anchor (``rank_by`` unset; and any node's of ``FILED_DEGREE`` edges or more) is fully decided by the store's content: after the file is built, the graph
ranks each hub's capped neighbourhood once per ranking and files the order (``file_hub_anchors``, the
``hub_anchors`` table, recorded by the meta key ``hub_anchors``; a file without it is answered as before), so
anchor at a hub reads its top ``k`` per relation in one indexed lookup instead of reading and ranking thousands
of edges."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage_kg.index.caching import write_sqlite_in_place
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import Store
from mirage_kg.model.records import Direction
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.index.fact_scan import FactScan

FORMAT = "4"  # bump when the file's layout or the degree's definition changes
#: nodes with at least this many fact edges have their adjacency on file (the heavy tail: 17 nodes at 2.2M
#: triples, ~600 at UMLS size), the best connected first, until ``FILED_EDGES`` edges are on file
FILED_DEGREE = 1_000
FILED_EDGES = 4_000_000  # ~60 bytes each on disk; a query process holds none of them
_CHUNK = 500  # keys per IN (...) lookup: well under SQLite's variable limit
_MEMO = 50_000  # rows kept in memory after a lookup (bounded: the index itself stays on disk)
_BATCH = 50_000  # rows per executemany while building
#: positions per (relation, direction) kept for a hub's filed anchor: anchor with a larger ``k`` ranks as before
#: (the whole capped order would be ~5x the rows: ~230 MB at UMLS size for k values nobody asks)
HUB_ANCHOR_DEPTH = 50
#: a hub's filed anchor step: (relation, direction, neighbour node, the stored other end, position in its group)
HubAnchorRow = tuple[str, Direction, str, str, int]
_ABSENT: tuple[int, str | None] = (-1, None)  # the memo's entry for an IRI the index lacks (no facts)

#: one label literal of a node, as the builder streams them: (node, rank, text), ``rank`` being the tuple of
#: integers and strings the choice rule sorts by (the smallest wins: ``Graph.labels``' rule, see ``label_rank``
#: in ``mirage_kg.graph.labels``); its strings compare in SQLite as in Python (UTF-8 bytes keep code point order)
LabelRow = tuple[str, tuple[int, int, str], str]


class DiskDegrees(Mapping[str, int]):
    """A degree index in a SQLite file (read-only): ``get`` and ``many`` look keys up, a bounded memo keeps the
    recent ones; iterating reads the file in key order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = connect_read_only(path)
        self._count = int(self._meta("count") or 0)
        #: the fact predicates the index counted (a hub's relations are probed among these)
        self.predicates: list[str] = json.loads(self._meta("predicates") or "[]")
        self._memo: dict[str, tuple[int, str | None]] = {}  # iri -> its row, or ``_ABSENT``
        try:  # node -> its id in ``links`` for the nodes whose adjacency is on file (a few hundred at most)
            self._filed: dict[str, int] = dict(self._db.execute("SELECT iri, id FROM filed"))
        except sqlite3.Error:  # a file of an older format: the caller rebuilds it
            self.close()
            raise
        self._relations: list[str] = json.loads(self._meta("filed_relations") or "[]")
        #: whether the file holds each node's display label (``labels``)
        self.labelled = self._meta("labelled") == "1"
        #: whether the store held any annotation record (``rdf:subject`` / ``rdf:object``) when the file was built
        #: (unknown: assumed so); none means anchor's ranking has no frequency to look up at any node
        self.annotated = self._meta("annotated") != "0"

    @property
    def fingerprint(self) -> str | None:
        """The store state the file was built for (what keys files built beside it, e.g. the adjacency index)."""
        return self._meta("fingerprint")

    def hub_anchor_settings(self) -> dict[str, Any] | None:
        """The settings the filed hub anchors were ranked under (``file_hub_anchors``), or None: none filed."""
        value = self._meta("hub_anchors")
        return json.loads(value) if value else None

    def hub_anchor_rows(self, iri: str, rank: str, k: int) -> list[HubAnchorRow] | None:
        """The filed anchor of hub ``iri`` ranked by ``rank``: the steps within the first ``k`` of each (relation,
        direction), in anchor's order; None when the hub is not on file. One indexed lookup."""
        settings = self.hub_anchor_settings()
        if settings is None:
            return None
        found = self._db.execute("SELECT id FROM hub_anchor_nodes WHERE iri = ?", (iri,)).fetchone()
        if found is None:
            return None
        relations: list[str] = settings["relations"]
        rows = sorted(self._db.execute(
            "SELECT ordinal, relation, forward, other, stored_end, position FROM hub_anchors "
            "WHERE hub = ? AND rank = ? AND position < ?", (found[0], rank, k)))
        return [(relations[r], "forward" if f else "backward", other, end if end is not None else other, position)
                for _, r, f, other, end, position in rows]

    def file_hub_anchors(self, settings: dict[str, object],
                         anchors: Iterable[tuple[str, str, list[HubAnchorRow]]]) -> bool:
        """Add each hub's ranked anchor rows ((hub, rank, its rows in anchor's order) from ``anchors``) to the file
        in one transaction, under ``settings`` (replacing any filed under other settings); False (nothing written)
        when the file cannot be written or another process filed them first."""
        # every row is made before the write lock is taken: ranking reads this same file, and a write transaction
        # that spills its cache locks all readers out (at S = 1.0 each query process's ranking then failed on
        # "database is locked" 9-16 s in, nothing was filed, and the next process ranked again)
        made = list(anchors)
        try:
            db = sqlite3.connect(self.path, timeout=60)
        except sqlite3.Error:
            return False
        try:
            db.execute("BEGIN IMMEDIATE")
            filed = db.execute("SELECT value FROM meta WHERE key = 'hub_anchors'").fetchone()
            if filed is not None:
                earlier = json.loads(filed[0])
                earlier.pop("relations", None)
                if earlier == settings:
                    db.rollback()
                    return False
                # ranked under other settings: replaced
                db.executescript("DELETE FROM hub_anchors; DELETE FROM hub_anchor_nodes; "
                                 "DELETE FROM meta WHERE key = 'hub_anchors';")
            db.execute("CREATE TABLE IF NOT EXISTS hub_anchor_nodes (id INTEGER PRIMARY KEY, iri TEXT NOT NULL UNIQUE)")
            db.execute("CREATE TABLE IF NOT EXISTS hub_anchors (hub INTEGER NOT NULL, rank TEXT NOT NULL, "
                       "position INTEGER NOT NULL, ordinal INTEGER NOT NULL, relation INTEGER NOT NULL, "
                       "forward INTEGER NOT NULL, other TEXT NOT NULL, stored_end TEXT, "
                       "PRIMARY KEY (hub, rank, position, ordinal)) WITHOUT ROWID")
            relations: dict[str, int] = {}
            hubs: dict[str, int] = {}
            for hub, rank, rows in made:
                if hub not in hubs:
                    hubs[hub] = len(hubs)
                    db.execute("INSERT INTO hub_anchor_nodes (id, iri) VALUES (?, ?)", (hubs[hub], hub))
                number = hubs[hub]
                db.executemany(
                    "INSERT INTO hub_anchors (hub, rank, position, ordinal, relation, forward, other, stored_end) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(number, rank, position, ordinal, relations.setdefault(p, len(relations)),
                      1 if d == "forward" else 0, other, None if end == other else end)
                     for ordinal, (p, d, other, end, position) in enumerate(rows)])
            meta = dict(settings, relations=sorted(relations, key=relations.__getitem__))
            db.execute("INSERT INTO meta (key, value) VALUES ('hub_anchors', ?)", (json.dumps(meta),))
            db.commit()
            return True
        except sqlite3.Error:
            db.rollback()
            return False
        finally:
            db.close()

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def __getitem__(self, iri: str) -> int:
        found = self.many([iri])
        if iri not in found:
            raise KeyError(iri)
        return found[iri]

    def get(self, iri: str, default: int = 0) -> int:  # type: ignore[override]  # a count: the default is an int, never None
        row = self._memo.get(iri)
        if row is not None:
            return row[0] if row[0] >= 0 else default
        return self.many([iri]).get(iri, default)

    def many(self, iris: Iterable[str]) -> dict[str, int]:
        """The degree of each IRI the index holds (absent: no facts), a lookup per chunk of keys."""
        return {iri: row[0] for iri, row in self._rows(iris).items()}

    def labels(self, iris: Iterable[str]) -> dict[str, str | None]:
        """The display label on file of each IRI the index holds (None: the node has no label literal, so its
        CURIE is shown); an IRI the index lacks (no facts) is absent. Empty when the file holds no labels."""
        if not self.labelled:
            return {}
        return {iri: row[1] for iri, row in self._rows(iris).items()}

    def _rows(self, iris: Iterable[str]) -> dict[str, tuple[int, str | None]]:
        """(degree, label) of each IRI the index holds: from the memo, else one lookup per chunk of keys. A row
        is read and kept whole, so the labels anchor shows after ranking by degree cost no second lookup."""
        out: dict[str, tuple[int, str | None]] = {}
        memo, missing = self._memo, []
        for iri in iris:
            row = memo.get(iri)
            if row is None:
                missing.append(iri)
            elif row[0] >= 0:
                out[iri] = row
        if not missing:
            return out
        found: dict[str, tuple[int, str | None]] = {}
        for start in range(0, len(missing), _CHUNK):
            chunk = missing[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            for iri, degree, label in self._db.execute(
                    f"SELECT iri, degree, label FROM degrees WHERE iri IN ({marks})", chunk):
                found[iri] = (degree, label)
        if len(memo) + len(missing) > _MEMO:
            memo.clear()
        for iri in missing:
            memo[iri] = found.get(iri, _ABSENT)
        out.update(found)
        return out

    def nodes_of_degree(self, at_least: int) -> list[str]:
        """The nodes of ``at_least`` fact edges or more, by IRI."""
        return [iri for (iri,) in self._db.execute("SELECT iri FROM degrees WHERE degree >= ? ORDER BY iri",
                                                    (at_least,))]

    def is_filed(self, iri: str) -> bool:
        """Whether ``iri``'s whole adjacency is on file (``filed_links``, ``filed_links_to``)."""
        return iri in self._filed

    def filed_links(self, iri: str) -> list[tuple[str, Direction, str]]:
        """(relation, "forward"|"backward", other node) of every fact edge at a node on file, in no set order."""
        relations = self._relations
        rows = self._db.execute("SELECT other, relation, forward FROM links WHERE node = ?", (self._filed[iri],))
        return [(relations[r], "forward" if f else "backward", other) for other, r, f in rows]

    def filed_links_to(self, iri: str, others: Iterable[str]) -> list[tuple[str, Direction, str]]:
        """The edges of ``filed_links(iri)`` whose other end is among ``others``: one indexed lookup per chunk."""
        relations, node, wanted = self._relations, self._filed[iri], list(others)
        out: list[tuple[str, Direction, str]] = []
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT other, relation, forward FROM links WHERE node = ? AND other IN ({marks})",
                                    (node, *chunk))
            out.extend((relations[r], "forward" if f else "backward", other) for other, r, f in rows)
        return out

    def filed_common_links(self, iri: str, other: str) -> list[tuple[str, str, Direction, str, Direction]]:
        """(node x, relation, direction seen from ``iri``, relation, direction seen from ``other``) for each pair
        of edges ``iri - x - other``, both nodes on file: one join in the file, where reading ``iri``'s edges and
        asking ``other`` about each end would bind every one of them."""
        relations = self._relations
        rows = self._db.execute(
            "SELECT a.other, a.relation, a.forward, b.relation, b.forward FROM links a "
            "JOIN links b ON b.node = ? AND b.other = a.other WHERE a.node = ?", (self._filed[other], self._filed[iri]))
        return [(x, relations[r1], "forward" if f1 else "backward", relations[r2], "forward" if f2 else "backward")
                for x, r1, f1, r2, f2 in rows]

    def __iter__(self) -> Iterator[str]:
        for (iri,) in self._db.execute("SELECT iri FROM degrees ORDER BY iri"):
            yield iri

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to an index file beside the store (this degree index, the adjacency index), read
    through a memory map: a lookup costs no read() call (``pread`` instead cost ~25% more CPU an anchor or a bridge
    at S = 1.0), and the pages are the OS's file cache (shared, dropped under pressure), not this process's memory;
    a page not in that cache comes in on its first fault."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    db.execute("PRAGMA mmap_size = 1073741824")
    return db


class MemoryDegrees(dict[str, int]):
    """A small store's degree index: a dict with ``many`` and the fact ``predicates`` it counted."""

    predicates: list[str] = []

    def many(self, iris: Iterable[str]) -> dict[str, int]:
        return {iri: self[iri] for iri in iris if iri in self}

    annotated = True  # not known: anchor looks its annotation records up in the store

    def is_filed(self, iri: str) -> bool:  # a small store reads every adjacency from the store itself
        return False

    def labels(self, iris: Iterable[str]) -> dict[str, str | None]:  # and its labels
        return {}

    def hub_anchor_settings(self) -> dict[str, Any] | None:  # and ranks every anchor
        return None

    def hub_anchor_rows(self, iri: str, rank: str, k: int) -> list[HubAnchorRow] | None:
        return None


def fact_predicates(store: Store, non_fact: frozenset[str]) -> list[str]:
    """The predicates that can make a fact (one native ``DISTINCT ?p``), sorted."""
    found = [r["p"] for r in store.select_all("SELECT DISTINCT ?p WHERE { GRAPH ?g { ?s ?p ?o } }")]
    return sorted(p.value for p in found if p.kind == "uri" and p.value not in non_fact)


def degree_rows(store: Store, predicates: list[str], fallback_query: str) -> Iterator[tuple[str, int]]:
    """(node, count) rows whose sums per node are the degrees. Each fact predicate is counted natively in the
    graph that holds most of its quads (a graph cannot hold a triple twice, so no ``DISTINCT`` is needed: the
    engine keeps one counter per node, not every triple); its quads in any other graph (the schema's few
    ``subClassOf``, a second source) are read here and count only when no graph counted so far holds the triple."""
    if not predicates:
        yield from _count_rows(store, fallback_query)
        return
    graphs = store.graphs()
    main: list[tuple[str, str]] = []
    others: list[tuple[str, list[str]]] = []
    for p in predicates:
        holders = [g for g in graphs if next(store.quads(None, p, None, g), None) is not None]
        if len(holders) > 1:
            sizes = {g: _quad_count(store, p, g) for g in holders}
            holders.sort(key=lambda g: (-sizes[g], g))
            others.append((p, holders))
        main.extend((p, g) for g in holders[:1])
    if main:
        pairs = " ".join(f"({iri_ref(p)} {iri_ref(g)})" for p, g in main)
        yield from _count_rows(store, (
            f"SELECT ?n (COUNT(*) AS ?d) WHERE {{ VALUES (?p ?g) {{ {pairs} }} GRAPH ?g {{ ?s ?p ?o }} "
            f"FILTER(isIRI(?o)) VALUES ?pos {{ 1 2 }} BIND(IF(?pos = 1, ?s, ?o) AS ?n) }} GROUP BY ?n"))
    for p, holders in others:
        counted = holders[0]
        seen: set[tuple[str, str]] = set()
        for graph in holders[1:]:
            for quad in store.quads(None, p, None, graph):
                if quad.object.kind != "uri":
                    continue
                s, o = quad.subject.value, quad.object.value
                if (s, o) in seen or next(store.quads(quad.subject, p, quad.object, counted), None) is not None:
                    continue
                seen.add((s, o))
                yield s, 1
                yield o, 1


def _quad_count(store: Store, predicate: str, graph: str) -> int:
    rows = store.select(f"SELECT (COUNT(*) AS ?c) WHERE {{ GRAPH {iri_ref(graph)} {{ ?s {iri_ref(predicate)} ?o }} }}")
    return int(rows[0]["c"].value) if rows else 0


def _count_rows(store: Store, query: str) -> Iterator[tuple[str, int]]:
    for row in store.select_all(query):
        yield row["n"].value, int(row["d"].value)


def in_memory(rows: Iterable[tuple[str, int]], predicates: list[str]) -> MemoryDegrees:
    out = MemoryDegrees()
    for node, count in rows:
        out[node] = out.get(node, 0) + count
    out.predicates = predicates
    return out


def open_on_disk(path: Path, fingerprint: str) -> DiskDegrees | None:
    """The index at ``path`` if it was built for this store state, else None."""
    if not path.is_file():
        return None
    try:
        index = DiskDegrees(path)
        if index._meta("fingerprint") == fingerprint and index._meta("format") == FORMAT:
            return index
        index.close()
    except sqlite3.Error:
        pass
    return None


def build_on_disk(path: Path, fingerprint: str, scan: FactScan, fallback: Callable[[], MemoryDegrees],
                  non_concepts: frozenset[str] = frozenset(), annotated: bool = True) -> DiskDegrees | MemoryDegrees:
    """Write the index from one pass over the store (``scan``: its fact edges as ids, each node's best label
    candidate when it read them) to a temporary file moved into place in one rename (a killed build leaves no
    index); where the folder cannot be written, the index stays in memory (``fallback``). The best-connected
    nodes' edges are filed (``FILED_DEGREE``), less those to ``non_concepts``; ``annotated``: whether the store
    holds annotation records."""
    def fill(db: sqlite3.Connection) -> None:
        db.executescript("CREATE TABLE degrees (iri TEXT PRIMARY KEY, degree INTEGER NOT NULL, label TEXT) "
                         "WITHOUT ROWID; "
                         "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); "
                         "CREATE TABLE filed (id INTEGER PRIMARY KEY, iri TEXT NOT NULL UNIQUE); "
                         "CREATE TABLE links (node INTEGER NOT NULL, other TEXT NOT NULL, relation INTEGER NOT NULL, "
                         "forward INTEGER NOT NULL, PRIMARY KEY (node, other, relation, forward)) WITHOUT ROWID;")
        rows = _degree_rows(scan)
        with progress_bar("degree index: nodes", total=len(rows), unit="nodes") as advance:
            for start in range(0, len(rows), _BATCH * 10):
                batch = rows[start:start + _BATCH * 10]
                db.executemany("INSERT INTO degrees (iri, degree, label) VALUES (?, ?, ?)", batch)
                advance(len(batch))
        relations = _file_hub_links(db, scan, rows, non_concepts)
        db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                       [("fingerprint", fingerprint), ("format", FORMAT), ("count", str(len(rows))),
                        ("predicates", json.dumps(scan.predicates)), ("filed_relations", json.dumps(relations)),
                        ("labelled", "1" if scan.labels is not None else "0"),
                        ("annotated", "1" if annotated else "0")])

    if not write_sqlite_in_place(path, fill):
        return fallback()
    return DiskDegrees(path)


def _degree_rows(scan: FactScan) -> list[tuple[str, int, str | None]]:
    """(node, degree, display label or None) of every node with a fact, in key order (the table's order, so
    each insert appends)."""
    labels = scan.labels or {}
    names = scan.names
    rows: list[tuple[str, int, str | None]] = [
        (names[node], degree, found[1] if (found := labels.get(node)) is not None else None)
        for node, degree in enumerate(scan.degrees().tolist())]
    rows.extend((name, degree, found[1] if (found := labels.get(name)) is not None else None)
                for name, degree in scan.extra_degrees.items())
    rows.sort()
    return rows


def _file_hub_links(db: sqlite3.Connection, scan: FactScan, rows: list[tuple[str, int, str | None]],
                    non_concepts: frozenset[str]) -> list[str]:
    """Write the fact edges of the nodes with ``FILED_DEGREE`` edges or more, the best connected first, while the
    total stays within ``FILED_EDGES`` (``Graph._stored_neighbours``' edges: distinct, a self-loop once, none to a
    non-concept), read from ``scan``'s arrays in one pass over them; returns the relations, whose positions the
    rows store (numbered as the hubs' edges come, each hub's in relation order)."""
    import numpy as np

    chosen = sorted(((iri, degree) for iri, degree, _ in rows if degree >= FILED_DEGREE),
                    key=lambda row: (-row[1], row[0]))
    if not chosen:
        return []
    node_ids = [scan.id_of(iri) for iri, _ in chosen]
    size = len(scan.names)
    is_hub = np.zeros(size, dtype=bool)
    is_hub[[n for n in node_ids if n is not None]] = True
    blocked = np.zeros(size, dtype=bool)
    blocked[[n for n in map(scan.id_of, non_concepts) if n is not None]] = True
    from mirage_kg.index.fact_scan import edges_from_both_ends

    s, o = scan.subjects, scan.objects
    node, other, kind = edges_from_both_ends(s, o, scan.kinds(), is_hub[s] & ~blocked[o],
                                             is_hub[o] & (s != o) & ~blocked[s])
    relations: dict[str, int] = {}
    budget = FILED_EDGES
    for number, ((iri, degree), hub) in enumerate(zip(chosen, node_ids)):
        if degree > budget:
            continue  # a smaller node may still fit
        if hub is None:
            edges_other, edges_kind = other[:0], kind[:0]
        else:
            low, high = np.searchsorted(node, [hub, hub + 1])
            edges_other, edges_kind = other[low:high], kind[low:high]
        budget -= len(edges_other)
        position = {p: relations.setdefault(scan.predicates[p], len(relations))
                    for p in sorted(set((edges_kind >> 1).tolist()))}
        db.execute("INSERT INTO filed (id, iri) VALUES (?, ?)", (number, iri))
        names = scan.names
        db.executemany("INSERT INTO links (node, other, relation, forward) VALUES (?, ?, ?, ?)",
                       [(number, names[x], position[k >> 1], 0 if k & 1 else 1)
                        for x, k in zip(edges_other.tolist(), edges_kind.tolist())])
    return sorted(relations, key=relations.__getitem__)
