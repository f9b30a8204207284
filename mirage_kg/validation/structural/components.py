"""The connected components of the concept graph (the link edges, direction ignored), found in one streamed pass
over the edges merged as ids (``compact.ComponentLabels``), for the connectivity and reference checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mirage_kg.validation.compact import ComponentLabels, IriTable
from mirage_kg.validation.structural.edges import EdgeBatch
from mirage_kg.validation.structural.queries import MAPPINGS

# id pairs merged at a time
UNION_BATCH = 1 << 20


class PairBatches:
    """Id pairs gathered into arrays of about ``size`` and handed to ``merge``: each union costs a pass over
    every node, so batches of a few thousand edges are merged a million at a time."""

    def __init__(self, merge: Callable[[np.ndarray, np.ndarray], object], size: int = UNION_BATCH) -> None:
        self._merge, self._size = merge, size
        self._lefts: list[np.ndarray] = []
        self._rights: list[np.ndarray] = []
        self._held = 0

    def add(self, left: np.ndarray, right: np.ndarray) -> None:
        self._lefts.append(left)
        self._rights.append(right)
        self._held += len(left)
        if self._held >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._lefts:
            left, right = np.concatenate(self._lefts), np.concatenate(self._rights)
            self._lefts, self._rights, self._held = [], [], 0
            self._merge(left, right)


@dataclass(frozen=True)
class Components:
    """The connected components of the concept graph, as the checks need them: how many, the largest's size,
    the next ones (their smallest IRI and size) in order, and which concepts (by id) some link touches."""

    count: int
    largest: int
    following: tuple[tuple[str, int], ...]
    linked: np.ndarray
    #: which concepts (by id) are the target of a link (mappings aside), and the targets outside the concepts
    targets: np.ndarray
    outside_targets: frozenset[str]


#: ``each_edge_batch(predicates, consume)``: the predicates' edges handed to ``consume`` a batch at a time
EachEdgeBatch = Callable[[list[str], Callable[[EdgeBatch], None]], None]


def find_components(table: IriTable, links: Sequence[str], each_edge_batch: EachEdgeBatch,
                    max_examples: int) -> Components:
    """Connected components of the concept graph (the edges of ``links``, direction ignored; a mapping only
    between two concepts of ``table``), ordered largest first, then by smallest IRI, the first ``max_examples``
    after the largest kept; the link edges are streamed once in batches and merged as ids (``ComponentLabels``):
    a node outside the concept table (the target of a link, say) gets an id after them."""
    known = len(table)
    concept_links = [p for p in links if p not in MAPPINGS]
    if not links:
        return Components(0, 0, (), np.zeros(known, dtype=bool), np.zeros(known, dtype=bool), frozenset())
    outside: dict[int, int] = {}  # the hash of a linked IRI that is not a concept -> its node id: few on a sound KG
    outside_names: dict[int, str] = {}  # node id -> IRI, for those
    merged = ComponentLabels(known)
    targets = np.zeros(known, dtype=bool)
    outside_target_ids: set[int] = set()

    def ids(batch: EdgeBatch, end: int) -> np.ndarray:
        found = batch.ids(table, end)
        missing = np.flatnonzero(found < 0)
        for at, key in zip(missing.tolist(), batch.hashes(end)[missing].tolist()):
            node = outside.get(key)
            if node is None:
                node = outside[key] = known + len(outside)
                outside_names[node] = batch.iri(at, end)
            found[at] = node
        return found

    def target_ids(batch: EdgeBatch) -> np.ndarray:
        found = ids(batch, 1)
        targets[found[found < known]] = True
        outside_target_ids.update(found[found >= known].tolist())
        return found

    def merge(left: np.ndarray, right: np.ndarray) -> None:
        merged.grow(known + len(outside))
        merged.union(left, right)

    pending = PairBatches(merge)
    each_edge_batch(concept_links, lambda batch: pending.add(ids(batch, 0), target_ids(batch)))
    pending.flush()
    outside_targets = {outside_names[node] for node in outside_target_ids}
    mappings = [p for p in links if p in MAPPINGS]

    def concept_pair(batch: EdgeBatch) -> None:
        # a mapping between two concepts of this KG joins them; one to an outside IRI does not
        left, right = batch.ids(table, 0), batch.ids(table, 1)
        both = (left >= 0) & (right >= 0)
        pending.add(left[both], right[both])

    if mappings:
        each_edge_batch(mappings, concept_pair)
        pending.flush()
    nodes = np.flatnonzero(merged.touched)
    labels = merged.labels[nodes]
    if len(nodes) == 0:
        return Components(0, 0, (), np.zeros(known, dtype=bool), targets, frozenset(outside_targets))
    roots, sizes = np.unique(labels, return_counts=True)
    # each component's smallest IRI: its smallest concept id (ids are in IRI order), or an outside IRI
    smallest = np.full(len(roots), np.iinfo(np.int64).max, dtype=np.int64)
    concept_nodes = nodes < known
    np.minimum.at(smallest, np.searchsorted(roots, labels[concept_nodes]), nodes[concept_nodes])
    outside_smallest: dict[int, str] = {}
    for node, iri in outside_names.items():
        if merged.touched[node]:
            at = int(np.searchsorted(roots, merged.labels[node]))
            outside_smallest[at] = min(iri, outside_smallest.get(at, iri))

    def smallest_iri(at: int) -> str:
        names = [table.iri(int(smallest[at]))] if smallest[at] < known else []
        return min(names + ([outside_smallest[at]] if at in outside_smallest else []))

    # only components as large as the (examples + 1)-th largest can be shown: their smallest IRIs decide the order
    shown = max_examples + 1
    floor = np.sort(sizes)[::-1][min(shown, len(sizes)) - 1]
    candidates = sorted(((-int(sizes[at]), smallest_iri(int(at))) for at in np.flatnonzero(sizes >= floor)))
    return Components(count=len(roots), largest=-candidates[0][0],
                      following=tuple((iri, -size) for size, iri in candidates[1:shown]),
                      linked=merged.touched[:known].copy(), targets=targets,
                      outside_targets=frozenset(outside_targets))
