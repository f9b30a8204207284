"""The embedded store: pyoxigraph in memory or in a folder on disk. The default everywhere."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import pyoxigraph as ox

from mirage_kg.errors import QueryError, StoreError
from mirage_kg.store.base import LineReader, Quad, Store
from mirage_kg.terms import Term

_FORMATS = {
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/n-quads": ox.RdfFormat.N_QUADS,
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/trig": ox.RdfFormat.TRIG,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}
_QUAD_FORMATS = {"application/n-quads", "application/trig"}
_XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
T = TypeVar("T")


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

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.location = str(self.path) if self.path else "memory"
        self.read_only = read_only and self.path is not None
        self._lock = threading.RLock()  # pyoxigraph is thread-safe for reads; serialise writes for the journal
        if self.path is None:
            self.raw = ox.Store()
        elif self.read_only:
            self.raw = self._open_for_reading(self.path)
        else:
            self.raw = self._open_for_writing(self.path)
            self.remove_orphans()
            self.recover()

    # --- opening -------------------------------------------------------------------------------------------
    @staticmethod
    def is_store(path: Path) -> bool:
        """Whether a folder holds an embedded store (RocksDB's CURRENT file), so a reader never makes one."""
        return (path / "CURRENT").is_file()

    def _open_for_writing(self, path: Path) -> ox.Store:
        """The store for a writer: one at a time (RocksDB's lock), readers meanwhile still open read-only."""
        try:
            path.mkdir(parents=True, exist_ok=True)
            return ox.Store(str(path))
        except OSError as exc:
            busy = "lock" in str(exc).lower()
            hint = " (another mirage-kg process is writing to it; readers may still open it)" if busy else ""
            raise StoreError(f"cannot open store {self.location} for writing: {exc}{hint}") from exc

    def _open_for_reading(self, path: Path) -> ox.Store:
        """A read-only handle: takes no lock, so any number of readers share the store with one writer, and a
        store on a read-only file system (or chmod a-w) is readable. A killed load's leftovers are dropped first
        when no writer holds the store (a live writer's pending load is its own business)."""
        if not self.is_store(path):
            what = f"no store at {path}" if not path.exists() else \
                f"{path} is not a mirage-kg store (no store files in it; only `load` makes one)"
            raise StoreError(f"{what}; create one with `mirage-kg load FILE --store {path}`")
        try:
            raw = ox.Store.read_only(str(path))
        except OSError as exc:
            raise StoreError(f"cannot open store {self.location} for reading: {exc}") from exc
        if self._has_leftovers(raw):
            try:
                writer = ox.Store(str(path))
            except OSError:
                return raw  # a writer holds it, or the folder is read-only: read what is there
            del raw
            repair = OxigraphStore.__new__(OxigraphStore)
            repair.path, repair.location, repair.read_only, repair._lock = path, self.location, False, self._lock
            repair.raw = writer
            repair.remove_orphans()
            repair.recover()
            repair.close()
            del writer, repair
            raw = ox.Store.read_only(str(path))
        return raw

    @staticmethod
    def _has_leftovers(raw: ox.Store) -> bool:
        from mirage_kg.store.base import MANIFEST_GRAPH, PENDING

        manifest = ox.NamedNode(MANIFEST_GRAPH)
        return next(iter(raw.quads_for_pattern(None, ox.NamedNode(PENDING), None, manifest)), None) is not None

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

    def _evaluate(self, work: Callable[[], T], timeout: float | None) -> T:
        """``work()`` (a query run to its last row), bounded by ``timeout``. pyoxigraph checks no deadline and
        evaluates without the GIL, so the work runs in a daemon thread and the caller stops waiting at the
        deadline; the abandoned evaluation finishes on its own in the background (or dies with the process)."""
        if not timeout:
            return work()
        outcome: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append((True, work()))
            except BaseException as exc:  # handed to the caller's thread
                outcome.append((False, exc))
            done.set()

        threading.Thread(target=run, name="mirage-kg-query", daemon=True).start()
        if not done.wait(timeout):
            raise QueryError(f"query exceeded its timeout of {timeout} s; narrow it or raise --timeout")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Term]]:
        def work() -> list[dict[str, Term]]:
            result = self._run(query)
            if not isinstance(result, ox.QuerySolutions):
                raise QueryError("expected a SELECT query")
            names = [v.value for v in result.variables]
            rows: list[dict[str, Term]] = []
            for solution in result:
                row = {}
                for name in names:
                    value = solution[name]
                    if value is not None:
                        row[name] = to_term(value)
                rows.append(row)
            return rows

        return self._evaluate(work, timeout)

    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        def work() -> bool:
            result = self._run(query)
            if not isinstance(result, ox.QueryBoolean):
                raise QueryError("expected an ASK query")
            return bool(result)

        return self._evaluate(work, timeout)

    def construct(self, query: str, *, timeout: float | None = None) -> list[tuple[Term, Term, Term]]:
        def work() -> list[tuple[Term, Term, Term]]:
            result = self._run(query)
            if not isinstance(result, ox.QueryTriples):
                raise QueryError("expected a CONSTRUCT or DESCRIBE query")
            return [(to_term(t.subject), to_term(t.predicate), to_term(t.object)) for t in result]

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

    # --- writing -------------------------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"store {self.location} is open read-only; only `mirage-kg load` writes to a store")

    def update(self, update: str) -> None:
        self._writable()
        with self._lock:
            try:
                self.raw.update(update)
            except SyntaxError as exc:
                raise QueryError(f"invalid SPARQL update: {exc}") from exc
            except OSError as exc:
                raise StoreError(f"store {self.location}: {exc}") from exc

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        self._writable()
        try:
            self._bulk_load_into(data, media_type, graph, base_iri)
        except OSError as exc:  # disk full, an I/O error: the load is rolled back by the caller
            full = getattr(exc, "errno", None) == errno.ENOSPC or "no space left" in str(exc).lower()
            hint = "; free some disk space and load again" if full else ""
            raise StoreError(f"store {self.location}: {exc.strerror or exc}{hint} (nothing was committed)") from exc

    def _bulk_load_into(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        fmt = _FORMATS[media_type]
        with self._lock:
            if media_type in _QUAD_FORMATS:
                # Quad formats name their own graphs; we re-home every quad into the load's graph so the
                # journal covers it (provenance is the load's graph).
                scratch = ox.Store()
                scratch.bulk_load(input=data, format=fmt, base_iri=base_iri)
                target = ox.NamedNode(graph)
                self.raw.bulk_extend(ox.Quad(q.subject, q.predicate, q.object, target) for q in scratch)
            elif isinstance(data, LineReader):
                self._bulk_load_lines(data, fmt, graph, base_iri)
            else:
                self.raw.bulk_load(input=data, format=fmt, to_graph=ox.NamedNode(graph), base_iri=base_iri)
        if self.path is not None:
            self.raw.flush()

    def _bulk_load_lines(self, reader: LineReader, fmt: ox.RdfFormat, graph: str, base_iri: str | None) -> None:
        """Python makes the lines in one thread while Rust parses and indexes them in another, through a pipe:
        pyoxigraph reads the pipe's file descriptor without the GIL, so the two overlap on two cores."""
        read_fd, write_fd = os.pipe()
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                with os.fdopen(write_fd, "wb", buffering=1 << 20) as sink:
                    while chunk := reader.read(1 << 20):
                        sink.write(chunk)
            except BrokenPipeError:
                pass  # the parser stopped first; its own error is raised below
            except BaseException as exc:  # the loader's error (bad row): re-raised in the caller's thread
                failure.append(exc)

        producer = threading.Thread(target=produce, name="mirage-kg-load", daemon=True)
        producer.start()
        try:
            self.raw.bulk_load(path=f"/dev/fd/{read_fd}", format=fmt, to_graph=ox.NamedNode(graph), base_iri=base_iri)
        finally:
            os.close(read_fd)
            producer.join()
        if failure:
            raise failure[0]

    def export(self, out: IO[bytes], media_type: str) -> None:
        fmt = _FORMATS[media_type]
        if media_type in _QUAD_FORMATS:
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
        raw = self.__dict__.pop("raw", None)
        if raw is not None and self.path is not None and not self.read_only:
            try:
                raw.flush()
            except (OSError, RuntimeError):  # RuntimeError: a read-only instance has nothing to flush
                pass
