"""Approximate nearest-neighbour search over the label embeddings: an HNSW graph from usearch (the ``ann`` extra),
built once per store in batches with progress, checkpointed so that a stopped build resumes, cached beside the
store and carried across a release update by removing the vectors of gone labels and adding those of new ones.

usearch rather than faiss-cpu or hnswlib: a 2 MB wheel (faiss-cpu's is 19 MB, hnswlib ships only a source archive
to compile) whose HNSW index takes ``add`` and ``remove`` by key after it is built, which the update needs.

Keys are not rows: the rows of the embedding matrix follow the sorted label texts, which shift when a label comes
or goes, so the index keys each vector once and a small array (``rows``) says which row of the current matrix a
key stands for (-1: removed). A fresh build keys row ``i`` as ``i``; an update keeps every kept text's key and
gives new texts new keys, so only the changed labels touch the graph.

Shards: the keys are striped over ``shard_count()`` HNSW graphs (key ``k`` in shard ``k % shards``), each built on
its own thread and searched at once (one thread a shard), the answers merged by distance. Not one graph added to on several threads:
usearch's concurrent ``add`` strands vectors that no search reaches (usearch issue #735, open; its fix, pull
request #772, is in no release up to 2.26.6): a node whose upper-level links are in place before its level-0 links
is a descent seed that dead-ends another thread's insertion. Each shard is added to on one thread, so it is the
same graph on every build; shard 0 is the file at ``path``, shard ``i`` sits beside it as ``<path>.shard<i>``, and
an index saved by an earlier version (one file) opens as one shard.

Below ``ANN_MIN_LABELS`` vectors, and without usearch installed, the linker searches the matrix by brute force
(``brute_force_top``): there a matrix-vector product costs about a millisecond and is exact.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    fresh build (removed keys leave holes, new ones link where they land), so near-ties would otherwise come out in
    either order."""
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


#: at most this many shards (and add threads): a search asks every shard, so each one more costs a search per
#: query, and past the cores there is nothing to gain (200k label vectors, one run each: build 299 -> 149 s, q/s
#: 462 -> 217, recall@5 0.976 -> 0.986; docs/benchmarks.md)
MAX_SHARDS = 2
#: each shard is added to on one thread: usearch 2.26's concurrent ``add`` leaves vectors unreachable (issue #735;
#: 300 random 32-d unit vectors, 2 threads: up to 40 of them not found by a search for themselves, in 2 trials of
#: 10; 1 thread: none), so the cores are used by adding to several shards side by side instead
ADD_THREADS = 1


def _threads() -> int:
    """Threads for one shard's ``add`` of one batch (asked once per batch)."""
    return ADD_THREADS


def shard_count() -> int:
    """Shards for a new build: one per core this process may use, at most ``MAX_SHARDS``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_SHARDS, cores))


def shard_file(path: Path, number: int) -> Path:
    """Where shard ``number`` of the index at ``path`` is saved (shard 0: ``path`` itself)."""
    return path if number == 0 else path.with_name(f"{path.name}.shard{number}")


def checkpoint_file(path: Path, number: int) -> Path:
    """Where a stopped build's checkpoint of shard ``number`` is saved."""
    return path.with_name(f"{path.name}.partial" + (f"{number}" if number else ""))


def _shard_files(first: Path) -> list[Path]:
    """``first`` and the shard files beside it, in shard order, up to the first number missing."""
    files = [first]
    while True:
        following = first.with_name(f"{first.name}{len(files)}") if first.name.endswith(".partial") \
            else shard_file(first, len(files))
        if not following.is_file():
            return files
        files.append(following)


def _stripe(keys: np.ndarray, shards: int) -> list[np.ndarray]:
    """For each shard, the positions in ``keys`` of the keys it holds (key ``k`` in shard ``k % shards``)."""
    import numpy as np

    return [np.flatnonzero(keys % shards == number) for number in range(shards)]


