"""Approximate nearest-neighbour search over the label embeddings: an HNSW graph from usearch (the ``ann`` extra),
built once per store in batches with progress, checkpointed so that a stopped build resumes, cached beside the
store and carried across a release update by removing the vectors of gone labels and adding those of new ones.

usearch rather than faiss-cpu or hnswlib: a 2 MB wheel (faiss-cpu's is 19 MB, hnswlib ships only a source archive
to compile) whose HNSW index takes ``add`` and ``remove`` by key after it is built, which the update needs.

Keys are not rows: the rows of the embedding matrix follow the sorted label texts, which shift when a label comes
or goes, so the index keys each vector once and a small array (``rows``) says which row of the current matrix a
key stands for (-1: removed). A fresh build keys row ``i`` as ``i``; an update keeps every kept text's key and
gives new texts new keys, so only the changed labels touch the graph.

Below ``ANN_MIN_LABELS`` vectors, and without usearch installed, the linker searches the matrix by brute force
(``brute_force_top``): there a matrix-vector product costs about a millisecond and is exact.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads with the first search, not with mirage_kg
    import numpy as np

#: fewer label vectors than this are searched by brute force: at 50k x 384 a product and a partial sort take about
#: 2 ms (measured at a load of 6-9, docs/benchmarks.md), the HNSW graph ~1 min to build on 2 cores, and exact
#: answers cost nothing to keep
ANN_MIN_LABELS = 50_000
#: HNSW settings (usearch's names): links per node, search depth while adding and while searching. At 48k real
#: label vectors (all-MiniLM-L6-v2) these give recall@5 ~0.97 against brute force (docs/benchmarks.md)
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 128
#: vectors added per batch (one progress step)
BATCH = 8192
#: a build saves a checkpoint after this many added vectors: a stopped build resumes from the last one
CHECKPOINT_ROWS = 500_000
#: an update that would remove more than this share of the keys rebuilds instead (a graph with many holes
#: searches worse)
REBUILD_SHARE = 0.25


def installed() -> bool:
    """Whether usearch (the ``ann`` extra) can be imported."""
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def brute_force_top(matrix: np.ndarray, vector: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` rows of ``matrix`` most similar to the unit ``vector`` (dot product), best first, and their
    similarities: the exact answer the index is measured against."""
    import numpy as np

    # einsum's own single-threaded loop, not BLAS: a threaded BLAS spins on a busy machine (2,000 x 384: 998
    # products/s against 142 with ``@`` at a load of 9; 48k: 86 against 42, measured)
    sims = np.einsum("ij,j->i", matrix, np.asarray(vector, dtype=matrix.dtype)).astype(np.float32, copy=False)
    if count < len(sims):
        top = np.argpartition(-sims, count)[:count]
    else:
        top = np.arange(len(sims))
    top = top[np.lexsort((top, -sims[top]))]
    return top, sims[top]


