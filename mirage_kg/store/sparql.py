"""Any SPARQL 1.1 endpoint over HTTP (Oxigraph server, Virtuoso, QLever, GraphDB, Fuseki), profiled on use.

What differs between engines is detected, not assumed:
- **the dataset**: every query names the graphs the manifest records (``default-graph-uri`` and
  ``named-graph-uri``), so an engine's own graphs (Virtuoso's system triples) never leak in, a graph being loaded
  stays invisible until its load commits, and an endpoint whose default graph is not the union of its named graphs
  (``oxigraph serve`` without ``--union-default-graph``) answers the same as one whose default graph is;
- **the result-size cap** (Virtuoso's ``ResultSetMaxRows``, 10,000 by default): probed once, large reads (and ``query``'s
  SELECTs without ORDER BY) are paged under it, and an answer that reaches it is reported as truncated, never used
  as if whole, with advice that works on the engine (Virtuoso sorts at most MaxSortedTopRows rows under
  LIMIT/OFFSET, and walks a ``+`` path within a fixed memory pool);
- **the insert size** it accepts: INSERT DATA chunks halve on Virtuoso's SP030/SP031 "memory exhausted" (or set
  ``chunk_triples``);
- **nested optional property paths**: the bridge ASK becomes a UNION of fixed-length sequences where they fail.
A new graph loads in place, in INSERT DATA chunks, and commits with its manifest record (a few triples): queries
name only the graphs the manifest records, so it stays invisible until then, and no commit moves millions of
triples. A load into a graph that holds triples goes into a staging graph moved into place in one update. A load's
pending mark names its process (host, pid) and carries a heartbeat; a writer's ``recover`` (run by ``open_store``
for ``load`` and ``build-default``, never for a read) drops only the loads whose process is gone or whose heartbeat
stopped, and a commit whose answer was lost is confirmed from the manifest. HTTP basic or bearer auth comes from the arguments, the URL or the environment and is never
echoed: messages name the endpoint without credentials. Answers are capped in size, ``Retry-After`` is honoured,
and an HTML page, a non-JSON body or a cut-off answer is one clear error."""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from mirage_kg.errors import EndpointError, QueryError, StoreError
from mirage_kg.model.namespaces import XSD
from mirage_kg.model.namespaces import MKG
from mirage_kg.store.base import (LOADED_FROM, MANIFEST_GRAPH, PAGE_SIZE, PENDING, QueryResult, Store,
                                  projected_variables)
from mirage_kg.store.sparql_text import query_form
from mirage_kg.model.terms import Term, TermKind, iri_ref, literal

_RETRY_STATUS = {429, 500, 502, 503, 504}
ENV_USER = "MIRAGE_KG_ENDPOINT_USER"
ENV_PASSWORD = "MIRAGE_KG_ENDPOINT_PASSWORD"
ENV_TOKEN = "MIRAGE_KG_ENDPOINT_TOKEN"
ENV_MAX_RESPONSE_MB = "MIRAGE_KG_MAX_RESPONSE_MB"
ENV_TIMEOUT = "MIRAGE_KG_ENDPOINT_TIMEOUT"
DEFAULT_CHUNK_TRIPLES = 10_000
DEFAULT_MAX_RESPONSE_MB = 512
_PROBE_ROWS = PAGE_SIZE + 1  # the cap probe asks one row more than a page: a cap below it shows
_DATASET_RECHECK_S = 2.0  # how often the manifest's graph list is re-read (another process may load)
_MAX_RETRY_AFTER_S = 30.0
_TOO_BIG = re.compile(r"SP03[01]|memory exhausted|too large|too big|request entity", re.IGNORECASE)
_NO_UPDATE = re.compile(r"SR186|permission|not allowed|read.?only|forbidden", re.IGNORECASE)
#: a running load's heartbeat in the manifest (``<graph> mkg:loadAlive "time"``), refreshed every ``_HEARTBEAT_S``
LOAD_ALIVE = MKG + "loadAlive"
_HEARTBEAT_S = 30.0
#: a load whose heartbeat is older than this is abandoned whatever its process (another host cannot tell)
STALE_LOAD_S = 1800.0
_PROGRESS_S = 30.0  # how often a long endpoint load says how far it got
_ORDER_BY = re.compile(r"(?is)\bORDER\s+BY\b")
_SORT_LIMIT = re.compile(r"SR35[03]|Sorted TOP|TOP clause", re.IGNORECASE)
_TRANSITIVE_LIMIT = re.compile(r"transitive (temp )?memory|transitive start not given", re.IGNORECASE)
SORTED_PAGING = ("page a sorted query by its sort key instead (ORDER BY ?key ... FILTER(?key > the last page's last "
                 "value) LIMIT 10000), leave ORDER BY out (`query sparql` then pages past the cap itself), or raise "
                 "MaxSortedTopRows ([Parameters]) and ResultSetMaxRows ([SPARQL]) in virtuoso.ini")
