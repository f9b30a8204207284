"""Every node's fact edges in one compact SQLite file beside the degree index (``adjacency.sqlite``), keyed by
the same store fingerprint, so a bridge reads the adjacency of the dozens of nodes it walks in two indexed
lookups of small integer arrays instead of decoding every edge out of the store (four term reads per edge in the
engine: most of a bridge's CPU at UMLS size, and random reads of a 15 GB store when its pages are cold).

It is a derived index like the degree index, never the source of truth: it is built from the same streamed pass
over the store as the degree index (``mirage_kg.index.fact_scan``, one TSV read per fact predicate), holds exactly the edges ``Graph._stored_neighbours`` reads (IRI ends, named
graphs, fact predicates, a self-loop once, forward), and is used only while the degree index file it was built
beside is current for the store's state (``Graph._adjacency_file``). Each node is a row: its IRI, its id, and a
blob of its edges as ``uint32`` other-node ids then ``uint16`` kinds (relation number * 2, plus 1 when the edge
is walked backward)."""

from __future__ import annotations

import json
import sqlite3
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage_kg.index.caching import write_sqlite_in_place
from mirage_kg.model.records import Direction
from mirage_kg.progress import progress_bar

if TYPE_CHECKING:
    from mirage_kg.index.fact_scan import FactScan

FORMAT = "1"  # bump when the layout or what an edge is changes
FILE_NAME = "adjacency.sqlite"
_CHUNK = 500  # keys per IN (...) lookup: well under SQLite's variable limit
_BUCKET = 1 << 20  # node ids sorted per pass of the build (bounds its transient memory)
Edge = tuple[str, Direction, str]  # (relation, "forward"|"backward", other node), as ``Graph.neighbours`` gives them


class AdjacencyFile:
    """The read side of ``adjacency.sqlite`` (read-only): each node's edges, node ids both ways."""

    def __init__(self, path: Path) -> None:
        self.path = path
        from mirage_kg.index.degree import connect_read_only

        self._db = connect_read_only(path)  # through a memory map, as the degree index's file
        # each anchor and bridge reads rows at random places in it: read the whole file ahead once, in order, as
        # the degree index's file is, before the first lookup (a cold row would cost the random read the file
        # exists to avoid)
        meta = dict(self._db.execute("SELECT key, value FROM meta"))
        self.fingerprint = meta.get("fingerprint")
        self.format = meta.get("format")
        self.relations: list[str] = json.loads(meta.get("relations", "[]"))

    def _select_in(self, columns: str, key: str, keys: Iterable[Any]) -> dict[Any, Any]:
        """``{key: value}`` of the ``nodes`` rows whose ``key`` column is one of ``keys``, ``_CHUNK`` keys an
        ``IN (...)`` lookup."""
        wanted = list(keys)
        out: dict[Any, Any] = {}
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start:start + _CHUNK]
            out.update(self._db.execute(f"SELECT {columns} FROM nodes WHERE {key} IN ({','.join('?' * len(chunk))})",
                                        chunk))
        return out

    def _blobs(self, iris: Iterable[str]) -> dict[str, bytes]:
        return self._select_in("iri, edges", "iri", iris)

    def iris(self, ids: Iterable[int]) -> dict[int, str]:
        """The IRI of each id."""
        return self._select_in("id, iri", "id", (int(i) for i in ids))

    def edges(self, iris: Iterable[str]) -> dict[str, list[Edge]]:
        """Every fact edge at each node, in no set order (a node with none is absent): one lookup for the nodes'
        rows and one for the IRIs at the other ends, however many nodes are asked about."""
        import numpy as np

        decoded = {iri: _decode(blob) for iri, blob in self._blobs(iris).items()}
        if not decoded:
            return {}
        others = np.unique(np.concatenate([other for other, _ in decoded.values()]))
        names = self.iris(others.tolist())
        relations, out = self.relations, {}
        walked: tuple[Direction, Direction] = ("forward", "backward")
        for iri, (other, kind) in decoded.items():
            out[iri] = [(relations[k >> 1], walked[k & 1], names[o]) for o, k in zip(other.tolist(), kind.tolist())]
        return out

    def node_edges(self, iri: str) -> list[Edge]:
        """``edges`` of one node (none when it is not on file), read without numpy: anchor asks for one node of a
        dozen edges, where array set-up would cost more than the lookups (two: the row, then its other ends)."""
        row = self._db.execute("SELECT edges FROM nodes WHERE iri = ?", (iri,)).fetchone()
        if row is None:
            return []
        blob = row[0]
        count = len(blob) // 6
        others = struct.unpack_from(f"<{count}I", blob)
        kinds = struct.unpack_from(f"<{count}H", blob, 4 * count)
        names = self.iris(set(others))
        relations = self.relations
        walked: tuple[Direction, Direction] = ("forward", "backward")
        return [(relations[k >> 1], walked[k & 1], names[o]) for o, k in zip(others, kinds)]

    def close(self) -> None:
        self._db.close()


