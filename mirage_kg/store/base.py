"""The ``Store`` contract every backend implements, and the atomic-load protocol they share.

The contract's primitive is ``quads(subject, predicate, object, graph)``: a streamed, paged pattern match over the
named graphs. The embedded store answers it from its index; an endpoint with paged SPARQL. SPARQL select / ask /
construct / update sit beside it. The graph layer, linking and validation use only this contract, and pick an
access pattern from ``indexed`` (pattern lookups are cheap: walk the index) rather than from a store's class.

A load is atomic through a journal in the manifest graph: the target graph is marked pending, streamed in, then
marked committed in one update. A load into a graph that already holds triples is staged in a scratch graph and
merged with one transactional ``ADD`` (the embedded store on disk loads in place instead, guarded by a rollback
checkpoint). Opening a store drops whatever a killed load left pending, so a reader never sees half a load."""

from __future__ import annotations

import abc
import contextlib
import datetime as _dt
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple, TypedDict

from mirage_kg.errors import QueryError
from mirage_kg.model.namespaces import GRAPH, MKG
from mirage_kg.store.content_key import ContentKey
from mirage_kg.store.sparql_text import query_form
from mirage_kg.model.terms import Term, iri_ref, literal

MANIFEST_GRAPH = GRAPH + "manifest"
PENDING = MKG + "pendingLoad"
LOADED_FROM = MKG + "loadedFrom"
LOADED_AT = MKG + "loadedAt"

# Short format names users type -> (media type, file extensions)
RDF_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "nt": ("application/n-triples", (".nt",)),
    "nq": ("application/n-quads", (".nq",)),
    "ttl": ("text/turtle", (".ttl",)),
    "trig": ("application/trig", (".trig",)),
    "rdfxml": ("application/rdf+xml", (".rdf", ".owl", ".xml")),
    "jsonld": ("application/ld+json", (".jsonld",)),
}

Progress = Callable[[int], None]


class Quad(NamedTuple):
    """One quad of a named graph, as plain terms. A named tuple, not a dataclass: a scan makes millions."""

    subject: Term
    predicate: Term
    object: Term
    graph: str


class QueryResult(TypedDict, total=False):
    """What ``Store.query`` gives: ``vars`` and ``rows`` (SELECT), ``boolean`` (ASK) or ``triples`` (CONSTRUCT and
    DESCRIBE)."""

    vars: list[str]
    rows: list[dict[str, Term]]
    boolean: bool
    triples: list[tuple[Term, Term, Term]]


#: rows per page when a store pages a pattern or a large SELECT (an endpoint may lower it to its result cap)
PAGE_SIZE = 10_000


@dataclass(frozen=True)
class LoadReceipt:
    """What a load did: the graph it filled and how many triples the graph gained."""

    graph: str
    source: str
    added: int


