"""The embedded store: pyoxigraph in memory or in a folder on disk. The default everywhere.

``OxigraphStore`` opens a store (a writer under its lock, or a read-only handle beside it), names its content for
caches and closes it; querying (``oxigraph_query``), writing (``oxigraph_write``) and loading (``oxigraph_load``)
are the layers it builds on."""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import uuid
import weakref
from pathlib import Path

import pyoxigraph as ox

from mirage_kg.errors import StoreError
from mirage_kg.store import checkpoints
from mirage_kg.store.base import MANIFEST_GRAPH, PENDING
from mirage_kg.store.content_key import ContentKey, files_key, key_of, record, settled_files_key, steady_open
from mirage_kg.store.oxigraph_load import OxigraphLoads
from mirage_kg.store.oxigraph_query import WritesCounted
from mirage_kg.store.oxigraph_write import COMMIT_INTO

#: on-disk writers not yet closed. At a normal interpreter exit each is closed (``_close_writers_left_open``): a
#: native store dropped at exit instead rewrites its files after the last record (RocksDB flushes and compacts),
#: and the next process would then rebuild every cache (the degree and label indexes: minutes at UMLS size)
_OPEN_WRITERS: "weakref.WeakSet[OxigraphStore]" = weakref.WeakSet()


@atexit.register
def _close_writers_left_open() -> None:
    for store in list(_OPEN_WRITERS):
        with contextlib.suppress(Exception):  # exiting: a store that cannot close now is keyed by its files next
            store.close()


