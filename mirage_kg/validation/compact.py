"""Compact whole-graph structures for the structural checks: IRIs held once as dense ids, groups and components
as numpy arrays, so that validating a 45M-triple KG fits beside other work (Python sets, dicts and union-find
parents over millions of IRIs took 4.25 GB at that size).

- ``IriTable``: a set of IRIs as one UTF-8 blob in sorted order, each IRI's id its rank (so "the first examples
  in IRI order" is "the smallest ids"), found again from its 64-bit hash (a sorted hash array, no dict).
- ``groups_with_several``: which keys have more than one distinct member, from hashes of (key, member) rows.
- ``ComponentLabels``: connected components over id pairs fed in batches (SciPy's ``connected_components`` on
  each batch's edges between the current components), holding one label per node.

IRIs are hashed from their UTF-8 bytes (``utf8_hashes``: a 64-bit polynomial hash, finished by splitmix64's
mixer, computed in numpy over spans of a byte buffer), so the same hash comes from a Python string or from the
engine's TSV output (``tsv_rows``) with no Python object per value; ``Term`` s are hashed with Python's ``hash``.
Within a table hashes are checked unique (a collision there falls back to an exact dict and string lookups);
that two other values share one somewhere in a run is about 3 in 10^7 at UMLS size (n^2 / 2^65 for n = 3.4M)."""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Sequence
from itertools import groupby
from typing import Any

import numpy as np


def hashes_of(values: Sequence[Hashable]) -> np.ndarray:
    """Each value's Python hash, as int64 (equal values, equal hashes)."""
    return np.fromiter(map(hash, values), dtype=np.int64, count=len(values))


# an odd 64-bit multiplier (invertible modulo 2^64) and its inverse: the polynomial's base
_BASE = 0x9E3779B97F4A7C15
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_powers: list[np.ndarray] = []  # [BASE^i, BASE^-i] for i below their length, grown on demand


_KEPT_POWERS = 1 << 19  # tables kept for buffers up to this many bytes (8 MB); a longer one gets its own


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    if _powers and len(_powers[0]) >= n:
        return _powers[0], _powers[1]
    size = max(n, 1 << 16)
    forward = np.full(size, _BASE, dtype=np.uint64)
    forward[0] = 1
    backward = np.full(size, _BASE_INVERSE, dtype=np.uint64)
    backward[0] = 1
    # unsigned numpy arithmetic wraps modulo 2^64, which is the ring the polynomial lives in
    tables = [np.cumprod(forward, dtype=np.uint64), np.cumprod(backward, dtype=np.uint64)]
    if size <= _KEPT_POWERS:
        _powers[:] = tables
    return tables[0], tables[1]


def utf8_prefix(data: np.ndarray) -> np.ndarray:
    """The prefix sums of sum(b_k * BASE^k) over a uint8 buffer, from which ``span_hashes`` reads any span's hash
    (one pass over the buffer however many spans are hashed)."""
    forward, _ = _power_tables(len(data) + 1)
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum(data.astype(np.uint64) * forward[: len(data)], out=prefix[1:])
    return prefix


def span_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The hash of each span ``[starts[i], ends[i])`` of the buffer ``prefix`` was made from, as int64: the
    polynomial sum(b_k * BASE^k) modulo 2^64 over the span's bytes (its share of the prefix sums shifted back
    to its start by BASE^-start), then the length mixed in and splitmix64's finalizer for the low bits' sake."""
    _, backward = _power_tables(len(prefix))
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    h = (prefix[ends] - prefix[starts]) * backward[starts]
    h ^= (ends - starts).astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h.view(np.int64)


def utf8_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The hash of each span ``data[starts[i]:ends[i]]`` of a uint8 buffer (see ``span_hashes``)."""
    return span_hashes(utf8_prefix(data), starts, ends)


def string_hashes(strings: Sequence[str], window: int = 1 << 12) -> np.ndarray:
    """``utf8_hashes`` of each string's UTF-8 bytes (what a TSV row's IRI hashes to), ``window`` strings at a
    time so the buffers (8 bytes of numpy per byte hashed) stay small."""
    out = np.empty(len(strings), dtype=np.int64)
    for low in range(0, len(strings), window):
        encoded = [s.encode() for s in strings[low: low + window]]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        ends = np.cumsum(lengths)
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        out[low: low + len(encoded)] = utf8_hashes(data, ends - lengths, ends)
    return out


class IriTable:
    """A set of IRIs, each with a dense id in sorted order (code points, as Python sorts ``str``), held as one
    UTF-8 blob with offsets and a sorted hash index: about 60 bytes an IRI where a Python set takes ~120."""

    def __init__(self, iris: Iterable[str] | Iterable[bytes]) -> None:
        # sorted, then repeats dropped (one IRI from several graphs): the one list of strings while building
        # (~100 bytes an IRI), written into the blob one by one rather than through a second list of bytes.
        # The IRIs may come as UTF-8 bytes (read straight from the engine's TSV), which sort as their strings do.
        ordered: list[Any] = sorted(iris)  # all str or all bytes, never mixed
        blob = bytearray()
        ends = array("q")  # 8 bytes an IRI, not a Python int
        kept = 0
        for iri, _ in groupby(ordered):
            ordered[kept] = iri
            kept += 1
            blob += iri if isinstance(iri, bytes) else iri.encode()
            ends.append(len(blob))
        del ordered[kept:]
        self._blob = bytes(blob)
        del blob
        self._offsets = np.zeros(kept + 1, dtype=np.int64)
        self._offsets[1:] = np.frombuffer(ends, dtype=np.int64)
        del ends
        hashes = self._blob_hashes()
        self._by_hash = np.argsort(hashes, kind="stable")
        self._hashes = hashes[self._by_hash]
        # two IRIs of the table with one hash: look them all up exactly (never seen; kept correct, not fast)
        self._exact = ({(iri.decode() if isinstance(iri, bytes) else iri): i for i, iri in enumerate(ordered)}
                       if len(self._hashes) > 1 and bool(np.any(self._hashes[1:] == self._hashes[:-1])) else None)

    def _blob_hashes(self, window: int = 1 << 12) -> np.ndarray:
        """``utf8_hashes`` of every IRI, straight from the blob, ``window`` IRIs at a time."""
        count = len(self._offsets) - 1
        out = np.empty(count, dtype=np.int64)
        for low in range(0, count, window):
            high = min(low + window, count)
            base = int(self._offsets[low])
            data = np.frombuffer(self._blob, dtype=np.uint8, offset=base, count=int(self._offsets[high]) - base)
            out[low:high] = utf8_hashes(data, self._offsets[low:high] - base, self._offsets[low + 1:high + 1] - base)
        return out

    @property
    def exact(self) -> bool:
        """Whether two IRIs of the table share a hash, so that only strings (``ids``) find them apart."""
        return self._exact is not None

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
        return self.ids_of_hashes(string_hashes(iris))

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
