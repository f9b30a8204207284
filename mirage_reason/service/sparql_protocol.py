"""The SPARQL 1.1 Protocol, read-only, at ``/sparql``: what SPARQL tools (SPARQLWrapper, rdflib's ``SPARQLStore``,
YASGUI) speak, over the same store ``serve`` holds open.

A query comes as ``GET /sparql?query=...``, as a form POST (``query=...``) or as a ``application/sparql-query``
POST body. It passes the guard ``mirage-kg query sparql`` uses (``mirage_kg.check_read_only``: a SPARQL parser
must read it as a query), so an update, in any of the protocol's forms (``update=``, ``application/sparql-update``,
or update text sent as a query), is refused with 403 before any store sees it. Results come in the format the
``Accept`` header prefers: SELECT and ASK as SPARQL results JSON, XML, CSV or TSV; CONSTRUCT and DESCRIBE as Turtle,
N-Triples, RDF/XML or JSON-LD (406 when none of those is acceptable). The protocol's dataset parameters
(``default-graph-uri``, ``named-graph-uri``) are refused with 400: name graphs inside the query (``FROM``,
``GRAPH``) instead."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mirage_kg import InputError, QueryError, UpdateRefusedError, check_read_only, sparql_json
from mirage_kg import Term

from mirage_reason.service.guard import error_body

__all__ = ["RESULT_TYPES", "GRAPH_TYPES", "negotiate", "serialize", "sparql_router"]

#: media type -> format, for SELECT and ASK results (the first is the default for ``*/*``)
RESULT_TYPES = {
    "application/sparql-results+json": "json", "application/json": "json",
    "application/sparql-results+xml": "xml", "application/xml": "xml", "text/xml": "xml",
    "text/csv": "csv", "text/tab-separated-values": "tsv",
}
#: media type -> rdflib serializer, for CONSTRUCT and DESCRIBE results
GRAPH_TYPES = {
    "text/turtle": "turtle", "application/n-triples": "nt", "text/plain": "nt",
    "application/rdf+xml": "xml", "application/ld+json": "json-ld", "application/json": "json-ld",
}
_OUT_TYPES = {"json": "application/sparql-results+json", "xml": "application/sparql-results+xml",
              "csv": "text/csv", "tsv": "text/tab-separated-values"}
_FORMAT_PARAM = {"json": "application/sparql-results+json", "xml": "application/sparql-results+xml",
                 "csv": "text/csv", "tsv": "text/tab-separated-values", "turtle": "text/turtle",
                 "n3": "text/turtle", "rdf+xml": "application/rdf+xml", "json-ld": "application/ld+json"}


class NotAcceptable(QueryError):
    """No result format the client accepts fits this query form."""


def negotiate(accept: str, offered: Sequence[str]) -> str | None:
    """The offered media type the ``Accept`` header ranks highest (q-values, then specificity, then the order of
    ``offered``); None when it accepts none of them. An empty header accepts anything."""
    if not accept.strip():
        return offered[0]
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        ranges.append((fields[0].lower(), q))
    best: tuple[float, int, int, str] | None = None
    for order, media in enumerate(offered):
        kind = media.split("/")[0]
        for pattern, q in ranges:
            specificity = 2 if pattern == media else 1 if pattern == f"{kind}/*" else 0 if pattern == "*/*" else -1
            if specificity < 0 or q <= 0:
                continue
            rank = (q, specificity, -order, media)
            if best is None or rank[:3] > best[:3]:
                best = rank
    return best[3] if best else None


def _rdflib_term(term: Term) -> Any:
    from rdflib import BNode, Literal, URIRef

    if term.kind == "uri":
        return URIRef(term.value)
    if term.kind == "bnode":
        return BNode(term.value)
    if term.kind == "literal":
        return Literal(term.value, lang=term.lang or None, datatype=URIRef(term.datatype) if term.datatype and
                       not term.lang else None)
    raise QueryError(f"a result holds a {term.kind} term, which this result format cannot carry; ask for JSON")


def _tsv_term(term: Term) -> str:
    return term.sparql()  # N-Triples syntax, with tabs and newlines escaped, as the TSV results format wants


def serialize(form: str, result: Mapping[str, Any], media: str) -> bytes:
    """One ``Store.query`` result of query form ``form`` in the format of media type ``media``."""
    if form in ("CONSTRUCT", "DESCRIBE"):
        from rdflib import Graph

        graph = Graph()
        for s, p, o in result["triples"]:
            graph.add((_rdflib_term(s), _rdflib_term(p), _rdflib_term(o)))
        return graph.serialize(format=GRAPH_TYPES[media], encoding="utf-8")
    fmt = RESULT_TYPES[media]
    if fmt == "json":
        return json.dumps(sparql_json(result), ensure_ascii=False).encode("utf-8")
    if "boolean" in result:
        answer = bool(result["boolean"])
        if fmt in ("csv", "tsv"):  # the CSV/TSV results formats leave ASK undefined; this is the common reading
            return f"_askResult\r\n{str(answer).lower()}\r\n".encode()
    names: list[str] = [] if "boolean" in result else list(result["vars"])
    rows: Sequence[Mapping[str, Term]] = [] if "boolean" in result else result["rows"]
    if fmt == "csv":  # plain values, as SPARQL 1.1 CSV has them
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([row[n].value if n in row else "" for n in names])
        return out.getvalue().encode("utf-8")
    if fmt == "tsv":
        lines = ["\t".join(f"?{n}" for n in names)]
        lines += ["\t".join(_tsv_term(row[n]) if n in row else "" for n in names) for row in rows]
        return ("\n".join(lines) + "\n").encode("utf-8")
    from rdflib.query import Result
    from rdflib.term import Variable

    xml = Result("ASK" if "boolean" in result else "SELECT")
    if "boolean" in result:
        xml.askAnswer = bool(result["boolean"])
    else:
        xml.vars = [Variable(n) for n in names]
        xml.bindings = [{Variable(k): _rdflib_term(v) for k, v in row.items()} for row in rows]
    out_bytes = io.BytesIO()
    xml.serialize(out_bytes, format="xml", encoding="utf-8")
    return out_bytes.getvalue()


def _choose(form: str, accept: str, format_param: str | None) -> str:
    offered = list(GRAPH_TYPES) if form in ("CONSTRUCT", "DESCRIBE") else list(RESULT_TYPES)
    if format_param and (not accept.strip() or accept.strip() == "*/*"):  # a client that names a format plainly
        accept = _FORMAT_PARAM.get(format_param.lower(), format_param)
    media = negotiate(accept, offered)
    if media is None:
        raise NotAcceptable(f"none of the result formats accepted ({accept[:200]!r}) fits a {form} query; this "
                            f"endpoint gives {', '.join(offered)}")
    return media


def sparql_router(query: Callable[[str, float | None], Awaitable[Mapping[str, Any]]],
                  check: Callable[[str], str] = check_read_only) -> APIRouter:
    """The ``/sparql`` routes. ``check(text)`` is the read-only guard (``check_read_only`` with the server's allowed
    SERVICE endpoints): the query form, or an error; ``query(text, timeout)`` runs a query on the graph thread pool
    under the server's SPARQL time limit (checking it again) and returns ``Store.query``'s dict."""
    router = APIRouter()

    async def answer(request: Request, text: str | None, params: Mapping[str, list[str]]) -> Response:
        if params.get("update"):
            raise UpdateRefusedError("this SPARQL endpoint is read-only: updates are refused")
        for name in ("default-graph-uri", "named-graph-uri", "using-graph-uri", "using-named-graph-uri"):
            if params.get(name):
                raise InputError(f"the protocol parameter {name} is not supported here: name graphs in the query "
                                 "itself (FROM, FROM NAMED, GRAPH)")
        if not text or not text.strip():
            raise InputError("no query: send ?query=... (GET), a form field query=... or an "
                             "application/sparql-query body (POST)")
        timeout = None
        if params.get("timeout"):
            try:
                timeout = float(params["timeout"][0])
            except ValueError:
                raise InputError(f"timeout is not a number: {params['timeout'][0]!r}") from None
        form = check(text)  # the guard of `query sparql`: updates and non-queries stop here
        first = _first(params.get("format") or params.get("output"))
        try:
            media = _choose(form, request.headers.get("accept", ""), first)
        except NotAcceptable as exc:
            return _error(406, "NotAcceptable", str(exc))
        body = serialize(form, await query(text, timeout), media)
        charset = "" if media.endswith("json") else "; charset=utf-8"
        return Response(body, media_type=f"{_OUT_TYPES.get(RESULT_TYPES.get(media, ''), media)}{charset}",
                        headers={"Vary": "Accept"})

    @router.get("/sparql", summary="SPARQL 1.1 Protocol query (read-only; results by Accept)",
                responses={200: {"content": {m: {} for m in {**RESULT_TYPES, **GRAPH_TYPES}}},
                           403: {"description": "an update: refused"}, 406: {"description": "no acceptable format"}})
    async def sparql_get(request: Request) -> Response:
        params = parse_qs(request.url.query, keep_blank_values=True)
        return await answer(request, _first(params.get("query")), params)

    @router.post("/sparql", summary="SPARQL 1.1 Protocol query by POST (form or application/sparql-query)",
                 responses={403: {"description": "an update: refused"}, 406: {"description": "no acceptable format"},
                            415: {"description": "an unknown body type"}})
    async def sparql_post(request: Request) -> Response:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        params = parse_qs(request.url.query, keep_blank_values=True)
        body = (await request.body()).decode("utf-8", errors="replace")
        if kind == "application/sparql-update":
            raise UpdateRefusedError("this SPARQL endpoint is read-only: updates are refused")
        if kind == "application/sparql-query":
            return await answer(request, body, params)
        if kind in ("application/x-www-form-urlencoded", ""):
            form = parse_qs(body, keep_blank_values=True)
            merged = {**params, **form}
            return await answer(request, _first(merged.get("query")), merged)
        return _error(415, "UnsupportedMediaType", f"a SPARQL POST body is application/sparql-query or a form "
                      f"(application/x-www-form-urlencoded), not {kind}")

    return router


def _first(values: list[str] | None) -> str | None:
    """The first value a query string or form gives a parameter, or None."""
    return values[0] if values else None


def _error(status: int, kind: str, message: str) -> Response:
    return Response(json.dumps(error_body(status, kind, message)), status_code=status, media_type="application/json")