class OxigraphStore(OxigraphLoads):
    """pyoxigraph's ``Store``: ``OxigraphStore()`` in memory, ``OxigraphStore(path)`` on disk (created if absent).

    ``quads`` reads the quad index directly (``indexed``), so the graph layer walks it node by node for the
    searches SPARQL would make slow (bridge search, adjacency, components)."""

    indexed = True
    knows_commit_on_interrupt = True

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.location = str(self.path) if self.path else "memory"
        self.read_only = read_only and self.path is not None
        self._lock = threading.RLock()  # pyoxigraph is thread-safe for reads; serialise writes for the journal
        self._raw_writes = [0]  # writes through ``raw`` (``WritesCounted``)
        self._writer_lock = None
        self._checkpoint = None
        #: what names the content for caches (``content_key``), valid while ``version`` is ``_content_version``
        self._content = ContentKey(None)
        self._content_version = self.version
        if self.path is None:
            self.raw = ox.Store()
        elif self.read_only:
            self.raw = self._open_for_reading(self.path)
        else:
            # the files before this writer opens name what it opens (opening changes them, not the content)
            # (a killed load's checkpoint may be put back on open: then the content is named anew)
            files = files_key(self.path) if self.is_store(self.path) and not checkpoints.any_found(self.path) \
                else None
            self.raw = WritesCounted(self._open_for_writing(self.path), self._raw_writes)
            try:
                self._settle_checkpoints()
                self.remove_orphans()
                self.recover()
            except BaseException:
                self.close()
                raise
            if files is not None and self.version == self._content_version:  # nothing settled or recovered
                self._content = key_of(self.path, files, self.location)
                if self._content.key is not None:
                    # opening rewrote RocksDB's MANIFEST, OPTIONS and log (and starts compactions), not the
                    # content: name the files once they settle, so a writer killed before it writes (no close)
                    # costs no rebuild
                    record(self.path, settled_files_key(self.path), self._content.key)
            _OPEN_WRITERS.add(self)

    # --- opening -------------------------------------------------------------------------------------------
    @staticmethod
    def is_store(path: Path) -> bool:
        """Whether a folder holds an embedded store (RocksDB's CURRENT file), so a reader never makes one."""
        return (path / "CURRENT").is_file()

    def _open_for_reading(self, path: Path) -> ox.Store:
        """A read-only handle: takes no lock, so any number of readers share the store (beside a writer, too:
        they see it as it was when they opened), and a store on a read-only file system (or chmod a-w) is
        readable. A killed load's leftovers are dropped first when no writer holds the store."""
        if path.is_dir() and checkpoints.any_found(path):  # a killed load's checkpoint, or a put-back under way
            self._repair(path)
            checkpoints.wait_for_restore(path)  # another process putting a checkpoint back: milliseconds
        if not self.is_store(path):
            what = f"no store at {path}" if not path.exists() else \
                f"{path} is not a mirage-kg store (no store files in it; only `load` makes one)"
            raise StoreError(f"{what}; create one with `mirage-kg load FILE --store {path}`")
        raw, files = steady_open(path, lambda: self._read_only_handle(path))
        if self._has_leftovers(raw):
            del raw
            self._repair(path)
            raw, files = steady_open(path, lambda: self._read_only_handle(path))
        self._content = key_of(path, files, self.location)
        return raw

    def content_key(self) -> ContentKey:
        """On disk: a read-only handle's content is named at open (the record of the last mirage-kg writer, or
        its files); a writer's content is named anew after each of its own writes (and recorded at close, with
        the files it leaves). In memory: None (the caller counts: a memory store lives in this process only)."""
        if self.path is None:
            return ContentKey(None)
        if not self.read_only and (self._content.key is None or self._content_version != self.version):
            key = "w" + uuid.uuid4().hex[:19]
            self._content = ContentKey(key)
            self._content_version = self.version
            raw = self.__dict__.get("raw")  # (close names the content after the native store closed)
            if raw is not None:  # named for readers beside this writer too: they find the indexes it builds
                raw.flush()
                record(self.path, settled_files_key(self.path), key)
        return self._content

    @staticmethod
    def _repair(path: Path) -> None:
        """Do what the next writer would do to a killed load's leftovers, unless a writer holds the store (or
        the folder is read-only): then the reader reads what is there."""
        try:
            OxigraphStore(path).close()
        except StoreError:
            pass

    def _read_only_handle(self, path: Path, attempts: int = 5) -> ox.Store:
        for attempt in range(attempts):
            try:
                return ox.Store.read_only(str(path))
            except OSError as exc:
                raise StoreError(f"cannot open store {self.location} for reading: {exc}") from exc
            except RuntimeError as exc:  # a live writer's compaction removed a file the reader was opening
                if attempt == attempts - 1:
                    raise StoreError(f"cannot open store {self.location} for reading while it is being written: "
                                     f"{exc}; try again when the load ends") from exc
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    @staticmethod
    def _has_leftovers(raw: ox.Store) -> bool:
        manifest = ox.NamedNode(MANIFEST_GRAPH)
        return any(next(iter(raw.quads_for_pattern(None, ox.NamedNode(mark), None, manifest)), None) is not None
                   for mark in (PENDING, COMMIT_INTO))

    def remove_orphans(self) -> list[Path]:
        """Delete the ``bulk-*.sst`` files a killed bulk load left in the folder (we hold the writer's lock, so
        no load of ours is using them); returns what was removed."""
        removed = []
        if self.path is not None and not self.read_only:
            for orphan in self.path.glob("bulk-*.sst"):
                try:
                    orphan.unlink()
                    removed.append(orphan)
                except OSError:
                    pass  # not ours to remove after all; the next writer tries again
        return removed

    def close(self) -> None:
        """Close the native store; a writer then records which files its content key names (``content_key``), so
        the next process to open the store finds the caches built from this content."""
        _OPEN_WRITERS.discard(self)
        if self._abandoned:
            return  # a transaction still runs in this process: the process ends, the next open rolls it back
        self._scratch = None  # a scratch store left by an interrupted swap is reopened by recovery
        raw = self.__dict__.pop("raw", None)
        writer = raw is not None and self.path is not None and not self.read_only
        key = self.content_key().key if writer else None
        flushed = False
        if writer:
            try:
                raw.flush()
                flushed = True
            except (OSError, RuntimeError):  # RuntimeError: a read-only instance has nothing to flush
                pass
        del raw  # the last reference: the native store closes now, not when a traceback is freed
        if flushed and key is not None and self.path is not None:
            record(self.path, files_key(self.path), key)  # still under our writer lock
        self._release_writer_lock()
