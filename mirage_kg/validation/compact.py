"""Compact whole-graph structures for the structural checks: IRIs held once as dense ids, groups and components
as numpy arrays, so that validating a 45M-triple KG fits beside other work (Python sets, dicts and union-find
parents over millions of IRIs took 4.25 GB at that size).

- ``IriTable``: a set of IRIs as one UTF-8 blob in sorted order, each IRI's id its rank (so "the first examples
  in IRI order" is "the smallest ids"), found again from its 64-bit hash (a sorted hash array, no dict).
- ``groups_with_several``: which keys have more than one distinct member, from hashes of (key, member) rows.
- ``ComponentLabels``: connected components over id pairs fed in batches (SciPy's ``connected_components`` on
  each batch's edges between the current components), holding one label per node.

Hashes are Python's 64-bit ``hash`` of the IRI string or ``Term`` (salted per process, computed once per value):
within a table they are checked unique (a collision there falls back to an exact dict); that two other values
share one somewhere in a run is about 3 in 10^7 at UMLS size (n^2 / 2^65 for n = 3.4M)."""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Sequence
from itertools import groupby

import numpy as np


def hashes_of(values: Sequence[Hashable]) -> np.ndarray:
    """Each value's Python hash, as int64 (equal values, equal hashes)."""
    return np.fromiter(map(hash, values), dtype=np.int64, count=len(values))


class IriTable:
    """A set of IRIs, each with a dense id in sorted order (code points, as Python sorts ``str``), held as one
    UTF-8 blob with offsets and a sorted hash index: about 60 bytes an IRI where a Python set takes ~120."""

    def __init__(self, iris: Iterable[str]) -> None:
        # sorted, then repeats dropped (one IRI from several graphs): the one list of strings while building
        # (~100 bytes an IRI), written into the blob one by one rather than through a second list of bytes
        ordered = sorted(iris)
        blob = bytearray()
        ends = array("q")  # 8 bytes an IRI, not a Python int
        kept = 0
        for iri, _ in groupby(ordered):
            ordered[kept] = iri
            kept += 1
            blob += iri.encode()
            ends.append(len(blob))
        del ordered[kept:]
        self._blob = bytes(blob)
        del blob
        self._offsets = np.zeros(kept + 1, dtype=np.int64)
        self._offsets[1:] = np.frombuffer(ends, dtype=np.int64)
        del ends
        hashes = hashes_of(ordered)
        self._by_hash = np.argsort(hashes, kind="stable")
        self._hashes = hashes[self._by_hash]
        # two IRIs of the table with one hash: look them all up exactly (never seen; kept correct, not fast)
        self._exact = ({iri: i for i, iri in enumerate(ordered)}
                       if len(self._hashes) > 1 and bool(np.any(self._hashes[1:] == self._hashes[:-1])) else None)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def iri(self, ident: int) -> str:
        """The IRI with this id."""
        return self._blob[self._offsets[ident]: self._offsets[ident + 1]].decode()

    def iris(self, idents: Iterable[int]) -> list[str]:
        return [self.iri(int(i)) for i in idents]

    def ids(self, iris: Sequence[str]) -> np.ndarray:
        """Each IRI's id, or -1 for one not in the table."""
        if self._exact is not None:
            return np.fromiter((self._exact.get(iri, -1) for iri in iris), dtype=np.int64, count=len(iris))
        return self.ids_of_hashes(hashes_of(iris))

    def ids_of_hashes(self, hashes: np.ndarray) -> np.ndarray:
        if len(self._hashes) == 0:
            return np.full(len(hashes), -1, dtype=np.int64)
        at = np.searchsorted(self._hashes, hashes)
        at[at == len(self._hashes)] = 0
        return np.where(self._hashes[at] == hashes, self._by_hash[at], -1)

    def __contains__(self, iri: object) -> bool:
        return isinstance(iri, str) and bool(self.ids([iri])[0] >= 0)

    def mask(self, iris: Iterable[str], batch: int = 1 << 18) -> np.ndarray:
        """A boolean array over the ids: which of the table's IRIs occur in ``iris`` (streamed in batches)."""
        seen = np.zeros(len(self), dtype=bool)
        chunk: list[str] = []
        for iri in iris:
            chunk.append(iri)
            if len(chunk) >= batch:
                self._mark(seen, chunk)
                chunk = []
        self._mark(seen, chunk)
        return seen

    def _mark(self, seen: np.ndarray, chunk: list[str]) -> None:
        if chunk:
            found = self.ids(chunk)
            seen[found[found >= 0]] = True


def groups_with_several(keys: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The keys that have more than one distinct member (rows are (key, member) hash pairs, repeats allowed):
    each such key, how many distinct members it has, and the index of one of its rows."""
    if len(keys) == 0:
        return keys[:0], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort((members, keys))
    keys, members = keys[order], members[order]
    distinct = np.ones(len(keys), dtype=bool)
    distinct[1:] = (keys[1:] != keys[:-1]) | (members[1:] != members[:-1])
    keys, order = keys[distinct], order[distinct]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    counts = np.diff(np.append(starts, len(keys)))
    several = counts > 1
    return keys[starts][several], counts[several], order[starts][several]


class ComponentLabels:
    """Connected components of an undirected graph whose edges come in batches of id pairs: one label per node
    (nodes may be added as they appear), merged per batch by SciPy over the batch's edges between labels."""

    def __init__(self, nodes: int = 0) -> None:
        self.labels = np.arange(nodes, dtype=np.int64)
        self.touched = np.zeros(nodes, dtype=bool)

    def grow(self, nodes: int) -> None:
        """Make room for ids up to ``nodes - 1`` (each new node its own component)."""
        if nodes > len(self.labels):
            self.labels = np.concatenate((self.labels, np.arange(len(self.labels), nodes, dtype=np.int64)))
            self.touched = np.concatenate((self.touched, np.zeros(nodes - len(self.touched), dtype=bool)))

    def union(self, left: np.ndarray, right: np.ndarray) -> None:
        """Join each ``left[i]`` with ``right[i]``."""
        if len(left) == 0:
            return
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        self.touched[left] = True
        self.touched[right] = True
        n = len(self.labels)
        graph = coo_matrix((np.ones(len(left), dtype=np.int8), (self.labels[left], self.labels[right])),
                           shape=(n, n)).tocsr()
        _, merged = connected_components(graph, directed=False)
        self.labels = merged[self.labels].astype(np.int64, copy=False)
