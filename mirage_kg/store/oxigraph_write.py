"""The embedded store's writer: its lock, updates (one that Ctrl-C stops with the store as it was), rollback
checkpoints on disk, and loads staged in a scratch store then swapped in, all in bounded memory, with recovery of
what a killed process left. ``OxigraphStore`` builds on it."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from concurrent.futures import wait
from pathlib import Path

import pyoxigraph as ox

from mirage_kg.errors import QueryError, StoreError, UpdateInterrupted
from mirage_kg.model.namespaces import MKG
from mirage_kg.model.terms import iri_ref, literal
from mirage_kg.store import checkpoints
from mirage_kg.store.base import MANIFEST_GRAPH, PENDING
from mirage_kg.store.oxigraph_query import OxigraphQueries, WritesCounted
from mirage_kg.threads import in_daemon_thread

#: the manifest's record of a swap under way: staging graph -> target graph, and how (merge or replace)
COMMIT_INTO = MKG + "commitInto"
COMMIT_MODE = MKG + "commitMode"
#: what names a staging graph (``<graph>/staging/<hex>``, see ``Store.load``)
STAGING = "/staging/"
#: quads per transaction when a graph is emptied (a few tens of MB of pyoxigraph memory)
CLEAR_CHUNK = 100_000
#: a replace rebuilds the store from its other graphs when they hold at most this many quads per quad replaced
REBUILD_SHARE = 1.5


class OxigraphWrites(OxigraphQueries):
    """Writing to an embedded store, one writer at a time (``_writer_lock``); ``version`` counts the writes."""

    _lock: threading.RLock
    _raw_writes: list[int]
    _writer_lock: checkpoints.WriterLock | None
    _checkpoint: checkpoints.Checkpoint | None
    _own_writes = 0

    @property
    def version(self) -> int:
        """A count of this object's writes (only it writes to its store; another process opens it read-only, as
        it was), through its methods or its ``raw`` store: the graph layer re-reads the manifest, and caches are
        keyed anew, only when it moved."""
        return self._own_writes + self._raw_writes[0]

    @version.setter
    def version(self, value: int) -> None:
        self._own_writes = value - self._raw_writes[0]

    def _open_for_writing(self, path: Path) -> ox.Store:
        """The store for a writer: one at a time (our writer lock, then RocksDB's); readers meanwhile still open
        read-only."""
        busy = " (another mirage-kg process is writing to it; readers may still open it)"
        try:
            path.mkdir(parents=True, exist_ok=True)
            if self._writer_lock is None:
                lock = checkpoints.WriterLock(path)
                if not lock.acquire():
                    raise StoreError(f"cannot open store {self.location} for writing{busy}")
                self._writer_lock = lock
                for checkpoint in checkpoints.found(path):
                    if checkpoint.restoring:  # a killed process was swapping files: finish before opening
                        checkpoints.restore(path, checkpoint)
            return ox.Store(str(path))
        except OSError as exc:
            self._release_writer_lock()
            hint = busy if "lock" in str(exc).lower() else ""
            raise StoreError(f"cannot open store {self.location} for writing: {exc}{hint}") from exc

    def _release_writer_lock(self) -> None:
        if self._writer_lock is not None:
            self._writer_lock.release()
            self._writer_lock = None

    # --- writing -------------------------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"store {self.location} is open read-only; only `mirage-kg load` writes to a store")

    def update(self, update: str) -> None:
        self._writable()
        with self._lock:
            self.version += 1
            try:
                self.raw.update(update)
            except SyntaxError as exc:
                raise QueryError(f"invalid SPARQL update: {exc}") from exc
            except OSError as exc:
                raise StoreError(f"store {self.location}: {exc}") from exc

    #: an update Ctrl-C abandoned still runs in this process: nothing more may touch the store (see
    #: ``update_atomically``)
    _abandoned = False

    def update_atomically(self, update: str) -> None:
        """``update`` in one transaction that Ctrl-C stops at once with the store as it was, where ``update``
        would finish first (a native transaction takes the main thread until it commits: a minute for a release
        difference of half a million triples).

        On disk the store is checkpointed first (milliseconds) and the transaction runs in a worker thread while
        the main thread waits for it or for Ctrl-C. Done first: it committed, the checkpoint is dropped (a Ctrl-C
        that came after is re-raised as KeyboardInterrupt: past the commit point). Ctrl-C first: the checkpoint
        is marked to be put back on the next open, so the update never counts even if its commit lands now, and
        ``UpdateInterrupted(applied=False, abandoned=True)`` is raised: the caller ends the process, since the
        native transaction cannot be stopped inside it. In memory, read-only or off the main thread: ``update``."""
        if self.path is None or self.read_only or self._checkpoint is not None \
                or threading.current_thread() is not threading.main_thread():
            self.update(update)
            return
        self._writable()
        self._take_checkpoint("")  # no graph: a process killed midway keeps what RocksDB recovered (old or new)
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
        try:
            future = in_daemon_thread(self.update, update, name="mirage-kg-update")
            while not wait([future], 0.05)[0]:
                if stop.is_set() and not future.done():
                    checkpoint, self._checkpoint = self._checkpoint, None
                    assert checkpoint is not None
                    checkpoints.mark_for_restore(checkpoint)
                    self._abandoned = True
                    raise UpdateInterrupted("stopped before the update committed; the next open of the store puts "
                                            "its previous state back", applied=False, abandoned=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        self._settle_checkpoint()
        future.result()  # what the update raised, in this thread
        if stop.is_set():
            raise KeyboardInterrupt  # after the commit

    # --- rollback checkpoints (on disk) ----------------------------------------------------------------------
    def _stages(self, before: int) -> bool:
        return self._checkpoint is None and super()._stages(before)

    def _empty_graph(self, graph: str) -> None:
        """Empty a graph that a replace reloads. Deleting is slow in RocksDB (about 1.5x what loading the same
        quads costs), so on disk, when the other graphs hold fewer quads than that, the store is rebuilt from
        them instead (copied by the native loader into a new folder, swapped in like a checkpoint)."""
        held = self.triple_count(graph)
        if self._checkpoint is None or len(self.raw) - held > REBUILD_SHARE * held:
            self._clear_graph(graph)
        else:
            self._rebuild_without(graph)

    def _rebuild_without(self, graph: str) -> None:
        assert self.path is not None
        folder, marker = checkpoints.make_marker(self.path)
        rebuilt = ox.Store(str(folder))
        for name in list(self.raw.named_graphs()):
            if isinstance(name, ox.NamedNode) and name.value != graph:
                self._copy_graph(self.raw, name.value, name.value, into=rebuilt)
        if next(iter(self.raw.quads_for_pattern(None, None, None, ox.DefaultGraph())), None) is not None:
            rebuilt.bulk_extend(self.raw.quads_for_pattern(None, None, None, ox.DefaultGraph()))
        rebuilt.flush()
        del rebuilt
        # marked as a restore under way: if killed from here on, the next open finishes swapping it in (and then
        # puts the load's own checkpoint back, since the load had not committed)
        self._restore(checkpoints.write_marker(marker.with_suffix(checkpoints.RESTORING), graph))

    def _take_checkpoint(self, graph: str) -> None:
        assert self.path is not None
        self._writable()
        folder, marker = checkpoints.make_marker(self.path)
        with self._lock:
            try:
                self.raw.backup(str(folder))
            except OSError as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise StoreError(f"store {self.location}: cannot make the rollback checkpoint a load needs: {exc}"
                                 " (nothing was changed; free some disk space?)") from exc
            self._checkpoint = checkpoints.write_marker(marker, graph)

    def _settle_checkpoint(self) -> None:
        """End the running load's checkpoint: dropped if the load committed, put back if it did not."""
        checkpoint, self._checkpoint = self._checkpoint, None
        if checkpoint is None or "raw" not in self.__dict__:
            return  # a swap of files failed midway and left the store closed: the next open finishes it
        with self._lock:
            if self._committed(checkpoint):
                self.raw.flush()  # the commit is on disk before the way back is given up
                checkpoints.drop(checkpoint)
            else:
                self._restore(checkpoint)

    def _committed(self, checkpoint: checkpoints.Checkpoint) -> bool:
        """Whether the load a checkpoint guards had committed: its graph's pending mark is gone. (A load killed
        before it set the mark changed nothing, so taking it as committed is right too.)"""
        if checkpoint.restoring:
            return False  # a restore was under way: finish it
        if not checkpoint.graph:
            return True  # a marker never written whole: its load never began
        manifest = ox.NamedNode(MANIFEST_GRAPH)
        return next(iter(self.raw.quads_for_pattern(ox.NamedNode(checkpoint.graph), ox.NamedNode(PENDING), None,
                                                    manifest)), None) is None

    def _restore(self, checkpoint: checkpoints.Checkpoint) -> None:
        """Put a checkpoint back in place of the store: close it, swap the files, open it again."""
        assert self.path is not None
        self._scratch = None
        self.__dict__.pop("raw", None)  # the only reference: the native store closes here
        try:
            ox.Store(str(self.path))  # opens only if no handle is left that could still write under the swap
        except OSError as exc:
            raise StoreError(f"store {self.location}: cannot roll the load back now ({exc}); the next "
                             "`mirage-kg load` or read of this store rolls it back") from exc
        checkpoints.restore(self.path, checkpoint)
        self.version += 1  # the content is the checkpoint's now
        self.raw = WritesCounted(self._open_for_writing(self.path), self._raw_writes)

    def _settle_checkpoints(self) -> None:
        """On a writer's open: finish what killed loads left (put back a checkpoint whose load had not committed,
        drop the others), and delete unfinished checkpoint folders."""
        assert self.path is not None
        for checkpoint in checkpoints.found(self.path):
            if self._committed(checkpoint):
                checkpoints.drop(checkpoint)
            else:
                self._restore(checkpoint)
        checkpoints.remove_unmarked(self.path)

    # --- staging, committing, rolling back and recovering in bounded memory ---------------------------------
    # A pyoxigraph transaction holds all its changes in memory, and deleting is slow (each quad from every
    # index), so a merge of a big load into a filled graph (ADD in one update) took gigabytes, and dropping a
    # staging graph minutes. Instead a staged load (into a graph that holds data, or a --force replace) goes into
    # a scratch store of its own (a folder inside the store, or memory); one small update then swaps its
    # "pending" mark for a "commit into" intent with the new manifest record, and from there the swap only rolls
    # forward, in steps that may be repeated (RDF is a set): empty the target for a replace (in chunks), stream
    # the scratch graph into the target with the native bulk loader, delete the scratch folder, clear the intent.
    # A process killed while staging leaves a pending mark (the scratch folder is simply deleted); killed after
    # the intent, the next writer to open finishes the swap.
    _scratch: dict[str, ox.Store] | None = None

    def _scratch_folder(self, staging: str) -> Path | None:
        return self.path / f"staging-{staging.rsplit('/', 1)[-1]}" if self.path is not None else None

    def _destination(self, graph: str) -> ox.Store | WritesCounted:
        """Where a bulk load into ``graph`` goes: its scratch store for a staging graph, else the store itself."""
        if STAGING not in graph:
            return self.raw
        if self._scratch is None:
            self._scratch = {}
        scratch = self._scratch.get(graph)
        if scratch is None:
            folder = self._scratch_folder(graph)
            scratch = self._scratch[graph] = ox.Store(str(folder)) if folder is not None else ox.Store()
        return scratch

    def _drop_scratch(self, staging: str) -> None:
        if self._scratch is not None:
            self._scratch.pop(staging, None)
        folder = self._scratch_folder(staging)
        if folder is not None and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)

    def _commit_staged(self, staging: str, graph: str, unmark: str, record: str, mode: str) -> None:
        intent = (f"INSERT DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(staging)} {iri_ref(COMMIT_INTO)} "
                  f"{iri_ref(graph)} ; {iri_ref(COMMIT_MODE)} {literal(mode)} }} }}")
        self.update(f"{unmark} ;\n{intent} ;\n{record}")
        self._roll_forward(staging, graph, mode)

    def _roll_forward(self, staging: str, graph: str, mode: str) -> None:
        self._writable()
        with self._lock:
            if mode == "replace":
                self._clear_graph(graph)
            scratch = (self._scratch or {}).get(staging)
            folder = self._scratch_folder(staging)
            if scratch is None and folder is not None and folder.exists():
                scratch = ox.Store(str(folder))
            if scratch is not None:
                self._copy_graph(scratch, staging, graph)
            del scratch
            self._drop_scratch(staging)
            self.raw.update(f"DELETE WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(staging)} "
                            f"{iri_ref(COMMIT_INTO)} ?graph ; {iri_ref(COMMIT_MODE)} ?mode }} }}")
            if self.path is not None:
                self.raw.flush()

    def _copy_graph(self, source: ox.Store | WritesCounted, name: str, graph: str, into: ox.Store | None = None
                    ) -> None:
        """Stream graph ``name`` of ``source`` into ``graph`` of this store (or of ``into``): Rust writes
        N-Triples into a pipe that the native bulk loader reads, so nothing is held in memory or passes through
        Python objects."""
        read_fd, write_fd = os.pipe()

        def produce() -> None:
            try:
                with os.fdopen(write_fd, "wb", buffering=1 << 20) as sink:
                    source.dump(output=sink, format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(name))
            except BrokenPipeError:
                pass

        producer = in_daemon_thread(produce, name="mirage-kg-copy")
        try:
            (self.raw if into is None else into).bulk_load(path=f"/dev/fd/{read_fd}", format=ox.RdfFormat.N_TRIPLES,
                                         to_graph=ox.NamedNode(graph))
        finally:
            os.close(read_fd)
            wait([producer])
        producer.result()

    def _clear_graph(self, graph: str, chunk: int = CLEAR_CHUNK) -> None:
        """Empty a graph in transactions of ``chunk`` quads each, so memory stays bounded whatever its size."""
        name = ox.NamedNode(graph)
        delete = (f"DELETE {{ GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }} WHERE {{ SELECT ?s ?p ?o WHERE "
                  f"{{ GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }} LIMIT {chunk} }}")
        while next(iter(self.raw.quads_for_pattern(None, None, None, name)), None) is not None:
            self.raw.update(delete)
        if self.raw.contains_named_graph(name):
            self.raw.remove_graph(name)  # the graph's name, now that it holds nothing

    def _discard(self, target: str, token: str) -> None:
        self._writable()
        if self._checkpoint is not None and STAGING not in target:
            return  # the load's checkpoint is put back when it ends (``_settle_checkpoint``): milliseconds
        with self._lock:
            if STAGING in target:
                self._drop_scratch(target)  # a staged load never touched the store: dropping it is instant
            self._clear_graph(target)
            self.raw.update(f"DELETE DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(PENDING)} "
                            f"{literal(token)} }} }}")

    def recover(self) -> list[str]:
        """Finish the swaps a killed process had committed to, then drop the loads it left pending."""
        manifest = ox.NamedNode(MANIFEST_GRAPH)
        for quad in list(self.raw.quads_for_pattern(None, ox.NamedNode(COMMIT_INTO), None, manifest)):
            mode = next(iter(self.raw.quads_for_pattern(quad.subject, ox.NamedNode(COMMIT_MODE), None, manifest)),
                        None)
            self.version += 1
            self._roll_forward(quad.subject.value, quad.object.value, mode.object.value if mode else "merge")
        dropped = super().recover()
        if dropped:
            self.version += 1
        if self.path is not None:  # scratch folders no journal entry names (killed before its first mark)
            for folder in self.path.glob("staging-*"):
                shutil.rmtree(folder, ignore_errors=True)
        return dropped
