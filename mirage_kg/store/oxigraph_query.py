"""The embedded store's query path: SPARQL (bounded by a timeout, rows streamed or as TSV), the pattern primitive
read from the quad index, and exports; ``raw``, the native store or a writer's ``WritesCounted`` view of it.
``OxigraphStore`` builds on it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait
from typing import IO, Any, TypeVar

import pyoxigraph as ox

from mirage_kg.errors import QueryError, StoreError
from mirage_kg.model.terms import Term
from mirage_kg.store.base import LineBlocks, Quad, Store
from mirage_kg.store.oxigraph_terms import OXIGRAPH_FORMATS, QUAD_FORMATS, to_node, to_term
from mirage_kg.threads import in_daemon_thread

T = TypeVar("T")

#: the native store's methods that write (``WritesCounted`` counts them)
_WRITE_METHODS = frozenset({"add", "remove", "update", "extend", "bulk_extend", "load", "bulk_load", "clear",
                            "clear_graph", "remove_graph", "add_graph"})


class WritesCounted:
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


class OxigraphQueries(Store):
    """Reading an embedded store: ``raw`` is the native pyoxigraph store (or a writer's counting wrapper of it)."""

    raw: ox.Store | WritesCounted

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

        def guarded(cancelled: threading.Event) -> T:
            try:
                return work(cancelled)
            except OSError as exc:  # raised while rows are read: a storage error, or an allowed SERVICE failing
                raise StoreError(f"store {self.location}: the query failed: "
                                 f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}") from exc

        if not timeout:
            return guarded(cancelled)
        future = in_daemon_thread(guarded, cancelled, name="mirage-kg-query")
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
        result.serialize(sink, ox.QueryResultsFormat.TSV)  # type: ignore[arg-type]  # the serializer calls only write()
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
        for quad in self.raw.quads_for_pattern(nodes[0], nodes[1], nodes[2], where):  # type: ignore[arg-type]  # a literal matches no subject
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