class VectorIndex:
    """An HNSW index over the rows of a label-embedding matrix, in shards; ``search`` answers rows of that matrix."""

    def __init__(self, shards: Sequence[Any], rows: np.ndarray, path: Path | None = None) -> None:
        self._shards = list(shards)
        self.rows = rows  # key -> row of the current matrix, -1 for a removed key
        self.path = path
        # asks the shards after the first at once, while the caller's thread asks the first (``search``); made
        # here, not on first use, so two threads searching at once share one (its threads start on first use)
        self._search_pool = ThreadPoolExecutor(max_workers=len(self._shards) - 1, thread_name_prefix="vector-search") \
            if len(self._shards) > 1 else None

    def __len__(self) -> int:
        return sum(int(len(shard)) for shard in self._shards)

    @property
    def shards(self) -> int:
        return len(self._shards)

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
        restored = [Index.restore(str(file), view=True) for file in _shard_files(path)]
        shards = [shard for shard in restored if shard is not None]
        if len(shards) != len(restored) or int((rows >= 0).sum()) != sum(len(s) for s in shards):
            raise ValueError(f"{path}: the index and its key rows disagree; it is rebuilt")
        for shard in shards:
            shard.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]  # usearch's setter stands apart from its getter
        return cls(shards, rows, path)

    def save(self, path: Path) -> None:
        """Write the shards and the key rows atomically: the rows file goes first and comes back last (it marks
        the index complete), so a write stopped half-way leaves an index that is rebuilt, never a mixed one."""
        import numpy as np

        pid = os.getpid()
        temporary = [path.with_name(f".{shard_file(path, n).name}.{pid}.tmp") for n in range(self.shards)]
        tmp_rows = path.with_name(f".{path.name}.rows.{pid}.tmp.npy")
        try:
            for shard, tmp in zip(self._shards, temporary):
                shard.save(str(tmp))
            np.save(tmp_rows, self.rows, allow_pickle=False)
            self.rows_file(path).unlink(missing_ok=True)
            for number, tmp in enumerate(temporary):
                os.replace(tmp, shard_file(path, number))
            for stale in _shard_files(path)[self.shards:]:  # an earlier build's with more shards
                stale.unlink(missing_ok=True)
            os.replace(tmp_rows, self.rows_file(path))
        finally:
            for tmp in (*temporary, tmp_rows):
                tmp.unlink(missing_ok=True)
        self.path = path

    # --- building ------------------------------------------------------------------------------------------------
    @staticmethod
    def _resume(path: Path | None, width: int, total: int) -> tuple[list[Any], int]:
        """The shards of a stopped build's checkpoint beside ``path`` and the rows they hold; none when there is
        no checkpoint or it does not fit (another width, more rows, shards not striped as a build leaves them)."""
        if path is None or not checkpoint_file(path, 0).is_file():
            return [], 0
        from usearch.index import Index

        try:
            restored = [Index.restore(str(file)) for file in _shard_files(checkpoint_file(path, 0))]
        except (OSError, RuntimeError, ValueError):
            return [], 0
        shards = [shard for shard in restored if shard is not None]
        if len(shards) != len(restored) or any(shard.ndim != width for shard in shards):
            return [], 0
        done = sum(len(shard) for shard in shards)
        striped = all(len(shard) == (done - number + len(shards) - 1) // len(shards)
                      for number, shard in enumerate(shards))
        return (shards, done) if striped and done <= total else ([], 0)

    @staticmethod
    def _add(pool: ThreadPoolExecutor | None, shards: Sequence[Any], keys: np.ndarray, vectors: np.ndarray) -> None:
        """Add ``vectors`` under ``keys``, each to its shard, the shards side by side (usearch lets the GIL go)."""
        import numpy as np

        threads = _threads()
        parts = [(shard, keys[at], vectors[at]) for shard, at in zip(shards, _stripe(keys, len(shards))) if len(at)]
        if pool is None or len(parts) < 2:
            for shard, part_keys, part in parts:
                shard.add(part_keys.astype(np.uint64), part, threads=threads)
            return
        for done in [pool.submit(shard.add, part_keys.astype(np.uint64), part, threads=threads)
                     for shard, part_keys, part in parts]:
            done.result()

    @classmethod
    def build(cls, matrix: np.ndarray, path: Path | None = None, *, checkpoint_rows: int = CHECKPOINT_ROWS,
              note: Callable[[str], Any] | None = None, shards: int | None = None) -> VectorIndex:
        """An index over every row of ``matrix`` in ``shards`` shards (``shard_count()``), added in batches with
        progress; with a ``path``, a checkpoint is saved beside it every ``checkpoint_rows`` vectors and a build
        stopped earlier resumes from its last one (in the shards it was started with)."""
        import numpy as np

        from mirage_kg.progress import progress_bar

        graphs, done = cls._resume(path, matrix.shape[1], len(matrix))
        if not graphs:
            graphs = [_new_index(matrix.shape[1]) for _ in range(shards or shard_count())]
        if note is not None and len(matrix) - done:
            resumed = f", resuming after {done:,}" if done else ""
            note(f"indexing {len(matrix):,} label vectors for nearest-neighbour search in {len(graphs)} "
                 f"shard{'s' if len(graphs) > 1 else ''}{resumed}")
        started, since_checkpoint = time.perf_counter(), 0
        pool = ThreadPoolExecutor(max_workers=len(graphs)) if len(graphs) > 1 else None
        try:
            with progress_bar("indexing label vectors", total=len(matrix), unit="vectors") as advance:
                advance(done)
                for start in range(done, len(matrix), BATCH):
                    stop = min(start + BATCH, len(matrix))
                    cls._add(pool, graphs, np.arange(start, stop, dtype=np.int64),
                             np.asarray(matrix[start:stop], np.float32))
                    advance(stop - start)
                    since_checkpoint += stop - start
                    if path is not None and since_checkpoint >= checkpoint_rows and stop < len(matrix):
                        cls._checkpoint(graphs, path)
                        since_checkpoint = 0
        finally:
            if pool is not None:
                pool.shutdown()
        if note is not None and len(matrix) - done:
            note(f"indexed {len(matrix) - done:,} label vectors in {time.perf_counter() - started:.0f} s")
        built = cls(graphs, np.arange(len(matrix), dtype=np.int64))
        if path is not None:
            try:
                built.save(path)
            except OSError:
                pass  # a cache: kept in memory this time
            for file in _shard_files(checkpoint_file(path, 0)):
                file.unlink(missing_ok=True)
            checkpoint_file(path, 0).unlink(missing_ok=True)
        return built

    @staticmethod
    def _checkpoint(graphs: Sequence[Any], path: Path) -> None:
        """Save every shard as a checkpoint beside ``path`` (shard 0's last: a resumed build reads from it on)."""
        pid = os.getpid()
        files = [checkpoint_file(path, number) for number in range(len(graphs))]
        temporary = [file.with_name(f".{file.name}.{pid}.tmp") for file in files]
        try:
            for graph, tmp in zip(graphs, temporary):
                graph.save(str(tmp))
            checkpoint_file(path, 0).unlink(missing_ok=True)  # no checkpoint while the shards are half-replaced
            for file, tmp in reversed(list(zip(files, temporary))):
                os.replace(tmp, file)
        except OSError:
            pass  # a checkpoint only saves time
        finally:
            for tmp in temporary:
                tmp.unlink(missing_ok=True)

    def carry(self, old_texts: Sequence[str], new_texts: Sequence[str], matrix: np.ndarray) -> VectorIndex | None:
        """This index (over ``old_texts``' vectors) brought to ``new_texts`` (the rows of ``matrix``): the keys of
        gone texts removed, new texts added under new keys (each to its shard), kept texts keyed as before. None
        when so much changed that a fresh build is better (``REBUILD_SHARE``)."""
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
        graphs = self._shards
        if self.path is not None:  # a viewed index is read-only: load it whole to change it
            from usearch.index import Index

            graphs = [Index.restore(str(file)) for file in _shard_files(self.path)[:self.shards]]
            for graph in graphs:
                graph.expansion_search = EXPANSION_SEARCH
        if gone:
            gone_keys = np.asarray(gone, dtype=np.int64)
            for graph, at in zip(graphs, _stripe(gone_keys, len(graphs))):
                if len(at):
                    graph.remove(gone_keys[at].astype(np.uint64))
        added = sorted(new_row.values())
        if added:
            keys = np.arange(len(rows), len(rows) + len(added), dtype=np.int64)
            with ThreadPoolExecutor(max_workers=len(graphs)) as pool:
                self._add(pool if len(graphs) > 1 else None, graphs, keys, np.asarray(matrix[added], np.float32))
            rows = np.concatenate([rows, np.asarray(added, dtype=np.int64)])
        return VectorIndex(graphs, rows)

    # --- searching -----------------------------------------------------------------------------------------------
    def search(self, vector: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The (about) ``count`` rows nearest the unit ``vector``, best first, and their similarities: each shard's
        nearest, merged by distance."""
        import numpy as np

        query = np.asarray(vector, np.float32)
        found_keys, found_distances = [], []
        # every shard at once, each on a thread of its own: usearch releases the GIL while it searches, so a
        # search takes about one shard's time, not the sum of theirs
        pending = [self._search_pool.submit(shard.search, query, count, threads=1)
                   for shard in self._shards[1:]] if self._search_pool is not None else []
        answers = [self._shards[0].search(query, count, threads=1)] + [job.result() for job in pending]
        for found in answers:
            keys = np.asarray(found.keys, dtype=np.int64).reshape(-1)
            distances = np.asarray(found.distances, dtype=np.float32).reshape(-1)
            valid = (keys >= 0) & (keys < len(self.rows))
            found_keys.append(keys[valid])
            found_distances.append(distances[valid])
        keys, distances = np.concatenate(found_keys), np.concatenate(found_distances)
        if len(self._shards) > 1:
            order = np.lexsort((keys, distances))[:count]
            keys, distances = keys[order], distances[order]
        rows = self.rows[keys]
        kept = rows >= 0
        return rows[kept], (1.0 - distances)[kept]


def drop_files(folder: Path, prefix: str, keep: Path | None) -> None:
    """Remove this kind's index files of other fingerprints (and their checkpoints)."""
    for old in folder.glob(prefix + "*"):
        if keep is not None and (old == keep or old.name.startswith(keep.name)):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
