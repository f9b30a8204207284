"""N-Triples lines in sorted order, in bounded memory: sorted runs spilled to disk and merged, duplicates dropped.

Both sides of a release diff go through this, so comparing two releases is one merge pass over two sorted streams;
memory is one run (``run_lines`` lines) however large the release."""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

RUN_LINES = 400_000


class SortedLines:
    """Collect N-Triples text (one or many lines per chunk), then iterate the distinct lines in sorted order."""

    def __init__(self, workdir: str | Path | None = None, run_lines: int = RUN_LINES) -> None:
        self._workdir = Path(workdir) if workdir is not None else None
        self._run_lines = run_lines
        self._buffer: list[str] = []
        self._runs: list[Path] = []
        self.chunks = 0

    def add(self, text: str) -> None:
        """Add N-Triples text ending with a newline (a loader's yield: one or several lines)."""
        parts = text.split("\n")
        parts.pop()  # the empty tail after the last newline
        self._buffer.extend(parts)
        if len(self._buffer) >= self._run_lines:
            self._spill()

    def add_line(self, line: str) -> None:
        """Add one line without its newline (a dump read line by line: no split needed)."""
        self._buffer.append(line)
        if len(self._buffer) >= self._run_lines:
            self._spill()

    def _spill(self) -> None:
        self._buffer.sort()
        fd, name = tempfile.mkstemp(prefix="mirage-kg-run-", suffix=".nt", dir=self._workdir)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            previous = None
            for line in self._buffer:
                if line != previous:
                    handle.write(line)
                    handle.write("\n")
                    previous = line
        self._runs.append(Path(name))
        self._buffer = []

    def __iter__(self) -> Iterator[str]:
        """The distinct lines, sorted (by code point); run files are removed once read."""
        self._buffer.sort()
        if not self._runs:
            yield from _distinct(iter(self._buffer))
            self._buffer = []
            return
        handles = [open(run, encoding="utf-8", newline="\n") for run in self._runs]
        try:
            streams = [(line[:-1] for line in handle) for handle in handles]
            yield from _distinct(heapq.merge(iter(self._buffer), *streams))
        finally:
            for handle in handles:
                handle.close()
            self.discard()

    def discard(self) -> None:
        for run in self._runs:
            run.unlink(missing_ok=True)
        self._runs = []
        self._buffer = []


def _distinct(lines: Iterator[str]) -> Iterator[str]:
    previous = None
    for line in lines:
        if line != previous and line:
            yield line
            previous = line


def merge_difference(old: Iterable[str], new: Iterable[str]) -> Iterator[tuple[str, str]]:
    """One pass over two sorted distinct streams: ('-', line) for lines only in ``old``, ('+', line) only in
    ``new``; common lines are skipped."""
    old_iter, new_iter = iter(old), iter(new)
    a = next(old_iter, None)
    b = next(new_iter, None)
    while a is not None and b is not None:
        if a == b:
            a = next(old_iter, None)
            b = next(new_iter, None)
        elif a < b:
            yield "-", a
            a = next(old_iter, None)
        else:
            yield "+", b
            b = next(new_iter, None)
    while a is not None:
        yield "-", a
        a = next(old_iter, None)
    while b is not None:
        yield "+", b
        b = next(new_iter, None)
