"""Edges of one whole-graph pass, a batch at a time: as the hashes of their two ends, each end's IRI read back on
demand (from the strings an endpoint gave, or from the embedded store's TSV chunk)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice

import numpy as np

from mirage_kg.validation import tsv_rows
from mirage_kg.validation.compact import IriTable

# Rows read into Python objects at a time (strings, dicts of terms: ~1 KB a row with their lists: 16k rows, ~16 MB)
ROW_BATCH = 1 << 14


def batches(pairs: Iterable[tuple[str, str]], size: int = ROW_BATCH) -> Iterator[tuple[list[str], list[str]]]:
    """(subjects, objects) lists of up to ``size`` edges at a time."""
    pairs = iter(pairs)
    while chunk := list(islice(pairs, size)):
        yield [a for a, _ in chunk], [b for _, b in chunk]


class EdgeBatch:
    """Edges of one pass, as the hashes of their subjects and objects (``compact.string_hashes``), each end's IRI
    read back for a row on demand: from the strings when the edges came as strings, else from the TSV chunk."""

    def __init__(self, subjects: np.ndarray, objects: np.ndarray, names: tuple[list[str], list[str]] | None = None,
                 *, chunk: tsv_rows.TsvChunk | None = None, rows: np.ndarray | None = None) -> None:
        self.subjects, self.objects = subjects, objects
        self._names, self._chunk, self._rows = names, chunk, rows

    def __len__(self) -> int:
        return len(self.subjects)

    def hashes(self, end: int) -> np.ndarray:
        """The subjects' (``end`` 0) or objects' (1) hashes."""
        return self.objects if end else self.subjects

    def iri(self, row: int, end: int) -> str:
        if self._names is not None:
            return self._names[end][row]
        assert self._chunk is not None
        return self._chunk.iri(row if self._rows is None else int(self._rows[row]), end)

    def ids(self, table: IriTable, end: int) -> np.ndarray:
        """Each end's id in ``table`` (-1 outside it): by string where the table needs strings, else by hash."""
        if self._names is not None and table.exact:
            return table.ids(self._names[end])
        return table.ids_of_hashes(self.hashes(end))
