"""The embedded store: pyoxigraph in memory or in a folder on disk. The default everywhere."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import wait
from pathlib import Path
from typing import IO, Any, TypeVar

try:
    import fcntl
except ImportError:  # Windows has no fcntl: the pipe keeps its default size there
    fcntl = None  # type: ignore[assignment]

import pyoxigraph as ox

from mirage_kg.errors import QueryError, StoreError
from mirage_kg.model.namespaces import MKG
from mirage_kg.store import checkpoints
from mirage_kg.store.content_key import ContentKey, files_key, key_of, record, settled_files_key, steady_open
from mirage_kg.store.base import MANIFEST_GRAPH, PENDING, LineBlocks, LineReader, LoadReceipt, Quad, Store
from mirage_kg.model.terms import Term, iri_ref, literal
from mirage_kg.threads import in_daemon_thread

#: media type -> pyoxigraph's parser and serializer format (what ``RDF_FORMATS`` names), for every store that
#: parses or writes RDF with pyoxigraph
OXIGRAPH_FORMATS = {
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/n-quads": ox.RdfFormat.N_QUADS,
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/trig": ox.RdfFormat.TRIG,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}
#: the manifest's record of a swap under way: staging graph -> target graph, and how (merge or replace)
COMMIT_INTO = MKG + "commitInto"
COMMIT_MODE = MKG + "commitMode"
#: what names a staging graph (``<graph>/staging/<hex>``, see ``Store.load``)
STAGING = "/staging/"
#: quads per transaction when a graph is emptied (a few tens of MB of pyoxigraph memory)
CLEAR_CHUNK = 100_000
#: a replace rebuilds the store from its other graphs when they hold at most this many quads per quad replaced
REBUILD_SHARE = 1.5
#: the media types whose statements carry their own graph name
QUAD_FORMATS = {"application/n-quads", "application/trig"}
_XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
T = TypeVar("T")
#: on-disk writers not yet closed. At a normal interpreter exit each is closed (``_close_writers_left_open``): a
#: native store dropped at exit instead rewrites its files after the last record (RocksDB flushes and compacts),
#: and the next process would then rebuild every cache (the degree and label indexes: minutes at UMLS size)
_OPEN_WRITERS: "weakref.WeakSet[OxigraphStore]" = weakref.WeakSet()


@atexit.register
def _close_writers_left_open() -> None:
    for store in list(_OPEN_WRITERS):
        with contextlib.suppress(Exception):  # exiting: a store that cannot close now is keyed by its files next
            store.close()


class _Interrupt:
    """Whether Ctrl-C was pressed, readable from any thread even while the main thread is inside native code.

    Python runs a signal handler only when the main thread is back in Python, which a native bulk load does not
    do until the load ends (minutes for a big one); but the C-level handler writes the signal number to
    the wakeup pipe at once, so the thread feeding the parser sees it within one chunk."""

    def __init__(self, wakeup: int | None) -> None:
        self._flag = threading.Event()
        self._wakeup = wakeup

    def set(self) -> None:
        self._flag.set()

    def is_set(self) -> bool:
        if not self._flag.is_set() and self._wakeup is not None:
            try:
                data = os.read(self._wakeup, 512)
            except OSError:  # nothing written yet (non-blocking), or the block has ended
                data = b""
            if bytes([signal.SIGINT]) in data:
                self._flag.set()
        return self._flag.is_set()


@contextlib.contextmanager
def _deferred_interrupt() -> Iterator[_Interrupt | None]:
    """SIGINT sets the yielded flag instead of raising where it lands (inside native code it would wait for the
    native call to end); KeyboardInterrupt is raised when the block ends if it arrived. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    try:
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter: the flag alone (set once the main thread is back in Python)
        os.close(read_fd)
        os.close(write_fd)
        read_fd = write_fd = previous_fd = -1
    interrupt = _Interrupt(read_fd if read_fd >= 0 else None)
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, frame: interrupt.set())
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        if write_fd >= 0:
            signal.set_wakeup_fd(previous_fd)
            interrupted = interrupt.is_set()  # read what the pipe holds before it closes
            os.close(read_fd)
            os.close(write_fd)
            interrupt._wakeup = None
            if interrupted:
                interrupt.set()
    if interrupt.is_set():
        raise KeyboardInterrupt


