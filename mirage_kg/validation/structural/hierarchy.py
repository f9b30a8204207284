"""Hierarchy checks: ``rdfs:subClassOf`` cycles (``isa-cycle``), found as strongly connected components of the IS-A
edges hashed to ids."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mirage_kg.model.namespaces import RDFS, compress
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.edges import EdgeBatch
from mirage_kg.validation.structural.queries import example


def _cycle_path(members: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through the component, as the nodes in walking order, for the example's detail."""
    inside = set(members)
    start = min(members)
    path, seen, node = [start], {start}, start
    while True:
        nxt = min(n for n in edges[node] if n in inside)
        if nxt in seen:
            return path[path.index(nxt):] + [nxt]
        path.append(nxt)
        seen.add(nxt)
        node = nxt


def isa_cycle(ctx: Context) -> tuple[int, list[Example]]:
    """Strongly connected components of the IS-A edges (SciPy over hashed ids: Tarjan over dicts and sets of
    strings took ~2 GB at UMLS size), plus ``x subClassOf x``; the IRIs of the classes in a cycle are read on a
    second pass over the edges, only when there is one."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    batches: list[tuple[np.ndarray, np.ndarray]] = []
    ctx.each_edge_batch([RDFS + "subClassOf"], lambda batch: batches.append((batch.subjects, batch.objects)),
                        with_schema=True)
    if not batches:
        return 0, []
    child = np.concatenate([c for c, _ in batches])
    parent = np.concatenate([p for _, p in batches])
    batches.clear()
    loops = np.unique(child[child == parent])  # x subClassOf x
    nodes, ends = np.unique(np.concatenate((child, parent)), return_inverse=True)
    graph = coo_matrix((np.ones(len(child), dtype=np.int8), (ends[: len(child)], ends[len(child):])),
                       shape=(len(nodes), len(nodes))).tocsr()
    del child, parent, ends
    _, labels = connected_components(graph, directed=True, connection="strong")
    del graph
    sizes = np.bincount(labels)
    in_cycle = sizes[labels] > 1
    members = np.union1d(nodes[in_cycle], loops)
    if len(members) == 0:
        return 0, []
    names: dict[int, str] = {}
    edges: dict[str, set[str]] = defaultdict(set)
    def name_cycle_edges(batch: EdgeBatch) -> None:
        inside = np.isin(batch.subjects, members) & np.isin(batch.objects, members)
        for at in np.flatnonzero(inside).tolist():
            child, parent = batch.iri(at, 0), batch.iri(at, 1)
            names[int(batch.subjects[at])], names[int(batch.objects[at])] = child, parent
            edges[child].add(parent)

    ctx.each_edge_batch([RDFS + "subClassOf"], name_cycle_edges, with_schema=True)
    groups: dict[int, list[str]] = defaultdict(list)
    for node, label in zip(nodes[in_cycle].tolist(), labels[in_cycle].tolist()):
        groups[label].append(names[node])
    cycles = [sorted(members_) for members_ in groups.values()]
    cycles += [[names[node]] for node in loops.tolist()]
    cycles.sort(key=lambda c: (-len(c), c[0]))
    out = []
    for cycle in cycles[: ctx.max_examples]:
        path = _cycle_path(cycle, edges)
        walk = " -> ".join(compress(n) for n in path[:8]) + (" -> ..." if len(path) > 8 else "")
        out.append(example(cycle[0], f"{len(cycle)} class(es) in a subClassOf cycle: {walk}"))
    return len(cycles), out
