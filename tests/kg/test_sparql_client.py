"""The endpoint client against misbehaving servers (a small scripted HTTP server on a free loopback port): an HTML
page, a body that is not JSON, bindings without ``type``, unbound variables left out, an answer cut off mid-body, a
``Retry-After``, an answer past the size cap, a result-size cap, credentials in the URL, and the read-only guard of
``query sparql``. Each failure is one line naming the endpoint (never its credentials), never a traceback."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import EndpointError
from mirage_kg.store import SparqlStore

Reply = Callable[["Handler", dict[str, list[str]]], None]


class Handler(BaseHTTPRequestHandler):
    server: "ScriptedServer"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        form = parse_qs(self.rfile.read(length).decode())
        self.server.requests.append((dict(self.headers), form))
        if "loadedFrom" in form.get("query", [""])[0]:  # the client's read of the manifest: nothing recorded
            self.send(200, results([], ["g"]))
            return
        self.server.reply(self, form)

    def send(self, status: int, body: bytes, kind: str = "application/sparql-results+json",
             headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class ScriptedServer(ThreadingHTTPServer):
    def __init__(self, reply: Reply) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        super().__init__(("127.0.0.1", port), Handler)
        self.reply = reply
        self.requests: list[tuple[dict[str, str], dict[str, list[str]]]] = []
        self.url = f"http://127.0.0.1:{port}/sparql"


@pytest.fixture
def serve() -> Iterator[Callable[[Reply], ScriptedServer]]:
    started: list[ScriptedServer] = []

    def start(reply: Reply) -> ScriptedServer:
        server = ScriptedServer(reply)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def results(bindings: list[dict[str, Any]], names: list[str]) -> bytes:
    return json.dumps({"head": {"vars": names}, "results": {"bindings": bindings}}).encode()


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_html_page_is_one_clear_error(serve: Any) -> None:
    server = serve(lambda h, f: h.send(200, b"<html><body>Welcome</body></html>", "text/html"))
    with pytest.raises(EndpointError) as info:
        SparqlStore(server.url, max_retries=0).select("SELECT * WHERE { ?s ?p ?o }")
    assert "HTML page" in one_line(info.value) and server.url in str(info.value)


def test_body_that_is_not_json(serve: Any) -> None:
    server = serve(lambda h, f: h.send(200, b"s,p,o\na,b,c\n", "text/csv"))
    with pytest.raises(EndpointError) as info:
        SparqlStore(server.url, max_retries=0).select("SELECT * WHERE { ?s ?p ?o }")
    assert "not SPARQL JSON" in one_line(info.value)


def test_binding_without_type_and_unbound_variables(serve: Any) -> None:
    rows = [{"s": {"type": "uri", "value": "urn:a"}, "o": None},  # rdflib-endpoint style: null for unbound
            {"s": {"type": "uri", "value": "urn:b"}},  # the variable left out
            {"s": {"value": "x", "xml:lang": "en"}}]  # no type, but a language: a literal
    server = serve(lambda h, f: h.send(200, results(rows, ["s", "o"])))
    got = SparqlStore(server.url, max_retries=0).select("SELECT ?s ?o WHERE { ?s ?p ?o }")
    assert [sorted(r) for r in got] == [["s"], ["s"], ["s"]] and got[2]["s"].lang == "en"
    bad = serve(lambda h, f: h.send(200, results([{"s": {"value": "urn:a"}}], ["s"])))
    with pytest.raises(EndpointError) as info:
        SparqlStore(bad.url, max_retries=0).select("SELECT ?s WHERE { ?s ?p ?o }")
    assert "no 'type'" in one_line(info.value)


def test_cut_off_body_is_reported_as_such(serve: Any) -> None:
    def cut(h: Handler, form: dict[str, list[str]]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/sparql-results+json")
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.write(b'{"head": {"vars": ["s"]}, "results": {"bindings": [')
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)

    server = serve(cut)
    with pytest.raises(EndpointError) as info:
        SparqlStore(server.url, max_retries=1, backoff=0.01).select("SELECT * WHERE { ?s ?p ?o }")
    text = one_line(info.value)
    assert "cut off" in text and "cannot connect" not in text


def test_retry_after_is_honoured(serve: Any) -> None:
    answered: list[float] = []

    def busy_then_ok(h: Handler, form: dict[str, list[str]]) -> None:
        answered.append(time.monotonic())
        if len(answered) == 1:
            h.send(503, b"busy", "text/plain", {"Retry-After": "1"})
        else:
            h.send(200, json.dumps({"head": {}, "boolean": True}).encode())

    server = serve(busy_then_ok)
    assert SparqlStore(server.url, max_retries=2, backoff=0.01).ask("ASK { ?s ?p ?o }") is True
    assert answered[1] - answered[0] >= 0.9  # waited as told, not the 0.01 s backoff


def test_answer_past_the_size_cap(serve: Any) -> None:
    rows = [{"s": {"type": "literal", "value": "x" * 1000}}] * 3000
    server = serve(lambda h, f: h.send(200, results(rows, ["s"])))
    with pytest.raises(EndpointError) as info:
        SparqlStore(server.url, max_retries=0, max_response_bytes=1 << 20).select("SELECT ?s WHERE { ?s ?p ?o }")
    assert "larger than 1 MB" in one_line(info.value)


def test_result_cap_is_found_and_paged_under(serve: Any) -> None:
    """A Virtuoso-like server that returns at most 500 rows per answer: the client finds the cap, pages the
    pattern primitive under it, and refuses a bare SELECT that reaches it."""
    data = [{"s": {"type": "uri", "value": f"urn:s{i}"}, "p": {"type": "uri", "value": "urn:p"},
             "o": {"type": "uri", "value": "urn:o"}, "g": {"type": "uri", "value": "urn:g"}} for i in range(1234)]

    def capped(h: Handler, form: dict[str, list[str]]) -> None:
        query = form["query"][0]
        if query.startswith("ASK"):
            h.send(200, json.dumps({"head": {}, "boolean": True}).encode())
            return
        if "VALUES ?a" in query:  # the cap probe
            rows = [{"a": {"type": "literal", "value": str(i)}} for i in range(500)]
        else:
            import re

            match = re.search(r"LIMIT (\d+) OFFSET (\d+)", query)
            start, size = (int(match.group(2)), int(match.group(1))) if match else (0, len(data))
            rows = data[start:start + size]
        h.send(200, results(rows[:500], ["s", "p", "o", "g"]))

    server = serve(capped)
    store = SparqlStore(server.url, max_retries=0)
    assert store.profile().result_cap == 500
    assert len(list(store.quads())) == 1234
    with pytest.raises(EndpointError) as info:
        store.select("SELECT ?s ?p ?o ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
    assert "truncated at 500 rows" in one_line(info.value)


def test_credentials_come_from_the_url_and_are_never_echoed(serve: Any) -> None:
    server = serve(lambda h, f: h.send(401, b"who are you", "text/plain"))
    secret_url = server.url.replace("http://", "http://alice:s3cret@")
    store = SparqlStore(secret_url, max_retries=0)
    with pytest.raises(EndpointError) as info:
        store.ask("ASK { ?s ?p ?o }")
    assert "s3cret" not in str(info.value) and "alice" not in str(info.value) and "--endpoint-user" in str(info.value)
    assert "s3cret" not in store.location
    sent = server.requests[-1][0]
    assert sent.get("Authorization") == "Basic " + base64.b64encode(b"alice:s3cret").decode()


def test_cli_bearer_token_and_no_echo(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRAGE_KG_ENDPOINT_USER", raising=False)
    monkeypatch.delenv("MIRAGE_KG_ENDPOINT_TOKEN", raising=False)  # undone after: the CLI sets it for the store

    def answer(h: Handler, form: dict[str, list[str]]) -> None:
        if form["query"][0].startswith("ASK"):
            h.send(200, json.dumps({"head": {}, "boolean": True}).encode())
        else:  # open_store's recovery and profile reads: an empty endpoint
            h.send(200, results([], ["g"]))

    server = serve(answer)
    result = CliRunner().invoke(main, ["query", "sparql", "ASK { ?s ?p ?o }", "--endpoint", server.url,
                                       "--endpoint-token", "tok-123"])
    assert result.exit_code == 0, result.output
    assert "tok-123" not in result.output
    assert any(h.get("Authorization") == "Bearer tok-123" for h, _ in server.requests)


@pytest.mark.parametrize("update", [
    "INSERT{<a> <b> <c>}WHERE{}",
    "DELETE WHERE { ?select ?p ?o }",
    "PREFIX x: <http://x/> INSERT DATA { x:a x:b x:c }",
    "LOAD <http://example.org/data.ttl>",
    "SELECT * WHERE { ?s ?p ?o } ; DROP ALL",
])
def test_read_only_guard_parses_the_query(serve: Any, update: str) -> None:
    server = serve(lambda h, f: h.send(200, json.dumps({"head": {}, "boolean": True}).encode()))
    result = CliRunner().invoke(main, ["query", "sparql", update, "--endpoint", server.url])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "read-only" in result.output or "not a valid SPARQL query" in result.output
    assert not [f for _, f in server.requests if "update" in f or update in f.get("query", [""])[0]]


def test_guard_lets_queries_through_and_knows_the_shipped_prefixes() -> None:
    runner = CliRunner()
    guide = runner.invoke(main, ["query", "sparql", "SELECT ?d WHERE { ?d a MKG:Disease }"])
    assert guide.exit_code == 0 and "KG:" in guide.output
    hashed = runner.invoke(main, ["query", "sparql", "PREFIX s: <https://w3id.org/mirage-kg/schema#> "
                                  "ASK { ?d a s:Disease }"])
    assert hashed.exit_code == 0 and hashed.output.strip() == "true"
    variable = runner.invoke(main, ["query", "sparql", "SELECT ?select WHERE { ?select a MKG:Disease } LIMIT 1"])
    assert variable.exit_code == 0 and variable.output.startswith("select")