def _pump(reader: LineReader, interrupted: _Interrupt | None, sink: IO[bytes]) -> None:
    """Copy the loader's N-Triples lines to ``sink`` (the native bulk loader's pipe) a MiB at a time, checking for
    Ctrl-C between chunks: an interrupted load ends its input with a syntax error, so the parser stops there.

    A load is one native bulk load, as pyoxigraph's own ``bulk_load`` of a file is: the native loader holds its
    memory to a few batches of 1M quads whatever the input's size. (Cutting the input into several loads only
    cost: each one's table files were ingested on their own and left for compaction. UMLS-shaped, 0.9M triples,
    2026-12-01: 64 MB segments made 269-282 MB on disk against 166-196 MB for one load, CPU within noise, peak
    725 vs 393 MiB.)"""
    while True:
        if interrupted is not None and interrupted.is_set():
            sink.write(b"\n<interrupted by the user\n")  # a syntax error: the parser stops here
            return
        chunk = reader.read(1 << 20)
        if not chunk:
            return
        sink.write(chunk)


#: bytes a load's pipe holds: what the line producer may run ahead of the parser (Linux's default is 64 KiB)
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """Let the line producer run up to ``PIPE_BYTES`` ahead of the native parser, so that neither waits on the
    other for each 64 KiB (one wake-up of each thread per pipe-full). Linux only, and capped by
    ``/proc/sys/fs/pipe-max-size``: where it cannot, the default pipe still carries the same bytes."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setter is None:
        return
    try:
        fcntl.fcntl(fd, setter, PIPE_BYTES)
    except OSError:
        pass  # above the system's cap for an unprivileged process: a smaller pipe, same data


#: the native store's methods that write (``_WritesCounted`` counts them)
_WRITE_METHODS = frozenset({"add", "remove", "update", "extend", "bulk_extend", "load", "bulk_load", "clear",
                            "clear_graph", "remove_graph", "add_graph"})


class _WritesCounted:
    """An on-disk writer's native store, as ``OxigraphStore.raw``: every write through it, ours or a caller's
    (``store.raw.add(...)``), moves the owner's ``version``, so no cache is keyed by content it no longer has. It
    holds a shared counter, not its owner, so dropping it closes the native store at once (no reference cycle)."""

    __slots__ = ("_native", "_writes")

    def __init__(self, native: ox.Store, writes: list[int]) -> None:
        self._native = native
        self._writes = writes

    def __getattr__(self, name: str) -> Any:
        if name in _WRITE_METHODS:
            self._writes[0] += 1
        return getattr(self._native, name)

    def __len__(self) -> int:
        return len(self._native)

    def __iter__(self) -> Iterator[ox.Quad]:
        return iter(self._native)

    def __contains__(self, quad: object) -> bool:
        return quad in self._native


class _InterruptibleReader:
    """A binary stream that stops (raising) once the load is interrupted, so the native parser pulling it ends."""

    def __init__(self, inner: IO[bytes], interrupted: _Interrupt) -> None:
        self._inner = inner
        self._interrupted = interrupted

    def read(self, size: int = -1) -> bytes:
        if self._interrupted.is_set():
            raise KeyboardInterrupt
        return self._inner.read(size)


def to_term(node: object) -> Term:
    """A pyoxigraph term as a plain ``Term``."""
    if isinstance(node, ox.NamedNode):
        return Term("uri", node.value)
    if isinstance(node, ox.Literal):
        dt = node.datatype.value if node.datatype is not None else None
        # a plain string has no datatype in SPARQL JSON results: the same Term whichever store answered
        return Term("literal", node.value, node.language, None if node.language or dt == _XSD_STRING else dt)
    if isinstance(node, ox.BlankNode):
        return Term("bnode", node.value)
    return Term("triple", str(node))


def to_node(term: Term) -> ox.NamedNode | ox.Literal | ox.BlankNode:
    if term.kind == "uri":
        return ox.NamedNode(term.value)
    if term.kind == "bnode":
        return ox.BlankNode(term.value)
    if term.lang:
        return ox.Literal(term.value, language=term.lang)
    if term.datatype:
        return ox.Literal(term.value, datatype=ox.NamedNode(term.datatype))
    return ox.Literal(term.value)


class OxigraphStore(Store):
    """pyoxigraph's ``Store``: ``OxigraphStore()`` in memory, ``OxigraphStore(path)`` on disk (created if absent).

    ``quads`` reads the quad index directly (``indexed``), so the graph layer walks it node by node for the
    searches SPARQL would make slow (bridge search, adjacency, components)."""

    indexed = True
    knows_commit_on_interrupt = True
    _own_writes = 0

    @property
    def version(self) -> int:  # type: ignore[override]
        """A count of this object's writes (only it writes to its store; another process opens it read-only, as
        it was), through its methods or its ``raw`` store: the graph layer re-reads the manifest, and caches are
        keyed anew, only when it moved."""
        return self._own_writes + self._raw_writes[0]

    @version.setter
    def version(self, value: int) -> None:
        self._own_writes = value - self._raw_writes[0]

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.location = str(self.path) if self.path else "memory"
        self.read_only = read_only and self.path is not None
        self._lock = threading.RLock()  # pyoxigraph is thread-safe for reads; serialise writes for the journal
        self._raw_writes = [0]  # writes through ``raw`` (``_WritesCounted``)
        self._writer_lock: checkpoints.WriterLock | None = None
        self._checkpoint: checkpoints.Checkpoint | None = None
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
            self.raw = _WritesCounted(self._open_for_writing(self.path), self._raw_writes)
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
            self._content = ContentKey("w" + uuid.uuid4().hex[:19])
            self._content_version = self.version
            raw = self.__dict__.get("raw")  # (close names the content after the native store closed)
            if raw is not None:  # named for readers beside this writer too: they find the indexes it builds
                raw.flush()
                record(self.path, settled_files_key(self.path), self._content.key)  # type: ignore[arg-type]
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

    # --- reading -------------------------------------------------------------------------------------------
    def _run(self, query: str) -> object:
        try:
            return self.raw.query(query, use_default_graph_as_union=True)
        except SyntaxError as exc:
            raise QueryError(f"invalid SPARQL: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"store {self.location}: {exc}") from exc

    def _evaluate(self, work: Callable[[threading.Event], T], timeout: float | None) -> T:
        """``work(cancelled)`` (a query run to its last row), bounded by ``timeout``. pyoxigraph checks no deadline
        and evaluates without the GIL, so the work runs in a daemon thread and the caller stops waiting at the
        deadline. The caller then sets ``cancelled``, which the work checks between rows: an abandoned query stops
        at its next row instead of collecting rows until it ends (in a long-lived process such as `serve`, one
        timed-out cross product used to grow memory without bound). A single row that takes long (an aggregate
        over a huge join) still finishes in the background; its result is dropped."""
        cancelled = threading.Event()
        inner = work

        def work(cancelled: threading.Event) -> T:  # type: ignore[no-redef]
            try:
                return inner(cancelled)
            except OSError as exc:  # raised while rows are read: a storage error, or an allowed SERVICE failing
                raise StoreError(f"store {self.location}: the query failed: "
                                 f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}") from exc

        if not timeout:
            return work(cancelled)
        future = in_daemon_thread(work, cancelled, name="mirage-kg-query")
        done, _ = wait([future], timeout)
        if not done:
            cancelled.set()
            raise QueryError(f"query exceeded its timeout of {timeout} s; narrow it or raise --timeout")
        return future.result()  # the query's rows, or what it raised

    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Term]]:
        def work(cancelled: threading.Event) -> list[dict[str, Term]]:
            result = self._run(query)
            if not isinstance(result, ox.QuerySolutions):
                raise QueryError("expected a SELECT query")
            names = [v.value for v in result.variables]
            rows: list[dict[str, Term]] = []
            for solution in result:
                if cancelled.is_set():
                    return []  # nobody waits for these rows any more
                row = {}
                for name in names:
                    value = solution[name]
                    if value is not None:
                        row[name] = to_term(value)
                rows.append(row)
            return rows

        return self._evaluate(work, timeout)

    def select_all(self, query: str, *, timeout: float | None = None) -> Iterator[dict[str, Term]]:
        """Every row, streamed from the native iterator as it is read (``select`` collects a list first, which
        for a whole-graph pass is millions of dicts at once); a timeout needs ``select``'s worker thread."""
        if timeout:
            yield from self.select(query, timeout=timeout)
            return
        result = self._run(query)
        if not isinstance(result, ox.QuerySolutions):
            raise QueryError("expected a SELECT query")
        names = [v.value for v in result.variables]
        for solution in result:
            yield {name: to_term(value) for name in names if (value := solution[name]) is not None}

    def iri_rows(self, query: str, variables: Sequence[str]) -> Iterator[tuple[str | None, ...]]:
        result = self._run(query)
        if not isinstance(result, ox.QuerySolutions):
            raise QueryError("expected a SELECT query")
        for solution in result:  # no Term per value: these passes read millions of rows
            yield tuple(value.value if isinstance(value := solution[name], ox.NamedNode) else None
                        for name in variables)

    def tsv_blocks(self, query: str, variables: Sequence[str], consume: Callable[[bytes], None],
                   block: int | None = None) -> None:
        # the engine serialises the rows itself, straight into the blocks: no Python object per row or term
        result = self._run(query)
        if not isinstance(result, ox.QuerySolutions):
            raise QueryError("expected a SELECT query")
        if [v.value for v in result.variables] != list(variables):
            raise QueryError(f"expected the variables {list(variables)}, the query selects "
                             f"{[v.value for v in result.variables]}")
        sink = LineBlocks(consume, block=block)
        result.serialize(sink, ox.QueryResultsFormat.TSV)
        sink.close()

    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        def work(cancelled: threading.Event) -> bool:
            result = self._run(query)
            if not isinstance(result, ox.QueryBoolean):
                raise QueryError("expected an ASK query")
            return bool(result)

        return self._evaluate(work, timeout)

    def construct(self, query: str, *, timeout: float | None = None) -> list[tuple[Term, Term, Term]]:
        def work(cancelled: threading.Event) -> list[tuple[Term, Term, Term]]:
            result = self._run(query)
            if not isinstance(result, ox.QueryTriples):
                raise QueryError("expected a CONSTRUCT or DESCRIBE query")
            triples: list[tuple[Term, Term, Term]] = []
            for t in result:
                if cancelled.is_set():
                    return []  # nobody waits for these triples any more
                triples.append((to_term(t.subject), to_term(t.predicate), to_term(t.object)))
            return triples

        return self._evaluate(work, timeout)

    def graphs(self) -> list[str]:
        return sorted(g.value for g in self.raw.named_graphs() if isinstance(g, ox.NamedNode))

    def triple_count(self, graph: str | None = None) -> int:
        if graph is None:
            return len(self.raw)
        if not self.raw.contains_named_graph(ox.NamedNode(graph)):
            return 0
        return super().triple_count(graph)  # a COUNT in Rust: far faster than iterating quads in Python

    def quads(self, subject: str | Term | None = None, predicate: str | None = None, obj: str | Term | None = None,
              graph: str | None = None) -> Iterator[Quad]:
        """The pattern primitive, answered from the quad index (named graphs only, like the SPARQL default)."""
        try:
            nodes = [None if t is None else to_node(t) if isinstance(t, Term) else ox.NamedNode(t)
                     for t in (subject, predicate, obj)]
        except ValueError:
            return  # a term no quad can hold (e.g. an invalid IRI) matches nothing
        where = ox.NamedNode(graph) if graph else None
        for quad in self.raw.quads_for_pattern(nodes[0], nodes[1], nodes[2], where):
            name = quad.graph_name
            if isinstance(name, ox.NamedNode):
                yield Quad(to_term(quad.subject), to_term(quad.predicate), to_term(quad.object), name.value)

    def links(self, node: str, direction: str, predicate: str | None = None) -> Iterator[tuple[str, str]]:
        try:
            center = ox.NamedNode(node)
            relation = ox.NamedNode(predicate) if predicate is not None else None
        except ValueError:
            return
        named, iri = ox.NamedNode, ox.NamedNode
        if direction == "forward":
            for quad in self.raw.quads_for_pattern(center, relation, None):
                other = quad.object
                if type(other) is iri and type(quad.graph_name) is named:
                    yield quad.predicate.value, other.value
        else:
            for quad in self.raw.quads_for_pattern(None, relation, center):
                other = quad.subject
                if type(other) is iri and type(quad.graph_name) is named:
                    yield quad.predicate.value, other.value

    def literals(self, subject: str, predicate: str) -> Iterator[tuple[str, str | None]]:
        try:
            found = self.raw.quads_for_pattern(ox.NamedNode(subject), ox.NamedNode(predicate), None)
        except ValueError:
            return
        literal, named = ox.Literal, ox.NamedNode
        for quad in found:
            value = quad.object
            if type(value) is literal and type(quad.graph_name) is named:
                yield value.value, value.language

    def triple_lines(self, graph: str, subject: str | None = None, predicate: str | None = None,
                     obj: str | None = None) -> Iterator[str]:
        try:
            nodes = [None if iri is None else ox.NamedNode(iri) for iri in (subject, predicate, obj)]
            where = ox.NamedNode(graph)
        except ValueError:
            return  # no quad holds an invalid IRI
        for quad in self.raw.quads_for_pattern(nodes[0], nodes[1], nodes[2], where):
            yield f"{quad.triple} ."

    def holds(self, subject: str, predicate: str, obj: str, graph: str) -> bool:
        try:
            quad = ox.Quad(ox.NamedNode(subject), ox.NamedNode(predicate), ox.NamedNode(obj), ox.NamedNode(graph))
        except ValueError:
            return False  # no quad holds an invalid IRI
        return quad in self.raw

    def predicates_between(self, subject: str, obj: str) -> Iterator[str]:
        try:
            found = self.raw.quads_for_pattern(ox.NamedNode(subject), None, ox.NamedNode(obj))
        except ValueError:
            return
        for quad in found:
            if type(quad.graph_name) is ox.NamedNode:
                yield quad.predicate.value

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
        from mirage_kg.errors import UpdateInterrupted

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

    # --- loading ---------------------------------------------------------------------------------------------
    _interrupted: _Interrupt | None = None

    def load(self, data: IO[bytes] | Iterable[str], **options: Any) -> LoadReceipt:  # type: ignore[override]
        """``Store.load``, with Ctrl-C made prompt and safe: while the native bulk loader runs, Python cannot
        raise KeyboardInterrupt in the main thread, so SIGINT only sets a flag; the line producer and the stream
        reader stop at the next chunk, the parser is cut off, and the load is rolled back. On disk every load
        (new graph, merge, replace) goes in place under a rollback checkpoint (see ``checkpoints``), so the
        rollback takes milliseconds whatever was loaded, and a merge costs what a fresh load does."""
        with _deferred_interrupt() as interrupted:
            self._interrupted = interrupted
            self.version += 1
            try:
                if self.path is None or self.read_only or self._checkpoint is not None:
                    return super().load(data, **options)
                self._take_checkpoint(str(options.get("graph", "")))
                try:
                    return super().load(data, **options)
                finally:
                    self._settle_checkpoint()
            finally:
                self._interrupted = None
                self.version += 1

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
        self.raw = _WritesCounted(self._open_for_writing(self.path), self._raw_writes)

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

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        self._writable()
        interrupted = self._interrupted
        if interrupted is not None and not isinstance(data, LineReader):
            data = _InterruptibleReader(data, interrupted)  # type: ignore[assignment]
        try:
            self._bulk_load_guarded(data, media_type, graph, base_iri)
        except BaseException:
            if interrupted is not None and interrupted.is_set():
                raise KeyboardInterrupt from None  # whatever the cut-off parser said: the user stopped it
            raise
        if interrupted is not None and interrupted.is_set():
            raise KeyboardInterrupt

    def _bulk_load_guarded(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        try:
            self._bulk_load_into(data, media_type, graph, base_iri)
        except OSError as exc:  # disk full, an I/O error: the load is rolled back by the caller
            full = getattr(exc, "errno", None) == errno.ENOSPC or "no space left" in str(exc).lower()
            hint = "; free some disk space and load again" if full else ""
            raise StoreError(f"store {self.location}: {exc.strerror or exc}{hint} (nothing was committed)") from exc

    def _bulk_load_into(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        fmt = OXIGRAPH_FORMATS[media_type]
        with self._lock:
            if media_type in QUAD_FORMATS:
                # Quad formats name their own graphs; we re-home every quad into the load's graph so the
                # journal covers it (provenance is the load's graph).
                scratch = ox.Store()
                scratch.bulk_load(input=data, format=fmt, base_iri=base_iri)
                target = ox.NamedNode(graph)
                self._destination(graph).bulk_extend(ox.Quad(q.subject, q.predicate, q.object, target)
                                                     for q in scratch)
            elif isinstance(data, LineReader):
                self._bulk_load_lines(data, fmt, graph, base_iri)
            else:
                self._destination(graph).bulk_load(input=data, format=fmt, to_graph=ox.NamedNode(graph),
                                                   base_iri=base_iri)
        if self.path is not None:
            self._destination(graph).flush()

    def _bulk_load_lines(self, reader: LineReader, fmt: ox.RdfFormat, graph: str, base_iri: str | None) -> None:
        """Python makes the lines in one thread while Rust parses and indexes them in another, through a pipe:
        pyoxigraph reads the pipe's file descriptor without the GIL, so the two overlap on two cores. A Ctrl-C
        is acted on within one chunk of lines (the parser is cut off, see ``_pump``)."""
        read_fd, write_fd = os.pipe()
        _widen_pipe(write_fd)

        def produce() -> None:
            try:
                with os.fdopen(write_fd, "wb", buffering=1 << 20) as sink:
                    _pump(reader, self._interrupted, sink)
            except BrokenPipeError:
                pass  # the parser stopped first; its own error is raised below

        producer = in_daemon_thread(produce, name="mirage-kg-load")
        try:
            self._destination(graph).bulk_load(path=f"/dev/fd/{read_fd}", format=fmt, to_graph=ox.NamedNode(graph),
                                               base_iri=base_iri)
        finally:
            os.close(read_fd)
            wait([producer])
        producer.result()  # the loader's error (a bad row), in the caller's thread

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

    def _destination(self, graph: str) -> ox.Store:
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

    def _copy_graph(self, source: ox.Store, name: str, graph: str, into: ox.Store | None = None) -> None:
        """Stream graph ``name`` of ``source`` into ``graph`` of this store (or of ``into``): Rust writes
        N-Triples into a pipe that the native bulk loader reads, so nothing is held in memory or passes through
        Python objects."""
        read_fd, write_fd = os.pipe()
        _widen_pipe(write_fd)

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

    def export(self, out: IO[bytes], media_type: str) -> None:
        fmt = OXIGRAPH_FORMATS[media_type]
        if media_type in QUAD_FORMATS:
            self.raw.dump(output=out, format=fmt)
        else:
            self._dump_union(out, fmt)

    def export_graph(self, out: IO[bytes], graph: str) -> None:
        self.raw.dump(output=out, format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(graph))

    def _dump_union(self, out: IO[bytes], fmt: ox.RdfFormat) -> None:
        triples = ox.Store()
        triples.bulk_extend(ox.Quad(q.subject, q.predicate, q.object, ox.DefaultGraph()) for q in self.raw)
        triples.dump(output=out, format=fmt, from_graph=ox.DefaultGraph())

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
