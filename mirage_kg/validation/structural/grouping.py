"""How the grouping checks (several labels, one label on several concepts, one code on several IRIs) count without
a GROUP BY: one streamed pass hashes each row's key and members (``hashed_rows``), a second keeps the first rows of
the flagged keys for the examples (``first_rows``)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np

from mirage_kg.model.terms import Term
from mirage_kg.validation import tsv_rows
from mirage_kg.validation.compact import hashes_of
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.edges import ROW_BATCH
from mirage_kg.validation.structural.queries import PREFIXES

Part = tuple[str, ...]  # consecutive variables of a grouping check's SELECT whose values together form one key


def _select_variables(query: str) -> tuple[str, ...]:
    """The variables a ``SELECT ?a ?b WHERE`` query projects, in order."""
    head = query[query.index("SELECT") + len("SELECT"): query.index("WHERE")]
    return tuple(name.lstrip("?") for name in head.split())


def _part_hashes(variables: tuple[str, ...], part: Part) -> Callable[[tsv_rows.TsvChunk], np.ndarray]:
    first, last = variables.index(part[0]), variables.index(part[-1])
    if variables[first:last + 1] != part:
        raise ValueError(f"{part} are not consecutive variables of {variables}")
    return lambda chunk: chunk.span_hashes(first, last)


def hashed_rows(ctx: Context, query: str, *parts: Part) -> list[np.ndarray]:
    """One pass over a SELECT's rows (streamed): for each part (consecutive variables), the hash of its values on
    every row. The grouping checks count with these instead of a GROUP BY, which the embedded store holds whole
    (a hash set per group: 2-3 GB for the notations or prefLabels of a UMLS-size KG). On the embedded store the
    hashes come from the engine's TSV (``tsv_rows``: no Python object per row), elsewhere from ``Term``\\ s."""
    hashed: list[list[np.ndarray]] = [[] for _ in parts]
    variables = _select_variables(query)
    if tsv_rows.readable(ctx.store):
        readers = [_part_hashes(variables, part) for part in parts]

        def hash_parts(chunk: tsv_rows.TsvChunk) -> None:
            for out, read in zip(hashed, readers):
                out.append(read(chunk))

        tsv_rows.each_chunk(ctx.store, PREFIXES + query, variables, hash_parts)
    else:
        rows = iter(ctx.store.select_all(PREFIXES + query))
        while chunk := list(islice(rows, ROW_BATCH)):
            for out, part in zip(hashed, parts):
                out.append(hashes_of([tuple(row.get(name) for name in part) for row in chunk]))
    return [np.concatenate(h) if h else np.zeros(0, dtype=np.int64) for h in hashed]


def first_rows(ctx: Context, query: str, key: Part, flagged: np.ndarray,
               rank: Callable[[dict[str, Term], int], object], n: int) -> list[tuple[dict[str, Term], int]]:
    """A second pass over the rows, for the examples: one row per key in ``flagged`` (sorted hashes of ``key``,
    as ``hashed_rows`` made them), the ``n`` smallest by ``rank(row, position of its key in flagged)``, each
    with that position; only those rows are kept (and, on the embedded store, only rows of a flagged key are
    read into ``Term``\\ s)."""
    done = np.zeros(len(flagged), dtype=bool)
    variables = _select_variables(query)

    def matches(hashes: np.ndarray) -> Iterator[tuple[int, int]]:
        at = np.minimum(np.searchsorted(flagged, hashes), len(flagged) - 1)
        for i in np.flatnonzero(flagged[at] == hashes).tolist():
            if not done[at[i]]:
                done[at[i]] = True
                yield i, int(at[i])

    best: list[tuple[object, int, dict[str, Term], int]] = []  # (rank, arrival, row, at): trimmed to the n smallest
    arrivals = iter(range(1 << 62))  # ties keep the order rows came in, as heapq.nsmallest over a stream does

    def offer(row: dict[str, Term], at: int) -> None:
        best.append((rank(row, at), next(arrivals), row, at))
        if len(best) >= 4 * n + 64:
            best[:] = heapq.nsmallest(n, best, key=lambda item: (item[0], item[1]))

    if not n:
        return []
    if tsv_rows.readable(ctx.store):
        read = _part_hashes(variables, key)

        def offer_matches(chunk: tsv_rows.TsvChunk) -> None:
            for i, at in matches(read(chunk)):
                offer(chunk.terms(i, variables), at)

        tsv_rows.each_chunk(ctx.store, PREFIXES + query, variables, offer_matches)
    else:
        rows = iter(ctx.store.select_all(PREFIXES + query))
        while chunk := list(islice(rows, ROW_BATCH)):
            for i, at in matches(hashes_of([tuple(row.get(name) for name in key) for row in chunk])):
                offer(chunk[i], at)
    return [(row, at) for _, _, row, at in heapq.nsmallest(n, best, key=lambda item: (item[0], item[1]))]