_HAS_LIMIT = re.compile(r"(?is)\b(LIMIT|OFFSET)\s+\d+\s*(\b(LIMIT|OFFSET)\s+\d+\s*)?$")


@dataclass(frozen=True)
class EndpointProfile:
    """What an endpoint was found to do. ``result_cap``: the most rows one answer holds (None: no cap up to the
    probe's size). ``union_default_graph``: None when there was no data to tell."""

    union_default_graph: bool | None
    result_cap: int | None
    nested_optional_paths: bool
    chunk_triples: int


def public_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _url_credentials(url: str) -> tuple[str, str] | None:
    parts = urlsplit(url)
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


#: a SPARQL JSON binding's ``type`` -> the term's kind ("typed-literal": the SPARQL XML-era name some servers use)
_TERM_KINDS: dict[str | None, TermKind] = {"uri": "uri", "literal": "literal", "typed-literal": "literal",
                                           "bnode": "bnode", "triple": "triple"}


def _term(binding: Any, where: str) -> Term | None:
    """A SPARQL JSON binding as a ``Term``; None for an unbound one (some servers write ``null``)."""
    if binding is None:
        return None
    if not isinstance(binding, dict) or "value" not in binding:
        raise EndpointError(f"a result binding is not a SPARQL JSON term: {str(binding)[:120]}", where)
    kind = binding.get("type")
    if kind is None:  # rdflib-endpoint and a few others leave it out for literals
        kind = "literal" if ("xml:lang" in binding or "datatype" in binding) else None
        if kind is None:
            raise EndpointError(f"a result binding has no 'type': {str(binding)[:120]}; the endpoint's SPARQL JSON "
                                "is not standard", where)
    term_kind = _TERM_KINDS.get(kind)
    if term_kind is None:
        raise EndpointError(f"a result binding has an unknown type {kind!r}", where)
    lang = binding.get("xml:lang") or None
    datatype = binding.get("datatype") or None
    if lang or datatype == XSD + "string":
        datatype = None
    return Term(term_kind, str(binding["value"]), lang, datatype)