def rerank(matrix: np.ndarray, vector: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index's candidate ``rows`` ordered by their exact similarity to ``vector`` over ``matrix`` (ties by row),
    and those similarities. The index's own f16 distances round, and its graph differs between a carried and a
    fresh build (vectors are added on several threads), so near-ties would otherwise come out in either order."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    sims = np.einsum("ij,j->i", np.asarray(matrix[rows], np.float32), np.asarray(vector, np.float32))
    order = np.lexsort((rows, -sims))
    return rows[order], sims[order]


def _new_index(width: int) -> Any:
    from usearch.index import Index

    # f16 halves the memory of f32 at a recall cost of under 0.01 here; i8 loses 0.03 (measured)
    return Index(ndim=width, metric="ip", dtype="f16", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                 expansion_search=EXPANSION_SEARCH)


#: vectors are added on one thread: usearch 2.26's concurrent ``add`` left some vectors unreachable (300 random
#: 32-d unit vectors, 2 threads: 1-5 of them not found by a search for themselves, in every trial; 1 thread: none),
#: and one thread gives the same graph on every build, so a carried index answers as a fresh one
ADD_THREADS = 1


def _threads() -> int:
    return ADD_THREADS


class VectorIndex:
    """An HNSW index over the rows of a label-embedding matrix; ``search`` answers rows of that matrix."""

    def __init__(self, index: Any, rows: np.ndarray, path: Path | None = None) -> None:
        self._index = index
        self.rows = rows  # key -> row of the current matrix, -1 for a removed key
        self.path = path

    def __len__(self) -> int:
        return int(len(self._index))

    # --- files ---------------------------------------------------------------------------------------------------
    @staticmethod
    def rows_file(path: Path) -> Path:
        return path.with_name(path.name + ".rows.npy")

    @classmethod
    def open(cls, path: Path) -> VectorIndex:
        """The index saved at ``path`` (memory-mapped: pages are read as searches reach them)."""
        import numpy as np

        from usearch.index import Index

        rows = np.load(cls.rows_file(path), allow_pickle=False)
        index = Index.restore(str(path), view=True)
        if index is None or int((rows >= 0).sum()) != len(index):
            raise ValueError(f"{path}: the index and its key rows disagree; it is rebuilt")
        index.expansion_search = EXPANSION_SEARCH
        return cls(index, rows, path)

    def save(self, path: Path) -> None:
        """Write the index and its key rows atomically (the rows file last: it marks the index complete)."""
        import numpy as np

        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp_rows = path.with_name(f".{path.name}.rows.{os.getpid()}.tmp.npy")
        try:
            self._index.save(str(tmp))
            np.save(tmp_rows, self.rows, allow_pickle=False)
            os.replace(tmp, path)
            os.replace(tmp_rows, self.rows_file(path))
        finally:
            tmp.unlink(missing_ok=True)
            tmp_rows.unlink(missing_ok=True)
        self.path = path

    # --- building ------------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, matrix: np.ndarray, path: Path | None = None, *, checkpoint_rows: int = CHECKPOINT_ROWS,
              note: Any = None) -> VectorIndex:
        """An index over every row of ``matrix``, added in batches with progress; with a ``path``, a checkpoint is
        saved beside it every ``checkpoint_rows`` vectors and a build stopped earlier resumes from its last one."""
        import numpy as np

        from mirage_kg.progress import progress_bar

        checkpoint = path.with_name(path.name + ".partial") if path is not None else None
        index, done = None, 0
        if checkpoint is not None and checkpoint.is_file():
            try:
                from usearch.index import Index

                index = Index.restore(str(checkpoint))
                done = len(index) if index is not None else 0
                if index is None or index.ndim != matrix.shape[1] or done > len(matrix):
                    index, done = None, 0
            except (OSError, RuntimeError, ValueError):
                index, done = None, 0
        if index is None:
            index = _new_index(matrix.shape[1])
        if note is not None and len(matrix) - done:
            resumed = f", resuming after {done:,}" if done else ""
            note(f"indexing {len(matrix):,} label vectors for nearest-neighbour search{resumed}")
        started, since_checkpoint = time.perf_counter(), 0
        with progress_bar("indexing label vectors", total=len(matrix), unit="vectors") as advance:
            advance(done)
            for start in range(done, len(matrix), BATCH):
                stop = min(start + BATCH, len(matrix))
                index.add(np.arange(start, stop, dtype=np.uint64), np.asarray(matrix[start:stop], np.float32),
                          threads=_threads())
                advance(stop - start)
                since_checkpoint += stop - start
                if checkpoint is not None and since_checkpoint >= checkpoint_rows and stop < len(matrix):
                    tmp = checkpoint.with_name(f".{checkpoint.name}.{os.getpid()}.tmp")
                    try:
                        index.save(str(tmp))
                        os.replace(tmp, checkpoint)
                    except OSError:
                        tmp.unlink(missing_ok=True)
                    since_checkpoint = 0
        if note is not None and len(matrix) - done:
            note(f"indexed {len(matrix) - done:,} label vectors in {time.perf_counter() - started:.0f} s")
        built = cls(index, np.arange(len(matrix), dtype=np.int64))
        if path is not None:
            try:
                built.save(path)
            except OSError:
                pass  # a cache: kept in memory this time
            if checkpoint is not None:
                checkpoint.unlink(missing_ok=True)
        return built

    def carry(self, old_texts: Sequence[str], new_texts: Sequence[str], matrix: np.ndarray) -> VectorIndex | None:
        """This index (over ``old_texts``' vectors) brought to ``new_texts`` (the rows of ``matrix``): the keys of
        gone texts removed, new texts added under new keys, kept texts keyed as before. None when so much changed
        that a fresh build is better (``REBUILD_SHARE``)."""
        import numpy as np

        new_row = {text: row for row, text in enumerate(new_texts)}
        rows = np.full(len(self.rows), -1, dtype=np.int64)
        gone: list[int] = []
        for key, old_row in enumerate(self.rows.tolist()):
            if old_row < 0:
                continue
            row = new_row.pop(old_texts[old_row], None)
            if row is None:
                gone.append(key)
            else:
                rows[key] = row
        if gone and len(gone) + int((self.rows < 0).sum()) > REBUILD_SHARE * max(len(self.rows), 1):
            return None
        index = self._index
        if self.path is not None:  # a viewed index is read-only: load it whole to change it
            from usearch.index import Index

            index = Index.restore(str(self.path))
            index.expansion_search = EXPANSION_SEARCH
        if gone:
            index.remove(np.asarray(gone, dtype=np.uint64))
        added = sorted(new_row.values())
        if added:
            keys = np.arange(len(rows), len(rows) + len(added), dtype=np.uint64)
            index.add(keys, np.asarray(matrix[added], np.float32), threads=_threads())
            rows = np.concatenate([rows, np.asarray(added, dtype=np.int64)])
        return VectorIndex(index, rows)

    # --- searching -----------------------------------------------------------------------------------------------
    def search(self, vector: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The (about) ``count`` rows nearest the unit ``vector``, best first, and their similarities."""
        import numpy as np

        found = self._index.search(np.asarray(vector, np.float32), count, threads=1)
        keys = np.asarray(found.keys, dtype=np.int64).reshape(-1)
        sims = 1.0 - np.asarray(found.distances, dtype=np.float32).reshape(-1)
        valid = (keys >= 0) & (keys < len(self.rows))
        rows = self.rows[keys[valid]]
        sims = sims[valid]
        kept = rows >= 0
        return rows[kept], sims[kept]


def drop_files(folder: Path, prefix: str, keep: Path | None) -> None:
    """Remove this kind's index files of other fingerprints (and their checkpoints)."""
    for old in folder.glob(prefix + "*"):
        if keep is not None and (old == keep or old.name.startswith(keep.name)):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