class LineReader:
    """A binary file-like view of an iterator of text lines (or of strings of many lines), so a native parser can
    stream it.

    Exceptions raised by the iterator (a loader's ``InputError``) are re-raised by ``read`` and kept in ``error``
    so the caller can surface the original error even if the native parser wraps it."""

    def __init__(self, lines: Iterable[str], progress: Progress | None = None, chunk_lines: int = 4096) -> None:
        self._lines = iter(lines)
        self._buffer = b""
        self._done = False
        self._progress = progress
        self._chunk = chunk_lines
        self.error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        parts = [self._buffer]
        size = len(self._buffer)
        while size < want and not self._done:
            batch = []
            held = 0  # characters in the batch: an item may be one line or a loader's block of many
            try:
                for _ in range(self._chunk):
                    item = next(self._lines)
                    batch.append(item)
                    held += len(item)
                    if held >= want:
                        break
            except StopIteration:
                self._done = True
            except BaseException as exc:  # keep the loader's own error for the caller
                self.error = exc
                self._done = True
                raise
            if batch:
                data = "".join(batch).encode("utf-8")
                parts.append(data)
                size += len(data)
                if self._progress:
                    self._progress(len(batch))
        self._buffer = b"".join(parts)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            self._fill(1 << 62)
            out, self._buffer = self._buffer, b""
            return out
        if len(self._buffer) < size:
            self._fill(size)
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def readinto(self, b: bytearray | memoryview) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class Store(abc.ABC):
    """An RDF dataset MIRAGE-KG reads and writes. Queries see the union of all named graphs."""

    #: where the store lives, for messages ("memory", a folder, an endpoint URL without credentials)
    location: str
    #: the folder of an on-disk store (caches may live beside it); None for memory and endpoints
    path: Path | None = None
    #: whether ``quads`` is a cheap local index lookup (walk it node by node) or a round trip (batch in SPARQL)
    indexed: bool = False
    #: whether every load goes through a staging graph, moved into place on commit (an endpoint: other readers
    #: and a killed load never show a half-filled graph); the embedded store fills a new graph in place
    stages_every_load: bool = False
    #: whether an update interrupted by Ctrl-C is known to have committed or not once ``update`` returns or raises
    #: (the embedded store's ``update_atomically``); False: an endpoint may have committed a request it was sent
    knows_commit_on_interrupt: bool = False
    #: where a long load says how far it got, a line now and then (an endpoint's INSERT chunks); None: quiet
    report: Callable[[str], None] | None = None
    #: whether this handle refuses every write (a reader opened beside a writer, or by ``open_store`` for the
    #: query commands): no cache is written beside such a store's files, and a write raises ``StoreError``
    read_only: bool = False

    @property
    def nested_optional_paths(self) -> bool:
        """Whether the engine evaluates nested optional property paths (``S/(S/(S)?)?``) right."""
        return True

    # --- the pattern primitive -----------------------------------------------------------------------------
    def quads(self, subject: str | Term | None = None, predicate: str | None = None, obj: str | Term | None = None,
              graph: str | None = None) -> Iterator[Quad]:
        """Quads of the named graphs matching a pattern (None is a wildcard; a plain string is an IRI),
        streamed page by page. This default pages one SELECT with LIMIT/OFFSET; a store with an index
        overrides it."""
        terms = [_pattern_term(subject), _pattern_term(predicate), _pattern_term(obj)]
        names = ("s", "p", "o")
        pattern = " ".join(t if t else f"?{n}" for t, n in zip(terms, names))
        binds = "".join(f" BIND({t} AS ?{n})" for t, n in zip(terms, names) if t)
        if graph and all(terms):  # Virtuoso 7 matches ``GRAPH <g> { three constants }`` in any graph: ?g, filtered
            where = f"GRAPH ?g {{ {pattern} }} FILTER(?g = {iri_ref(graph)})"
        elif graph:
            where = f"GRAPH {iri_ref(graph)} {{ {pattern} }} BIND({iri_ref(graph)} AS ?g)"
        else:
            where = f"GRAPH ?g {{ {pattern} }}"
        for row in self.select_all(f"SELECT ?s ?p ?o ?g WHERE {{ {where}{binds} }}"):
            yield Quad(row["s"], row["p"], row["o"], row["g"].value)

    #: a number that changes whenever this store object writes (None: unknown, other writers may change it):
    #: the graph layer re-reads the manifest only when it moved
    version: int | None = None

    def content_key(self) -> ContentKey:
        """A key naming the store's content that reads none of it, for the caches built from the store (the
        degree index, the label index, embeddings); ``ContentKey(None)`` when the store has none, and
        ``caching.store_fingerprint`` counts the store instead. An endpoint has none: any client may write to it."""
        return ContentKey(None)

    def links(self, node: str, direction: str, predicate: str | None = None) -> Iterator[tuple[str, str]]:
        """(predicate, the other end) of each quad at ``node`` whose other end is an IRI: ``direction``
        "forward" reads ``node ?p ?x``, "backward" ``?x ?p node``; a quad per named graph (callers dedupe). The
        graph searches' adjacency primitive: a store with an index answers it without a ``Quad`` per edge."""
        if direction == "forward":
            for quad in self.quads(node, predicate, None):
                if quad.object.kind == "uri":
                    yield quad.predicate.value, quad.object.value
        else:
            for quad in self.quads(None, predicate, node):
                if quad.subject.kind == "uri":
                    yield quad.predicate.value, quad.subject.value

    def literals(self, subject: str, predicate: str) -> Iterator[tuple[str, str | None]]:
        """(value, language tag or None) of each literal ``subject predicate ?o`` in the named graphs: what
        labels are read with, one index lookup per node on an indexed store, with no ``Quad`` per value."""
        for quad in self.quads(subject, predicate, None):
            if quad.object.kind == "literal":
                yield quad.object.value, quad.object.lang

    def predicates_between(self, subject: str, obj: str) -> Iterator[str]:
        """The predicates of the quads ``subject ?p obj``: a membership check with both ends bound (one index
        lookup on an indexed store), which the path search uses instead of reading a hub's edges."""
        for quad in self.quads(subject, None, obj):
            yield quad.predicate.value

    def triple_lines(self, graph: str, subject: str | None = None, predicate: str | None = None,
                     obj: str | None = None) -> Iterator[str]:
        """The triples of ``graph`` matching IRIs (None: any) as N-Triples lines without the newline, streamed. A
        store with an index writes them from it with no ``Term`` per value (a release update reads the triples of
        thousands of subjects); this default formats the pattern primitive's quads."""
        if not _valid_iris(graph, subject, predicate, obj):
            return  # no quad holds an invalid IRI
        for quad in self.quads(subject, predicate, obj, graph):
            yield f"{quad.subject.sparql()} {quad.predicate.sparql()} {quad.object.sparql()} ."

    def holds(self, subject: str, predicate: str, obj: str, graph: str) -> bool:
        """Whether ``graph`` holds the triple of three IRIs (an invalid IRI: False). An indexed store answers with
        one point lookup, no iterator (a release update asks tens of thousands); this default asks the pattern
        primitive for a first match."""
        if not _valid_iris(subject, predicate, obj, graph):
            return False
        return next(iter(self.quads(subject, predicate, obj, graph)), None) is not None

    def select_all(self, query: str, *, timeout: float | None = None) -> Iterator[dict[str, Term]]:
        """Every row of a SELECT that may be large (no LIMIT/OFFSET of its own), streamed. A store with a
        result-size cap pages under it; the embedded store has none."""
        yield from self.select(query, timeout=timeout)

    def iri_rows(self, query: str, variables: Sequence[str]) -> Iterator[tuple[str | None, ...]]:
        """The rows of a SELECT whose values are IRIs, as tuples of strings in the order of ``variables`` (None
        for an unbound value or one that is not an IRI), streamed: the whole-graph passes of validation and the
        degree index read millions of rows, which a list of dicts of ``Term`` would hold in memory at once."""
        for row in self.select_all(query):
            yield tuple(term.value if (term := row.get(name)) is not None and term.kind == "uri" else None
                        for name in variables)

    def tsv_blocks(self, query: str, variables: Sequence[str], consume: Callable[[bytes], None],
                   block: int | None = None) -> None:
        """The rows of a SELECT as SPARQL 1.1 TSV (UTF-8, no header line; an IRI ``<...>``, a blank node
        ``_:id``, a literal quoted with ``\\t \\n \\r \\" \\\\`` escaped), handed to ``consume`` in blocks of whole
        lines, ``variables`` in that order: the whole-store passes that build the query indexes read tens of
        millions of rows, and the embedded store writes them natively, with no Python object per row. ``block``:
        about how many bytes a block holds (``TSV_BLOCK`` by default). This default formats ``select_all``'s rows."""
        sink = LineBlocks(consume, header=False, block=block)
        lines: list[str] = []
        for row in self.select_all(query):
            lines.append("\t".join(_tsv_term(row.get(name)) for name in variables) + "\n")
            if len(lines) >= 10_000:
                sink.write("".join(lines).encode("utf-8"))
                lines.clear()
        sink.write("".join(lines).encode("utf-8"))
        sink.close()

    # --- reading -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Term]]:
        """Rows of a SELECT query; unbound variables are absent from a row."""

    @abc.abstractmethod
    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        """The answer of an ASK query."""

    @abc.abstractmethod
    def construct(self, query: str, *, timeout: float | None = None) -> list[tuple[Term, Term, Term]]:
        """Triples of a CONSTRUCT or DESCRIBE query."""

    def query(self, query: str, *, timeout: float | None = None) -> QueryResult:
        """Any read-only query, as a SPARQL-JSON-like dict: ``{"vars", "rows"}``, ``{"boolean"}`` or ``{"triples"}``."""
        kind = query_form(query)
        if kind == "ASK":
            return {"boolean": self.ask(query, timeout=timeout)}
        if kind in ("CONSTRUCT", "DESCRIBE"):
            return {"triples": self.construct(query, timeout=timeout)}
        rows = self.select(query, timeout=timeout)
        names = projected_variables(query)
        if names is None:  # an engine's own syntax, which rdflib does not read: the rows' variables
            names = []
            for row in rows:
                names.extend(k for k in row if k not in names)
        return {"vars": names, "rows": rows}

    @abc.abstractmethod
    def graphs(self) -> list[str]:
        """Names of the named graphs."""

    def triple_count(self, graph: str | None = None) -> int:
        where = f"GRAPH {iri_ref(graph)} {{ ?s ?p ?o }}" if graph else "GRAPH ?g { ?s ?p ?o }"
        rows = self.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}")
        return int(rows[0]["n"].value) if rows else 0

    def triples(
        self, subject: str | None = None, predicate: str | None = None, obj: Term | None = None
    ) -> list[tuple[Term, Term, Term]]:
        """Distinct triples (over all graphs) matching a pattern; None is a wildcard."""
        return list(dict.fromkeys((q.subject, q.predicate, q.object) for q in self.quads(subject, predicate, obj)))

    # --- writing -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def update(self, update: str) -> None:
        """Run a SPARQL update as one transaction."""

    @abc.abstractmethod
    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        """Stream ``data`` into ``graph`` as fast as the backend allows; atomicity is handled by ``load``."""

    def export(self, out: IO[bytes], media_type: str) -> None:
        """Write the whole dataset (or its union, for a triple format) to ``out``."""
        raise NotImplementedError

    def export_graph(self, out: IO[bytes], graph: str) -> None:
        """Write one named graph to ``out`` as N-Triples (release diffs read a graph this way)."""
        for quad in self.quads(graph=graph):
            out.write(f"{quad.subject.sparql()} {quad.predicate.sparql()} {quad.object.sparql()} .\n"
                      .encode("utf-8"))

    def close(self) -> None:
        """Release the store."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- atomic loading ------------------------------------------------------------------------------------
    def load(
        self,
        data: IO[bytes] | Iterable[str],
        *,
        media_type: str,
        graph: str,
        source: str = "",
        base_iri: str | None = None,
        progress: Progress | None = None,
    ) -> LoadReceipt:
        """Load RDF (a binary stream, or N-Triples lines) into ``graph``, all or nothing.

        Triples in a quad format keep their own graph names only when ``graph`` is empty; N-Triples lines
        and triple formats always go to ``graph``."""
        before = self.triple_count(graph)
        replace = before > 0 and graph in self._replacing
        staged = self._stages(before)
        target = f"{graph}/staging/{uuid.uuid4().hex}" if staged else graph
        token = self._load_token()
        self.update(
            f"INSERT DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(PENDING)} {literal(token)} }} }}"
        )
        reader: LineReader | None = None
        stream: IO[bytes] | Iterable[str] | LineReader
        try:
            if replace and not staged:
                self._empty_graph(graph)
            if isinstance(data, (bytes, bytearray)) or hasattr(data, "read"):
                stream = data
            else:
                reader = LineReader(data, progress)
                stream = reader
            self._bulk_load(stream, media_type, target, base_iri)  # type: ignore[arg-type]  # a stream or LineReader: parsers call read()
        except BaseException as exc:
            self._discard(target, token)
            if reader is not None and reader.error is not None and reader.error is not exc:
                raise reader.error from None
            raise
        now = _dt.datetime.now(_dt.timezone.utc).isoformat()
        record = (
            f"INSERT DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(graph)} {iri_ref(LOADED_FROM)} {literal(source)} ; "
            f"{iri_ref(LOADED_AT)} {literal(now, datatype='http://www.w3.org/2001/XMLSchema#dateTime')} }} }}"
        )
        unmark = self._unmark(target, token)
        if replace:
            record = f"{forget_record(graph)} ;\n{record}"
        if self._recording is not None:
            record = f"{record} ;\n{self._recording(graph)}"
        if target == graph:
            self._commit(target, token, lambda: self.update(f"{unmark} ;\n{record}"))
        else:
            mode = "replace" if replace else "merge" if before else "new"
            self._commit(target, token, lambda: self._commit_staged(target, graph, unmark, record, mode))
        return LoadReceipt(graph=graph, source=source, added=self.triple_count(graph) - before)

    #: graphs whose next load replaces their content instead of adding to it (see ``replacing``)
    _replacing: frozenset[str] = frozenset()
    #: what loads commit beside their manifest record (see ``recording``)
    _recording: Callable[[str], str] | None = None

    @contextlib.contextmanager
    def recording(self, record: Callable[[str], str]) -> Iterator[None]:
        """Loads inside the block commit ``record(graph)`` (SPARQL update operations: the release record) in the
        same update as their data and manifest record, so a loaded graph never lacks it."""
        held = self._recording
        self._recording = record
        try:
            yield
        finally:
            self._recording = held

    @contextlib.contextmanager
    def replacing(self, *graphs: str) -> Iterator[None]:
        """Loads of these graphs inside the block replace what they hold, in one step: the new content is loaded
        aside and swapped in only when whole, so a failed or killed reload keeps the old one."""
        held = self._replacing
        self._replacing = held | frozenset(graphs)
        try:
            yield
        finally:
            self._replacing = held

    def _stages(self, before: int) -> bool:
        """Whether a load into a graph holding ``before`` triples goes to a staging graph first. A store that can
        undo a load in place by other means (the embedded store's checkpoints) loads every graph in place."""
        return before > 0 or self.stages_every_load

    def _empty_graph(self, graph: str) -> None:
        """Remove every triple of ``graph`` (a replace loaded in place; the store undoes it if the load fails)."""
        self.update(f"CLEAR SILENT GRAPH {iri_ref(graph)}")

    def _commit_staged(self, staging: str, graph: str, unmark: str, record: str, mode: str) -> None:
        """Bring a whole staged load into ``graph`` (``mode``: new, merge or replace) with its manifest record, in
        one update. A store whose transactions are held in memory overrides this with a streaming swap."""
        if mode in ("new", "replace"):  # one MOVE (it empties the target first): the graph appears whole
            self.update(f"MOVE {iri_ref(staging)} TO {iri_ref(graph)} ;\n{unmark} ;\n{record}")
        else:
            self.update(f"ADD {iri_ref(staging)} TO {iri_ref(graph)} ;\nDROP SILENT GRAPH {iri_ref(staging)} ;\n"
                        f"{unmark} ;\n{record}")

    def _load_token(self) -> str:
        """The pending mark of a new load (``recover`` drops the loads it finds marked)."""
        return uuid.uuid4().hex

    def _unmark(self, target: str, token: str) -> str:
        """The update that removes a load's pending mark (at its commit, or when it is discarded)."""
        return f"DELETE DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(PENDING)} {literal(token)} }} }}"

    def _commit(self, target: str, token: str, commit: Callable[[], None]) -> None:
        """Run a load's commit (one update); a store whose client can lose the answer to it checks what the
        server did."""
        commit()

    def _discard(self, target: str, token: str) -> None:
        self.update(f"DROP SILENT GRAPH {iri_ref(target)} ;\n{self._unmark(target, token)}")

    def recover(self) -> list[str]:
        """Drop the graphs of loads that were killed midway; returns their names."""
        rows = self.select(
            f"SELECT ?g ?t WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ ?g {iri_ref(PENDING)} ?t }} }}"
        )
        for row in rows:
            self._discard(row["g"].value, row["t"].value)
        return [row["g"].value for row in rows]

    def loaded_graphs(self) -> dict[str, str]:
        """Committed loads: graph -> source."""
        rows = self.select(
            f"SELECT ?g ?src WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ ?g {iri_ref(LOADED_FROM)} ?src }} }}"
        )
        return {r["g"].value: r["src"].value for r in rows}


def projected_variables(query: str) -> list[str] | None:
    """The variables a SELECT projects, in order, whether or not any row binds them (``SELECT *``: those in
    scope, sorted, as the embedded store gives them), read from the query alone by rdflib's parser (nothing is
    evaluated, so a SERVICE sends nothing). None when rdflib does not read it as a SELECT."""
    try:
        from rdflib.plugins.sparql.algebra import translateQuery
        from rdflib.plugins.sparql.parser import parseQuery

        parsed = parseQuery(query)
        algebra = translateQuery(parsed).algebra
    except Exception:  # pyparsing's and rdflib's own errors: an engine's own syntax
        return None
    if algebra.name != "SelectQuery":
        return None
    names = [str(v) for v in algebra.get("PV") or []]
    return names if "projection" in parsed[1].keys() else sorted(names)  # no projection: SELECT *


def forget_record(graph: str) -> str:
    """The update that removes a graph's load record (source and time) from the manifest."""
    return (f"DELETE WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(graph)} {iri_ref(LOADED_FROM)} ?source ; "
            f"{iri_ref(LOADED_AT)} ?at }} }}")


def _valid_iris(*iris: str | None) -> bool:
    """Whether every IRI given (None: a wildcard) can be written in a query."""
    try:
        for iri in iris:
            if iri is not None:
                iri_ref(iri)
    except QueryError:
        return False
    return True


def _pattern_term(term: str | Term | None) -> str | None:
    if term is None:
        return None
    return term.sparql() if isinstance(term, Term) else iri_ref(term)


#: bytes per block ``tsv_blocks`` hands on: a few hundred thousand rows, split and numbered at once
TSV_BLOCK = 8 << 20


class LineBlocks:
    """A binary ``write`` target that hands ``consume`` what it is given in blocks of whole lines of about
    ``block`` bytes (the last one on ``close``), the first line dropped when ``header``: how a serialiser's
    output is read while it is written, without holding all of it."""

    def __init__(self, consume: Callable[[bytes], None], header: bool = True, block: int | None = None) -> None:
        self._consume, self._header, self._block = consume, header, block or TSV_BLOCK
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        self._size += len(data)
        if self._size >= self._block:
            self._hand_on(final=False)
        return len(data)

    def flush(self) -> None:  # the serialiser flushes its own buffer into ``write``; blocks wait for size
        pass

    def close(self) -> None:
        self._hand_on(final=True)

    def _hand_on(self, final: bool) -> None:
        whole = b"".join(self._parts)
        cut = len(whole) if final else whole.rfind(b"\n") + 1
        self._parts = [whole[cut:]] if cut < len(whole) else []
        self._size = len(whole) - cut
        block = whole[:cut]
        if self._header and block:
            self._header = False
            block = block[block.find(b"\n") + 1:] if b"\n" in block else b""
        if block:
            self._consume(block)


def _tsv_term(term: Term | None) -> str:
    """A value as SPARQL 1.1 TSV writes it (``Store.tsv_blocks``); empty when unbound."""
    if term is None:
        return ""
    if term.kind == "uri":
        return f"<{term.value}>"
    if term.kind == "bnode":
        return f"_:{term.value}"
    text = term.value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace(
        "\r", "\\r").replace('"', '\\"')
    if term.lang:
        return f'"{text}"@{term.lang}'
    return f'"{text}"^^<{term.datatype}>' if term.datatype else f'"{text}"'
