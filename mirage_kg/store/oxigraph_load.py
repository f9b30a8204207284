"""The embedded store's load path: ``Store.load`` with Ctrl-C made prompt and safe, under a rollback checkpoint on
disk, and the native bulk loader fed through a pipe. ``OxigraphStore`` builds on it."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from concurrent.futures import wait
from typing import IO, Any

import pyoxigraph as ox

from mirage_kg.errors import StoreError
from mirage_kg.store.base import LineReader, LoadReceipt
from mirage_kg.store.bulk_feed import Interrupt, InterruptibleReader, deferred_interrupt, pump
from mirage_kg.store.oxigraph_terms import OXIGRAPH_FORMATS, QUAD_FORMATS
from mirage_kg.store.oxigraph_write import OxigraphWrites
from mirage_kg.threads import in_daemon_thread


class OxigraphLoads(OxigraphWrites):
    """Loading into an embedded store."""

    _interrupted: Interrupt | None = None

    def load(self, data: IO[bytes] | Iterable[str], **options: Any) -> LoadReceipt:
        """``Store.load``, with Ctrl-C made prompt and safe: while the native bulk loader runs, Python cannot
        raise KeyboardInterrupt in the main thread, so SIGINT only sets a flag; the line producer and the stream
        reader stop at the next chunk, the parser is cut off, and the load is rolled back. On disk every load
        (new graph, merge, replace) goes in place under a rollback checkpoint (see ``checkpoints``), so the
        rollback takes milliseconds whatever was loaded, and a merge costs what a fresh load does."""
        with deferred_interrupt() as interrupted:
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

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        self._writable()
        interrupted = self._interrupted
        if interrupted is not None and not isinstance(data, LineReader):
            data = InterruptibleReader(data, interrupted)  # type: ignore[assignment]  # reads as the stream it wraps
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
        is acted on within one chunk of lines (the parser is cut off, see ``pump``)."""
        read_fd, write_fd = os.pipe()

        def produce() -> None:
            try:
                with os.fdopen(write_fd, "wb", buffering=1 << 20) as sink:
                    pump(reader, self._interrupted, sink)
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
