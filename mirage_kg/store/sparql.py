"""Any SPARQL 1.1 endpoint over HTTP (Oxigraph server, QLever, Virtuoso, GraphDB, Fuseki).

The endpoint must expose the union of its named graphs as the default graph (``oxigraph serve
--union-default-graph``; Virtuoso and GraphDB do so by default), since loads go into one named graph per source.
Timeouts and bounded retries with backoff on connection errors, 429 and 5xx; other 4xx are not retried."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import IO

import httpx

from mirage_kg.errors import EndpointError, QueryError
from mirage_kg.store.base import Store, chunked
from mirage_kg.terms import Term, iri_ref

_RETRY_STATUS = {429, 500, 502, 503, 504}


def _term(binding: dict[str, str]) -> Term:
    kind = binding["type"]
    if kind == "typed-literal":
        kind = "literal"
    return Term(kind, binding["value"], binding.get("xml:lang"), binding.get("datatype"))  # type: ignore[arg-type]


class SparqlStore(Store):
    """A remote SPARQL 1.1 query + update endpoint."""

    def __init__(
        self,
        query_endpoint: str,
        update_endpoint: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.2,
        auth: tuple[str, str] | None = None,
        chunk_triples: int = 20_000,
    ) -> None:
        self.query_endpoint = query_endpoint.rstrip("/")
        self.update_endpoint = update_endpoint or _guess_update(self.query_endpoint)
        self.location = self.query_endpoint
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.chunk_triples = chunk_triples
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), auth=auth)

    # --- HTTP ----------------------------------------------------------------------------------------------
    def _post(self, url: str, *, data: dict[str, str] | None = None, content: bytes | None = None,
              headers: dict[str, str], timeout: float | None = None) -> httpx.Response:
        """POST with bounded retries. ``timeout`` bounds the whole exchange, not each socket read: an endpoint
        that keeps streaming rows past it is cut off (httpx's own timeouts are per read)."""
        limit = timeout if timeout is not None else self.timeout
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                response = self._exchange(url, data, content, headers, limit)
            except httpx.TimeoutException as exc:
                raise EndpointError(f"no answer within {limit} s", url, retryable=True) from exc
            except httpx.TransportError as exc:
                last = exc
            else:
                if response.status_code < 400:
                    return response
                body = response.text.strip().splitlines()
                detail = body[0][:300] if body else response.reason_phrase
                if response.status_code == 400:
                    raise QueryError(f"{url} rejected the request: {detail}")
                if response.status_code not in _RETRY_STATUS:
                    raise EndpointError(f"HTTP {response.status_code}: {detail}", url, retryable=False)
                last = EndpointError(f"HTTP {response.status_code}: {detail}", url, retryable=True)
            if attempt < self.max_retries:
                time.sleep(self.backoff * (2**attempt))
        if isinstance(last, EndpointError):
            raise last
        raise EndpointError(f"cannot connect ({last}); is the server running?", url, retryable=True) from last

    def _exchange(self, url: str, data: dict[str, str] | None, content: bytes | None, headers: dict[str, str],
                  limit: float) -> httpx.Response:
        """One request, its body read as a stream against a wall-clock deadline."""
        deadline = time.monotonic() + limit
        request = self._client.build_request("POST", url, data=data, content=content, headers=headers,
                                             timeout=httpx.Timeout(limit, connect=min(limit, 10.0)))
        streamed = self._client.send(request, stream=True)
        chunks: list[bytes] = []
        try:
            for chunk in streamed.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise QueryError(f"{url}: the answer was still coming after the timeout of {limit} s; "
                                     "narrow the query or raise --timeout")
        finally:
            streamed.close()
        kept = {k: v for k, v in streamed.headers.items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")}
        return httpx.Response(streamed.status_code, headers=kept, content=b"".join(chunks), request=request)

    def _query(self, query: str, accept: str, timeout: float | None) -> httpx.Response:
        return self._post(
            self.query_endpoint,
            data={"query": query},
            headers={"Accept": accept},
            timeout=timeout,
        )

    # --- reading -------------------------------------------------------------------------------------------
    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Term]]:
        payload = self._query(query, "application/sparql-results+json", timeout).json()
        if "results" not in payload:
            raise QueryError("expected a SELECT query")
        return [{k: _term(v) for k, v in b.items()} for b in payload["results"]["bindings"]]

    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        payload = self._query(query, "application/sparql-results+json", timeout).json()
        if "boolean" not in payload:
            raise QueryError("expected an ASK query")
        return bool(payload["boolean"])

    def construct(self, query: str, *, timeout: float | None = None) -> list[tuple[Term, Term, Term]]:
        import pyoxigraph as ox

        from mirage_kg.store.oxigraph import to_term

        body = self._query(query, "application/n-triples", timeout).content
        return [
            (to_term(t.subject), to_term(t.predicate), to_term(t.object))
            for t in ox.parse(body, format=ox.RdfFormat.N_TRIPLES)
        ]

    def graphs(self) -> list[str]:
        rows = self.select("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
        return sorted(r["g"].value for r in rows if r["g"].kind == "uri")

    # --- writing -------------------------------------------------------------------------------------------
    def update(self, update: str) -> None:
        self._post(self.update_endpoint, data={"update": update}, headers={})

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        import pyoxigraph as ox

        from mirage_kg.store.oxigraph import _FORMATS

        # Parse locally (streaming) and send INSERT DATA chunks: every SPARQL 1.1 endpoint accepts them.
        quads = ox.parse(data, format=_FORMATS[media_type], base_iri=base_iri)
        lines: Iterator[str] = (f"{q.subject} {q.predicate} {q.object} .\n" for q in quads)
        for batch in chunked(lines, self.chunk_triples):
            self.update(f"INSERT DATA {{ GRAPH {iri_ref(graph)} {{\n{''.join(batch)}}} }}")

    def export(self, out: IO[bytes], media_type: str) -> None:
        if media_type == "application/n-quads":
            response = self._post(self.query_endpoint, data={"query": "SELECT ?s ?p ?o ?g WHERE { GRAPH ?g { ?s ?p ?o } }"},
                                  headers={"Accept": "application/sparql-results+json"})
            for b in response.json()["results"]["bindings"]:
                s, p, o, g = (_term(b[k]) for k in ("s", "p", "o", "g"))
                out.write(f"{s.sparql()} {p.sparql()} {o.sparql()} {g.sparql()} .\n".encode())
            return
        response = self._query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", media_type, None)
        out.write(response.content)

    def close(self) -> None:
        self._client.close()


def _guess_update(query_endpoint: str) -> str:
    """Oxigraph and Fuseki serve updates beside queries at ``.../update``."""
    if query_endpoint.endswith("/query"):
        return query_endpoint[: -len("/query")] + "/update"
    return query_endpoint
