"""A read-only SPARQL query stays inside the store: ``SERVICE`` (requests to any host), ``FROM <file:...>`` and an
engine's file/HTTP functions are refused by `query sparql` and ``/v1/sparql`` unless ``--allow-service`` names the
endpoint; the check reads rdflib's parse tree, so comments and strings neither trigger it nor get round it. And the
web app's cookie holds a value derived from the token, never the token."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import QueryError, UpdateRefusedError
from mirage_kg.store.sparql_text import check_read_only

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "core"


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        self.send_response(500)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def listener() -> Iterator[str]:
    """A local HTTP server that records every request it gets (a stand-in for the host a SERVICE names)."""
    _Recorder.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sparql"
    finally:
        server.shutdown()


REFUSED = [
    "SELECT * WHERE { SERVICE <http://169.254.169.254/latest/meta-data/> { ?s ?p ?o } }",
    "SELECT * WHERE { SERVICE SILENT <file:///etc/passwd> { ?s ?p ?o } }",
    "PREFIX e: <http://evil.example/> SELECT * WHERE { SERVICE e:sparql { ?s ?p ?o } }",
    "SELECT * WHERE { SERVICE ?where { ?s ?p ?o } VALUES ?where { <http://evil.example/> } }",
    "ASK { FILTER EXISTS { SERVICE <http://evil.example/> { ?s ?p ?o } } }",
    "SELECT * WHERE { { SELECT ?s WHERE { OPTIONAL { SERVICE <http://evil.example/> { ?s ?p ?o } } } } }",
    "# SERVICE in a comment first\nSELECT * WHERE { service <http://evil.example/> { ?s ?p ?o } }",
    "SELECT * FROM <file:///etc/passwd> WHERE { ?s ?p ?o }",
    "SELECT * FROM NAMED <FILE:///etc/shadow> WHERE { GRAPH ?g { ?s ?p ?o } }",
    'SELECT (bif:file_to_string("/etc/passwd") AS ?x) WHERE { }',
]


@pytest.mark.parametrize("query", REFUSED)
def test_outside_access_is_refused_with_a_reason(query: str) -> None:
    with pytest.raises(UpdateRefusedError) as caught:
        check_read_only(query)
    assert "refused" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("query", [
    'SELECT ?s WHERE { ?s ?p "SERVICE <http://evil.example/> { }" } # SERVICE <http://evil.example/>',
    "SELECT * FROM <http://mirage-kg.org/graph/x> FROM NAMED <urn:g> WHERE { ?s ?p ?o }",
    "SELECT ?s WHERE { ?s <http://example.org/service> ?o }",
])
def test_words_in_strings_comments_and_iris_are_not_service(query: str) -> None:
    assert check_read_only(query) == "SELECT"


def test_allow_list_names_the_endpoints() -> None:
    query = "SELECT * WHERE { SERVICE <http://allowed.example/sparql> { ?s ?p ?o } }"
    assert check_read_only(query, ["http://allowed.example/sparql"]) == "SELECT"
    with pytest.raises(UpdateRefusedError):
        check_read_only(query, ["http://allowed.example/other"])


def test_query_sparql_sends_no_request_to_a_service(tmp_path: Path, listener: str) -> None:
    store = tmp_path / "kg"
    assert CliRunner().invoke(main, ["load", str(FIX / "small.tsv"), "--store", str(store)]).exit_code == 0
    query = f"SELECT * WHERE {{ SERVICE <{listener}> {{ ?s ?p ?o }} }}"
    result = CliRunner().invoke(main, ["query", "sparql", query, "--store", str(store)])
    assert result.exit_code == 1 and "SERVICE" in result.output and "--allow-service" in result.output
    assert _Recorder.hits == []
    # allowed by name, the engine does call it (the endpoint answers 500 here: a clean error, not a traceback)
    allowed = CliRunner().invoke(main, ["query", "sparql", query, "--store", str(store), "--allow-service", listener])
    assert _Recorder.hits, allowed.output
    assert "Traceback" not in allowed.output


def test_http_sparql_refuses_service_with_403(listener: str) -> None:
    pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")
    from fastapi.testclient import TestClient

    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.service import ServiceSettings, create_app

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    query = f"SELECT * WHERE {{ SERVICE <{listener}> {{ ?s ?p ?o }} }}"
    with TestClient(create_app(kg)) as client:
        response = client.post("/v1/sparql", json={"query": query})
        assert response.status_code == 403, response.text
        assert "SERVICE" in response.json()["error"]["message"]
        assert client.get("/v1/sparql", params={"query": query}).status_code == 403
    assert _Recorder.hits == []
    with TestClient(create_app(kg, settings=ServiceSettings(sparql_services=(listener,)))) as client:
        client.post("/v1/sparql", json={"query": query})
    assert _Recorder.hits


def test_not_a_query_still_fails_as_before() -> None:
    with pytest.raises(QueryError):
        check_read_only("SELECT WHERE {")


def test_cookie_holds_a_session_value_not_the_token() -> None:
    pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")
    from fastapi.testclient import TestClient

    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.service import ServiceSettings, create_app
    from mirage_reason.service.guard import COOKIE

    token = "s3cret-token-for-tests"
    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    with TestClient(create_app(kg, settings=ServiceSettings(token=token))) as client:
        opened = client.get(f"/?token={token}", follow_redirects=False)
        assert opened.status_code == 303
        header = opened.headers["set-cookie"]
        assert token not in header
        value = client.cookies.get(COOKIE)
        assert value and value != token and len(value) >= 32
        assert client.get("/v1/health").status_code == 200  # the session cookie authenticates
        client.cookies.clear()
        client.cookies.set(COOKIE, token)  # the raw token in the cookie is not a session
        assert client.get("/v1/health").status_code == 401
    # another server's token gives another session value
    with TestClient(create_app(kg, settings=ServiceSettings(token="another-token-456"))) as other:
        other.cookies.set(COOKIE, value)
        assert other.get("/v1/health").status_code == 401
