"""One streamed pass over an embedded store's fact edges (and, for the degree index, its label literals), held as
integer node ids in numpy arrays: what the degree index (``degree_index.build_on_disk``) and the adjacency file
(``adjacency_index.build_beside``) are both built from, so a freshly loaded store is read once for the two.

The engine writes each fact predicate's rows as SPARQL TSV (``Store.tsv_blocks``) in blocks of whole lines: no
Python object per row or per term. A block's terms are split in one call, numbered in order of first sight (the
adjacency file's ids: the same order as a row-by-row read of the same queries) with C-level dict operations, and
decoded to text once per node, not once per edge."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from mirage_kg.progress import progress_bar
from mirage_kg.store.base import Store
from mirage_kg.model.terms import iri_ref

#: a label candidate's rank as ``degree_index.LabelRow`` orders it: (predicate's place, language class, language)
LabelRank = tuple[int, int, str]
_TSV_ESCAPES = {b"t": b"\t", b"n": b"\n", b"r": b"\r", b'"': b'"', b"\\": b"\\"}
_ESCAPED = re.compile(rb"\\(.)")


@dataclass
class FactScan:
    """Every stored fact row as (subject id, object id), predicate by predicate, plus what the degree index needs.

    ``names[i]`` is node ``i``'s IRI, ids handed out in order of first sight (subject before object, predicates
    in ``predicates`` order); ``subjects``/``objects`` hold one entry per stored row (a triple held by two graphs
    twice), the rows of ``predicates[k]`` being the ``counts[k]`` after those of the predicates before it."""

    predicates: list[str]
    names: list[str]
    subjects: Any  # numpy uint32
    objects: Any  # numpy uint32
    counts: list[int]
    #: distinct fact triples of nodes that are not IRI ends of an IRI-to-IRI fact (blank-node subjects, and
    #: IRIs met only as their objects), by the value the degree index keys them by
    extra_degrees: dict[str, int] = field(default_factory=dict)
    #: the same triples' count at their object, where the object has an id
    extra_by_id: dict[int, int] = field(default_factory=dict)
    #: the best label candidate of each node (by id, or by IRI for an ``extra_degrees`` node): (rank, text)
    labels: dict[int | str, tuple[LabelRank, str]] | None = None
    #: each node's id by its IRI as the engine writes it (``<iri>``)
    ids: dict[bytes, int] = field(default_factory=dict, repr=False)

    def kinds(self) -> Any:
        """Each row's edge kind as the adjacency file stores it: the predicate's number times two (forward)."""
        import numpy as np

        return np.repeat(np.arange(len(self.predicates), dtype=np.uint16) * 2, self.counts)

    def degrees(self) -> Any:
        """The fact degree of each id (int64): the distinct triples it is an end of, a self-loop counting twice
        (a triple stored in several graphs once)."""
        import numpy as np

        size = len(self.names)
        out = np.zeros(size, dtype=np.int64)
        start = 0
        for rows in self.counts:
            pairs = np.unique((self.subjects[start:start + rows].astype(np.uint64) << np.uint64(32))
                              | self.objects[start:start + rows].astype(np.uint64))
            out += np.bincount((pairs >> np.uint64(32)).astype(np.int64), minlength=size)
            out += np.bincount((pairs & np.uint64(0xFFFFFFFF)).astype(np.int64), minlength=size)
            start += rows
        for node, extra in self.extra_by_id.items():
            out[node] += extra
        return out

    def id_of(self, iri: str) -> int | None:
        """The id of ``iri``, None when it is no IRI end of a fact edge."""
        return self.ids.get(b"<" + iri.encode("utf-8") + b">")

    def degree_rows(self) -> Iterator[tuple[str, int]]:
        """(node, degree) of every node with a fact (``degree_index.in_memory``'s input)."""
        yield from zip(self.names, self.degrees().tolist())
        yield from self.extra_degrees.items()



def edges_from_both_ends(subjects: Any, objects: Any, kinds: Any, forward: Any, backward: Any) -> tuple[Any, Any, Any]:
    """The rows picked by ``forward`` seen from their subject and those picked by ``backward`` from their object
    (kind + 1), as (node, other, kind) arrays sorted by node, kind, other, each edge once however many graphs hold
    its triple: the one grouping both the adjacency file and the degree file's filed hubs are written from."""
    import numpy as np

    node = np.concatenate([subjects[forward], objects[backward]])
    other = np.concatenate([objects[forward], subjects[backward]])
    kind = np.concatenate([kinds[forward], kinds[backward] + 1])
    order = np.lexsort((other, kind, node))
    node, other, kind = node[order], other[order], kind[order]
    fresh = np.ones(len(node), dtype=bool)
    fresh[1:] = (node[1:] != node[:-1]) | (kind[1:] != kind[:-1]) | (other[1:] != other[:-1])
    return node[fresh], other[fresh], kind[fresh]

def scan_facts(store: Store, predicates: list[str], label_predicates: Iterable[str] | None = None,
               rank_language: Callable[[str | None], tuple[int, str]] | None = None) -> FactScan:
    """Read every fact edge of ``predicates`` (IRI objects; IRI or blank-node subjects, in named graphs) and, when
    ``label_predicates`` is given, every label literal of an IRI, keeping each node's best: the predicate's place,
    then ``rank_language`` of its language tag (``mirage_kg.graph.labels.label_rank``), then the text."""
    import numpy as np

    ids: dict[bytes, int] = {}  # "<iri>" as the engine writes it -> id
    subject_parts: list[Any] = []  # one uint32 array of ids per block
    object_parts: list[Any] = []
    counts: list[int] = []
    blank_triples: set[tuple[int, bytes, bytes]] = set()  # (predicate, subject, object) with a blank subject
    getter = ids.__getitem__

    def number(tokens: list[bytes]) -> Any:
        fresh = [t for t in dict.fromkeys(tokens) if t not in ids]
        ids.update(zip(fresh, count(len(ids))))
        return np.fromiter(map(getter, tokens), dtype=np.uint32, count=len(tokens))

    with progress_bar("fact index: edges", unit="edges") as advance:
        for k, predicate in enumerate(predicates):
            rows_before = sum(len(p) for p in subject_parts)

            def edges(block: bytes, k: int = k) -> None:
                tokens = block.replace(b"\n", b"\t").split(b"\t")
                tokens.pop()  # after the block's last newline
                # the engine filters nothing (a FILTER(isIRI(?o)) cost it a third more): a block whose every
                # object is an IRI and every subject one too is taken whole, else row by row
                if block.count(b"\t<") != len(tokens) // 2 or b"\t<<" in block or block.startswith(b"_:") or \
                        b"\n_:" in block:
                    kept: list[bytes] = []
                    for s, o in zip(tokens[0::2], tokens[1::2]):
                        if not o.startswith(b"<") or o.startswith(b"<<"):
                            continue  # a literal (or a triple term): no fact edge
                        if s.startswith(b"_:"):
                            blank_triples.add((k, s, o))  # counted in the degrees, never in the adjacency file
                        elif not s.startswith(b"<<"):
                            kept += (s, o)
                    tokens = kept
                codes = number(tokens)
                subject_parts.append(codes[0::2].copy())
                object_parts.append(codes[1::2].copy())
                advance(len(tokens) // 2)

            store.tsv_blocks(f"SELECT ?s ?o WHERE {{ GRAPH ?g {{ ?s {iri_ref(predicate)} ?o }} }}", ("s", "o"), edges)
            counts.append(sum(len(p) for p in subject_parts) - rows_before)
    empty = np.zeros(0, dtype=np.uint32)
    subjects = np.concatenate(subject_parts) if subject_parts else empty
    subject_parts.clear()  # the parts' memory, before the next concatenation
    objects = np.concatenate(object_parts) if object_parts else empty
    object_parts.clear()
    names = [t[1:-1].decode("utf-8") for t in ids]
    extra: dict[str, int] = {}
    extra_by_id: dict[int, int] = {}
    for _, s, o in blank_triples:
        blank = s[2:].decode("utf-8")
        extra[blank] = extra.get(blank, 0) + 1
        if o in ids:
            extra_by_id[ids[o]] = extra_by_id.get(ids[o], 0) + 1
        else:
            key = o[1:-1].decode("utf-8")
            extra[key] = extra.get(key, 0) + 1
    scan = FactScan(list(predicates), names, subjects, objects, counts, extra, extra_by_id, ids=ids)
    if label_predicates is not None:
        if rank_language is None:
            raise TypeError("scan_facts: label_predicates needs rank_language")
        scan.labels = _best_labels(store, list(label_predicates), rank_language, ids, extra)
    return scan


def _best_labels(store: Store, predicates: list[str], label_rank: Callable[[str | None], tuple[int, str]],
                 ids: dict[bytes, int], extra: dict[str, int]) -> dict[int | str, tuple[LabelRank, str]]:
    """Each node's smallest (rank, text) over its label literals: the predicate's place in ``predicates``, then
    ``label_rank`` of the language, then the text. Nodes with no fact edge are left out (the index holds none)."""
    best: dict[int | str, tuple[LabelRank, str]] = {}
    ranks: dict[bytes, tuple[int, str]] = {}  # language tag -> label_rank (a handful of distinct tags)
    with progress_bar("fact index: labels", unit="labels") as advance:
        for place, predicate in enumerate(predicates):
            def labels(block: bytes, place: int = place) -> None:
                tokens = block.replace(b"\n", b"\t").split(b"\t")
                tokens.pop()
                for s, o in zip(tokens[0::2], tokens[1::2]):
                    if o.startswith((b"<", b"_:")) or not s.startswith(b"<") or s.startswith(b"<<"):
                        continue  # no literal, or no IRI's (the engine filters nothing, as for the edges)
                    key: int | str | None = ids.get(s)  # an IRI with a fact edge (a blank subject is none)
                    if key is None:
                        key = s[1:-1].decode("utf-8")
                        if key not in extra:
                            continue
                    if o.startswith(b'"'):
                        end = o.rfind(b'"')
                        raw, tail = o[1:end], o[end + 1:]
                        if b"\\" in raw:
                            raw = _ESCAPED.sub(lambda m: _TSV_ESCAPES[m.group(1)], raw)
                        tag = tail[1:] if tail.startswith(b"@") else b""
                        text = raw.decode("utf-8")
                    else:  # a number or boolean, written bare
                        tag, text = b"", o.decode("utf-8")
                    rank = ranks.get(tag)
                    if rank is None:
                        rank = ranks[tag] = label_rank(tag.decode("utf-8") or None)
                    candidate = ((place, *rank), text)
                    found = best.get(key)
                    if found is None or candidate < found:
                        best[key] = candidate
                advance(len(tokens) // 2)

            store.tsv_blocks(f"SELECT ?s ?o WHERE {{ GRAPH ?g {{ ?s {iri_ref(predicate)} ?o }} }}", ("s", "o"), labels)
    return best