class SparqlStore(Store):
    """A remote SPARQL 1.1 query + update endpoint.

    ``auth``: (user, password) for HTTP basic auth; ``token``: a bearer token. Either may also come from the URL
    (``http://user:pw@host/sparql``) or from ``$MIRAGE_KG_ENDPOINT_USER`` / ``$MIRAGE_KG_ENDPOINT_PASSWORD`` /
    ``$MIRAGE_KG_ENDPOINT_TOKEN``. ``chunk_triples`` fixes the INSERT DATA size (else it adapts from 10,000).
    ``timeout`` bounds each read (default 30 s or ``$MIRAGE_KG_ENDPOINT_TIMEOUT``); updates get ``update_timeout``."""

    stages_every_load = True
    #: how long a load whose commit got no answer reads the manifest for it before giving up (None: the update
    #: timeout)
    commit_confirm_s: float | None = None

    def __init__(
        self,
        query_endpoint: str,
        update_endpoint: str | None = None,
        *,
        timeout: float | None = None,
        max_retries: int = 3,
        backoff: float = 0.2,
        auth: tuple[str, str] | None = None,
        token: str | None = None,
        chunk_triples: int | None = None,
        max_response_bytes: int | None = None,
        update_timeout: float = 600.0,
    ) -> None:
        url_auth = _url_credentials(query_endpoint)
        self.query_endpoint = public_url(query_endpoint).rstrip("/")
        update = update_endpoint or _guess_update(self.query_endpoint)
        url_auth = url_auth or (_url_credentials(update) if update_endpoint else None)
        self.update_endpoint = public_url(update)
        self.location = self.query_endpoint
        # a read's default bound: 30 s, or $MIRAGE_KG_ENDPOINT_TIMEOUT (validation of a large KG on a slow engine)
        timeout = timeout if timeout is not None else float(os.environ.get(ENV_TIMEOUT) or 30.0)
        self.timeout = timeout
        self.update_timeout = max(timeout, update_timeout)  # a load's MOVE of a large graph takes its time
        self.max_retries = max_retries
        self.backoff = backoff
        if chunk_triples is not None and chunk_triples < 1:
            raise StoreError(f"the insert chunk size must be at least 1 triple, not {chunk_triples}")
        self.chunk_triples = chunk_triples or DEFAULT_CHUNK_TRIPLES
        self._chunk_fixed = chunk_triples is not None
        mb = os.environ.get(ENV_MAX_RESPONSE_MB)
        self.max_response_bytes = max_response_bytes or int(float(mb) * 2**20 if mb else DEFAULT_MAX_RESPONSE_MB * 2**20)
        env_auth = (os.environ[ENV_USER], os.environ.get(ENV_PASSWORD, "")) if os.environ.get(ENV_USER) else None
        basic = auth or url_auth or env_auth
        bearer = token or os.environ.get(ENV_TOKEN) or None
        headers = {"Authorization": f"Bearer {bearer}"} if bearer and not basic else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), auth=basic,
                                    headers=headers)
        self._dataset: list[str] | None = None
        self._dataset_at = 0.0
        self._cap: int | None | bool = False  # False: not probed yet
        self._nested: bool | None = None
        self._union: bool | None = None
        #: where a long load says how far it got (``build-default`` and ``load`` give their echo), one line
        #: every ``_PROGRESS_S``
        self.report: Callable[[str], None] | None = None

    # --- HTTP ----------------------------------------------------------------------------------------------
    def _post(self, url: str, *, data: dict[str, Any], headers: dict[str, str],
              timeout: float | None = None) -> httpx.Response:
        """POST with bounded retries on connection errors, 429 and 5xx (``Retry-After`` honoured). ``timeout``
        bounds the whole exchange, not each socket read: an endpoint that keeps streaming rows past it is cut
        off (httpx's own timeouts are per read)."""
        limit = timeout if timeout is not None else self.timeout
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            wait = self.backoff * (2**attempt)
            try:
                response = self._exchange(url, data, headers, limit)
            except httpx.TimeoutException as exc:
                raise EndpointError(f"no answer within {limit} s; narrow the query or raise --timeout",
                                    public_url(url), retryable=True) from exc
            except httpx.TransportError as exc:
                last = exc
            except EndpointError as exc:  # an answer cut off mid-body
                if not exc.retryable:
                    raise
                last = exc
            else:
                if response.status_code < 400:
                    return response
                detail = _error_detail(response)
                limit_hit = _engine_limit(detail)
                if limit_hit:  # the engine's own limit: the same answer every time, so not retried
                    raise QueryError(f"{public_url(url)} rejected the query: {detail}; {limit_hit}")
                if response.status_code == 400:
                    raise QueryError(f"{public_url(url)} rejected the request: {detail}")
                if response.status_code in (401, 403):
                    raise EndpointError(
                        f"HTTP {response.status_code}: {detail}; give credentials with --endpoint-user and "
                        f"${ENV_PASSWORD} (basic) or ${ENV_TOKEN} (bearer)", public_url(url), retryable=False)
                if response.status_code not in _RETRY_STATUS:
                    raise EndpointError(f"HTTP {response.status_code}: {detail}", public_url(url), retryable=False)
                last = EndpointError(f"HTTP {response.status_code}: {detail}", public_url(url), retryable=True)
                wait = max(wait, _retry_after(response))
            if attempt < self.max_retries:
                time.sleep(wait)
        if isinstance(last, EndpointError):
            raise last
        raise EndpointError(f"cannot connect ({_first_line(last)}); is the server running?", public_url(url),
                            retryable=True) from last

    def _exchange(self, url: str, data: dict[str, Any], headers: dict[str, str], limit: float) -> httpx.Response:
        """One request, its body read as a stream against a wall-clock deadline and the size cap."""
        deadline = time.monotonic() + limit
        request = self._client.build_request("POST", url, data=data, headers=headers,
                                             timeout=httpx.Timeout(limit, connect=min(limit, 10.0)))
        streamed = self._client.send(request, stream=True)
        chunks: list[bytes] = []
        size = 0
        try:
            try:
                for chunk in streamed.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise EndpointError(
                            f"the answer is larger than {self.max_response_bytes // 2**20} MB; narrow the query "
                            f"(LIMIT) or raise ${ENV_MAX_RESPONSE_MB}", public_url(url), retryable=False)
                    if time.monotonic() > deadline:
                        raise QueryError(f"{public_url(url)}: the answer was still coming after the timeout of "
                                         f"{limit} s; narrow the query or raise --timeout")
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                raise EndpointError(f"the answer was cut off after {size:,} bytes (the connection closed "
                                    f"mid-response: {_first_line(exc)})", public_url(url), retryable=True) from exc
        finally:
            streamed.close()
        kept = {k: v for k, v in streamed.headers.items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")}
        return httpx.Response(streamed.status_code, headers=kept, content=b"".join(chunks), request=request)

    def _request(self, query: str, accept: str, timeout: float | None, *, restricted: bool = True) -> httpx.Response:
        data: dict[str, Any] = {"query": query}
        graphs = self._graphs() if restricted else None
        if graphs:
            data["default-graph-uri"] = graphs
            data["named-graph-uri"] = graphs
        return self._post(self.query_endpoint, data=data, headers={"Accept": accept}, timeout=timeout)

    def _results(self, query: str, timeout: float | None, *, restricted: bool = True) -> tuple[dict[str, Any], bool]:
        """The SPARQL JSON answer, and whether the endpoint said it truncated it."""
        response = self._request(query, "application/sparql-results+json", timeout, restricted=restricted)
        return _json(response, self.location), "x-sparql-maxrows" in response.headers

    # --- the dataset ---------------------------------------------------------------------------------------
    def _graphs(self) -> list[str] | None:
        """The graphs queries see: the manifest, and every graph whose load committed. None when mirage-kg has
        recorded no load here (a foreign endpoint: its own dataset is used as it is)."""
        now = time.monotonic()
        if self._dataset is None or now - self._dataset_at > _DATASET_RECHECK_S:
            payload, _ = self._results(
                f"SELECT DISTINCT ?g WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ ?g {iri_ref(LOADED_FROM)} ?src }} }}",
                None, restricted=False)
            loaded = sorted({b["g"]["value"] for b in _bindings(payload, self.location)
                             if isinstance(b.get("g"), dict) and b["g"].get("type") == "uri"})
            self._dataset = [MANIFEST_GRAPH, *loaded] if loaded else []
            self._dataset_at = now
        return self._dataset or None

    def _forget_dataset(self) -> None:
        self._dataset = None

    # --- the profile ---------------------------------------------------------------------------------------
    def profile(self) -> EndpointProfile:
        """Probe (once) and report what the endpoint does."""
        return EndpointProfile(self._union_default_graph(), self._result_cap(), self.nested_optional_paths,
                               self.chunk_triples)

    def _result_cap(self) -> int | None:
        if self._cap is False:
            side = int(_PROBE_ROWS ** 0.5) + 1
            values = " ".join(str(i) for i in range(side))
            payload, _ = self._results(f"SELECT ?a WHERE {{ VALUES ?a {{ {values} }} VALUES ?b {{ {values} }} }}",
                                       None, restricted=False)
            got = len(_bindings(payload, self.location))
            self._cap = got if got < side * side else None
        return self._cap

    @property
    def nested_optional_paths(self) -> bool:
        """Probed on one edge of the data: ``S/(S/(S)?)?`` must join the edge's two ends (one step, both
        optionals empty). Without data, the safe form (False) is used."""
        if self._nested is None:
            rows = self.select("SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o FILTER(isIRI(?o) && isIRI(?s)) } } LIMIT 1")
            if not rows:
                return False
            s, p, o = rows[0]["s"].sparql(), rows[0]["p"].sparql(), rows[0]["o"].sparql()
            step = f"({p}|^{p})"
            self._nested = self.ask(f"ASK {{ {s} {step}/({step}/({step})?)? {o} }}")
        return self._nested

    def _union_default_graph(self) -> bool | None:
        if self._union is None:
            rows = self.select_raw("SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } } LIMIT 1")
            if not rows:
                return None
            s, p, o = (rows[0][k].sparql() for k in ("s", "p", "o"))
            payload, _ = self._results(f"ASK {{ {s} {p} {o} }}", None, restricted=False)
            self._union = _boolean(payload, self.location)
        return self._union

    def check(self) -> None:
        """Fail with the fix when the endpoint cannot serve MIRAGE-KG: reachable, and either a manifest (its
        graphs are named in every query) or a default graph that is the union of the named graphs."""
        if self._graphs() is None and self._union_default_graph() is False:
            raise StoreError(
                f"SPARQL endpoint {self.location}: its default graph is not the union of its named graphs and no "
                "mirage-kg load is recorded there, so queries without GRAPH would miss the data; restart Oxigraph "
                "with `oxigraph serve --union-default-graph` (Virtuoso and GraphDB do this by default), or load "
                "the data with `mirage-kg load --endpoint`")

    # --- reading -------------------------------------------------------------------------------------------
    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Term]]:
        payload, truncated = self._results(query, timeout)
        if "results" not in payload:
            raise QueryError("expected a SELECT query")
        rows = self._rows(payload)
        cap = self._cap if isinstance(self._cap, int) and not isinstance(self._cap, bool) else None
        limit = _own_limit(query)
        short_of_limit = limit is None or len(rows) < limit  # a page that is exactly as long as it asked is whole
        if short_of_limit and (truncated or (cap is not None and len(rows) >= cap)):
            raise EndpointError(
                f"the answer was truncated at {len(rows):,} rows (the endpoint's result-size cap, Virtuoso's "
                "ResultSetMaxRows); page it with LIMIT/OFFSET under the cap (`query sparql` does that itself for "
                "a query without ORDER BY); Virtuoso sorts at most MaxSortedTopRows rows under LIMIT/OFFSET, so "
                f"{SORTED_PAGING}", self.location)
        return rows

    def query(self, query: str, *, timeout: float | None = None) -> QueryResult:
        """``Store.query``; a SELECT without ORDER BY is paged under the endpoint's result-size cap (within its own
        LIMIT/OFFSET, if any), so it gives every row the embedded store gives. A sorted one past the cap is an
        error with the advice that works on the engine (Virtuoso cannot sort past MaxSortedTopRows)."""
        if query_form(query) != "SELECT" or _ORDER_BY.search(query):
            return super().query(query, timeout=timeout)
        cap = self._result_cap()
        if cap is None:
            return super().query(query, timeout=timeout)
        text = query.strip()
        limit, offset = None, 0
        match = _HAS_LIMIT.search(text)
        if match:
            found = re.search(r"(?i)\bLIMIT\s+(\d+)", match.group(0))
            moved = re.search(r"(?i)\bOFFSET\s+(\d+)", match.group(0))
            limit = int(found.group(1)) if found else None
            offset = int(moved.group(1)) if moved else 0
            text = text[:match.start()]
        page = min(PAGE_SIZE, cap)
        rows: list[dict[str, Term]] = []
        while limit is None or len(rows) < limit:
            want = page if limit is None else min(page, limit - len(rows))
            got = self.select(f"{text}\nLIMIT {want} OFFSET {offset}", timeout=timeout)
            rows.extend(got)
            offset += len(got)
            if len(got) < want:
                break
        names = projected_variables(query)
        if names is None:
            names = []
            for row in rows:
                names.extend(k for k in row if k not in names)
        return {"vars": names, "rows": rows}

    def select_raw(self, query: str) -> list[dict[str, Term]]:
        """A SELECT over the endpoint's own dataset (no graph restriction): for probes."""
        payload, _ = self._results(query, None, restricted=False)
        return self._rows(payload)

    def _rows(self, payload: dict[str, Any]) -> list[dict[str, Term]]:
        out = []
        for binding in _bindings(payload, self.location):
            row = {}
            for name, value in binding.items():
                term = _term(value, self.location)
                if term is not None:
                    row[name] = term
            out.append(row)
        return out

    def select_all(self, query: str, *, timeout: float | None = None) -> Iterator[dict[str, Term]]:
        """Pages of LIMIT/OFFSET under the result cap. A query with its own LIMIT/OFFSET runs once (and is
        checked for truncation)."""
        if _HAS_LIMIT.search(query.strip()):
            yield from self.select(query, timeout=timeout)
            return
        cap = self._result_cap()
        page = min(PAGE_SIZE, cap) if cap else PAGE_SIZE
        offset = 0
        while True:
            rows = self.select(f"{query}\nLIMIT {page} OFFSET {offset}", timeout=timeout)
            yield from rows
            if len(rows) < page:
                return
            offset += page

    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        payload, _ = self._results(query, timeout)
        return _boolean(payload, self.location)

    def construct(self, query: str, *, timeout: float | None = None) -> list[tuple[Term, Term, Term]]:
        import pyoxigraph as ox

        from mirage_kg.store.oxigraph_terms import to_term

        response = self._request(query, "application/n-triples", timeout)
        if "x-sparql-maxrows" in response.headers:
            raise EndpointError("the CONSTRUCT answer was truncated at the endpoint's result-size cap "
                                f"({response.headers['x-sparql-maxrows']} rows); narrow the query", self.location)
        try:
            return [(to_term(t.subject), to_term(t.predicate), to_term(t.object))
                    for t in ox.parse(response.content, format=ox.RdfFormat.N_TRIPLES)]
        except SyntaxError as exc:
            kind = response.headers.get("content-type", "?")
            raise EndpointError(f"the CONSTRUCT answer ({kind}) is not N-Triples: {_first_line(exc)}",
                                self.location) from None

    def triple_count(self, graph: str | None = None) -> int:
        dataset = self._graphs()
        if graph is not None and dataset is not None and graph not in dataset:
            return 0  # outside the dataset (Virtuoso would even count 1 for such a GRAPH pattern)
        return super().triple_count(graph)

    def graphs(self) -> list[str]:
        rows = self.select("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
        return sorted(r["g"].value for r in rows if r["g"].kind == "uri")

    # --- writing -------------------------------------------------------------------------------------------
    def update(self, update: str) -> None:
        try:
            self._post(self.update_endpoint, data={"update": update}, headers={}, timeout=self.update_timeout)
        except (QueryError, EndpointError) as exc:
            if _NO_UPDATE.search(str(exc)) and not _TOO_BIG.search(str(exc)):
                raise EndpointError(
                    f"updates are refused ({_first_line(exc)}); on Virtuoso run "
                    "`isql-vt PORT dba PASSWORD exec='GRANT SPARQL_UPDATE TO \"SPARQL\";'` or use its /sparql-auth "
                    f"endpoint with --endpoint-user; elsewhere check the update URL ({self.update_endpoint})",
                    self.location) from None
            raise
        finally:
            self._forget_dataset()

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        import pyoxigraph as ox

        from mirage_kg.store.oxigraph_terms import OXIGRAPH_FORMATS

        # Parse locally (streaming) and send INSERT DATA chunks: every SPARQL 1.1 endpoint accepts them.
        quads = ox.parse(data, format=OXIGRAPH_FORMATS[media_type], base_iri=base_iri)
        batch: list[str] = []
        started = beat = told = time.monotonic()
        sent = 0
        for q in quads:
            batch.append(f"{q.subject} {q.predicate} {q.object} .\n")
            if len(batch) >= self.chunk_triples:
                self._insert(batch, graph)
                sent += len(batch)
                batch = []
                now = time.monotonic()
                if now - beat >= _HEARTBEAT_S:
                    self._heartbeat(graph)
                    beat = now
                if self.report is not None and now - told >= _PROGRESS_S:
                    self.report(f"  {graph}: {sent:,} triples sent in {now - started:.0f} s "
                                f"({sent / max(now - started, 1e-9):,.0f}/s)")
                    told = now
        if batch:
            self._insert(batch, graph)

    def _insert(self, batch: list[str], graph: str) -> None:
        """One INSERT DATA; an endpoint that finds it too big gets two halves (and the size is kept)."""
        try:
            self.update(f"INSERT DATA {{ GRAPH {iri_ref(graph)} {{\n{''.join(batch)}}} }}")
        except (QueryError, EndpointError) as exc:
            if not _TOO_BIG.search(str(exc)) or len(batch) < 2:
                raise
            if self._chunk_fixed:
                raise EndpointError(f"an INSERT DATA of {len(batch):,} triples is too big for it "
                                    f"({_first_line(exc)}); give a smaller --chunk-size", self.location) from None
            half = len(batch) // 2
            self.chunk_triples = max(1, min(self.chunk_triples, half))
            self._insert(batch[:half], graph)
            self._insert(batch[half:], graph)

    # --- loads beside other processes ----------------------------------------------------------------------
    def _stages(self, before: int) -> bool:
        """A new graph loads in place (queries see it only once the manifest records it), unless no mirage-kg
        load is recorded here yet: then queries are not restricted to recorded graphs."""
        return before > 0 or self._graphs() is None

    def _load_token(self) -> str:
        return f"{uuid.uuid4().hex} {socket.gethostname()} {os.getpid()}"

    def _unmark(self, target: str, token: str) -> str:
        return (f"{super()._unmark(target, token)} ;\n"
                f"DELETE WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(LOAD_ALIVE)} ?at }} }}")

    def _heartbeat(self, target: str, state: str = "") -> None:
        """Say in the manifest that the load into ``target`` is alive (``state`` "committing": its commit is
        on its way)."""
        now = _dt.datetime.now(_dt.timezone.utc).isoformat()
        manifest = iri_ref(MANIFEST_GRAPH)
        self.update(f"DELETE WHERE {{ GRAPH {manifest} {{ {iri_ref(target)} {iri_ref(LOAD_ALIVE)} ?at }} }} ;\n"
                    f"INSERT DATA {{ GRAPH {manifest} {{ {iri_ref(target)} {iri_ref(LOAD_ALIVE)} "
                    f"{literal(f'{now} {state}'.strip())} }} }}")

    def _commit(self, target: str, token: str, commit: Callable[[], None]) -> None:
        """The commit, and when its answer is lost (a timeout, a dropped connection), what the server did: the
        load's pending mark gone means it committed. Still there after ``commit_confirm_s``: an error saying the
        server may yet apply it (its mark stays, so no later writer drops a load that may still commit)."""
        self._heartbeat(target, "committing")
        try:
            commit()
            return
        except EndpointError as exc:
            if not exc.retryable:
                raise
            lost = exc
        wait = self.commit_confirm_s if self.commit_confirm_s is not None else self.update_timeout
        deadline = time.monotonic() + wait
        ask = f"ASK {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(PENDING)} {literal(token)} }} }}"
        while True:
            try:
                payload, _ = self._results(ask, None, restricted=False)
                if not _boolean(payload, self.location):
                    return  # the server applied it
            except (EndpointError, QueryError):
                pass  # still unreachable: keep asking until the deadline
            if time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        raise EndpointError(
            f"the commit of {target} got no answer ({_first_line(lost)}) and is not in the manifest after "
            f"{wait:.0f} s more; the endpoint may still apply it: `mirage-kg stats --endpoint {self.location}` shows "
            "whether it did; if it never does, the next load drops the unfinished one", self.location) from None

    def recover(self) -> list[str]:
        """Drop the loads that were killed midway: their process is gone (this host), their heartbeat stopped
        more than ``STALE_LOAD_S`` ago, or their mark names no process (an older mirage-kg's). A load under way
        in another process is left alone, and so is one whose commit may still be applied."""
        manifest = iri_ref(MANIFEST_GRAPH)
        rows = self.select(f"SELECT ?g ?t ?at WHERE {{ GRAPH {manifest} {{ ?g {iri_ref(PENDING)} ?t "
                           f"OPTIONAL {{ ?g {iri_ref(LOAD_ALIVE)} ?at }} }} }}")
        dropped = []
        for row in rows:
            graph, token = row["g"].value, row["t"].value
            alive = row["at"].value if "at" in row else ""
            if not _abandoned(token, alive, self.update_timeout):
                continue
            self._discard(graph, token)
            dropped.append(graph)
        return dropped

    def export(self, out: IO[bytes], media_type: str) -> None:
        """The dataset (paged under the result cap) rebuilt in memory and written as the embedded store would."""
        import pyoxigraph as ox

        from mirage_kg.store.oxigraph_terms import OXIGRAPH_FORMATS, QUAD_FORMATS, to_node

        dataset = ox.Store()
        dataset.bulk_extend(ox.Quad(to_node(q.subject), to_node(q.predicate),  # type: ignore[arg-type]  # never literals
                                    to_node(q.object), ox.NamedNode(q.graph)) for q in self.quads())
        fmt = OXIGRAPH_FORMATS[media_type]
        if media_type in QUAD_FORMATS:
            dataset.dump(output=out, format=fmt)
            return
        triples = ox.Store()
        triples.bulk_extend(ox.Quad(q.subject, q.predicate, q.object, ox.DefaultGraph()) for q in dataset)
        triples.dump(output=out, format=fmt, from_graph=ox.DefaultGraph())

    def close(self) -> None:
        self._client.close()


def _engine_limit(detail: str) -> str:
    """What works instead, when an error is one of Virtuoso's fixed limits ("" otherwise)."""
    if _SORT_LIMIT.search(detail):
        return f"Virtuoso sorts at most MaxSortedTopRows rows (10,000 by default) under LIMIT/OFFSET: {SORTED_PAGING}"
    if _TRANSITIVE_LIMIT.search(detail):
        return ("Virtuoso walks a +/* path from a bound end within a fixed memory pool: bound the walk with a "
                "UNION of fixed-length sequences instead ({ ?a p ?b } UNION { ?a p/p ?b } UNION { ?a p/p/p ?b } for "
                "at most 3 steps; Virtuoso answers optional steps such as p/p? wrongly), or use `mirage-kg query "
                "bridge A B --max-hops N` for the paths between two entities")
    return ""


def _abandoned(token: str, alive: str, update_timeout: float) -> bool:
    """Whether the load whose pending mark is ``token`` (``uuid host pid``) and whose heartbeat reads ``alive``
    (``time [committing]``) was given up: its process on this host is gone (and no commit of it can still be
    on its way), or its heartbeat stopped ``STALE_LOAD_S`` ago; a mark without a process is an older mirage-kg's."""
    parts = token.split()
    if len(parts) != 3 or not parts[2].isdigit():
        return True
    beat = alive.split()
    age = None
    if beat:
        try:
            age = (_dt.datetime.now(_dt.timezone.utc) - _dt.datetime.fromisoformat(beat[0])).total_seconds()
        except ValueError:
            age = None
    if age is not None and age > max(STALE_LOAD_S, 2 * update_timeout):
        return True
    if parts[1] != socket.gethostname():
        return False  # another host's process: only its heartbeat tells
    if process_alive(int(parts[2])):
        return False
    committing = len(beat) > 1 and beat[1] == "committing"
    return not (committing and age is not None and age < 2 * update_timeout)


def process_alive(pid: int) -> bool:
    """Whether a process of this machine with this id is running (``os.kill`` with signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _own_limit(query: str) -> int | None:
    """The LIMIT a query ends with, if any."""
    match = _HAS_LIMIT.search(query.strip())
    if not match:
        return None
    found = re.search(r"(?i)\bLIMIT\s+(\d+)", match.group(0))
    return int(found.group(1)) if found else None


def _guess_update(query_endpoint: str) -> str:
    """Oxigraph and Fuseki serve updates beside queries at ``.../update``; Virtuoso takes both at /sparql."""
    if query_endpoint.endswith("/query"):
        return query_endpoint[: -len("/query")] + "/update"
    return query_endpoint


def _json(response: httpx.Response, where: str) -> dict[str, Any]:
    kind = response.headers.get("content-type", "")
    if "html" in kind.lower():
        raise EndpointError(f"answered with an HTML page ({kind}), not SPARQL results; is this the SPARQL endpoint "
                            "itself (often .../sparql or .../query)?", where)
    try:
        payload = json.loads(response.content)
    except ValueError:
        head = response.content[:80].decode("utf-8", "replace").replace("\n", " ")
        raise EndpointError(f"the answer is not SPARQL JSON ({kind or 'no content type'}, "
                            f"{len(response.content):,} bytes, starting {head!r})", where) from None
    if not isinstance(payload, dict):
        raise EndpointError("the answer is JSON but not a SPARQL results object", where)
    return payload


def _bindings(payload: dict[str, Any], where: str) -> list[dict[str, Any]]:
    results = payload.get("results")
    bindings = results.get("bindings") if isinstance(results, dict) else None
    if not isinstance(bindings, list) or not all(isinstance(b, dict) for b in bindings):
        raise EndpointError("the answer has no SPARQL JSON 'results.bindings' list", where)
    return bindings


def _boolean(payload: dict[str, Any], where: str) -> bool:
    if isinstance(payload.get("boolean"), bool):
        return payload["boolean"]
    head = payload.get("head")
    if isinstance(head, dict) and head.get("vars") == ["__ASK_RETVAL"]:  # Virtuoso's JSON for ASK
        return any(str((b.get("__ASK_RETVAL") or {}).get("value")) == "1" for b in _bindings(payload, where))
    raise QueryError("expected an ASK query")


def _error_detail(response: httpx.Response) -> str:
    lines = [line for line in response.text.strip().splitlines() if line.strip()]
    if "html" in response.headers.get("content-type", "").lower():
        return f"{response.reason_phrase} (an HTML error page)"
    return lines[0][:300] if lines else response.reason_phrase


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after")
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return 0.0
        seconds = when.timestamp() - time.time()
    return max(0.0, min(seconds, _MAX_RETRY_AFTER_S))


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip().splitlines() if exc is not None else []
    return text[0][:300] if text else type(exc).__name__