def _decode(blob: bytes) -> tuple[Any, Any]:
    import numpy as np

    count = len(blob) // 6
    return np.frombuffer(blob, dtype="<u4", count=count), np.frombuffer(blob, dtype="<u2", offset=4 * count)


def open_beside(degree_file: Path, fingerprint: str) -> AdjacencyFile | None:
    """The adjacency file beside the degree index file ``degree_file`` if it was built for this store state."""
    path = degree_file.with_name(FILE_NAME)
    if not path.is_file():
        return None
    try:
        found = AdjacencyFile(path)
    except sqlite3.Error:
        return None
    if found.fingerprint == fingerprint and found.format == FORMAT:
        return found
    found.close()
    return None


def build_beside(degree_file: Path, fingerprint: str, scan: FactScan) -> bool:
    """Write the adjacency file beside ``degree_file`` from one pass over the store (``scan``: its fact edges as
    ids, the degree index's predicates), to a temporary file moved into place in one rename (a killed build
    leaves none); False when the folder cannot be written."""
    s_ids, o_ids, kinds, names = scan.subjects, scan.objects, scan.kinds(), scan.names

    def fill(db: sqlite3.Connection) -> None:
        db.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); "
                         "CREATE TABLE nodes (id INTEGER PRIMARY KEY, iri TEXT NOT NULL, edges BLOB NOT NULL);")
        with progress_bar("adjacency index: nodes", total=len(names), unit="nodes") as advance:
            for low in range(0, len(names), _BUCKET):
                high = min(low + _BUCKET, len(names))
                db.executemany("INSERT INTO nodes (id, iri, edges) VALUES (?, ?, ?)",
                               _bucket_rows(names, low, high, s_ids, o_ids, kinds))
                advance(high - low)
        db.execute("CREATE UNIQUE INDEX nodes_by_iri ON nodes (iri)")
        db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                       [("fingerprint", fingerprint), ("format", FORMAT), ("relations", json.dumps(scan.predicates))])

    return write_sqlite_in_place(degree_file.with_name(FILE_NAME), fill)


def _bucket_rows(names: list[str], low: int, high: int, s_ids: Any, o_ids: Any, kinds: Any,
                 ) -> Iterable[tuple[int, str, bytes]]:
    """The rows of nodes ``low`` to ``high``: each stored triple seen from its subject (forward) and from its
    object (backward, except a self-loop, which is one forward edge), one edge per (kind, other) however many
    graphs hold the triple."""
    import numpy as np

    from mirage_kg.index.fact_scan import edges_from_both_ends

    node, other, kind = edges_from_both_ends(s_ids, o_ids, kinds, (s_ids >= low) & (s_ids < high),
                                             (o_ids >= low) & (o_ids < high) & (s_ids != o_ids))
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    ends = np.r_[starts[1:], len(node)]
    other, kind = other.astype("<u4"), kind.astype("<u2")
    for start, end in zip(starts.tolist(), ends.tolist()):
        number = int(node[start])
        yield number, names[number], other[start:end].tobytes() + kind[start:end].tobytes()
