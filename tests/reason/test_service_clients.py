"""``serve`` as clients nobody here wrote see it: the official ``openai`` SDK on the OpenAI-compatible chat API, the
official ``mcp`` SDK's client on the MCP tools (streamable HTTP on ``serve``, and stdio on ``mirage-kg mcp``), and
SPARQLWrapper and rdflib's ``SPARQLStore`` on the SPARQL 1.1 Protocol endpoint. One real ``mirage-kg serve`` on a
free loopback port, over the demo KG with a scripted model, behind a bearer token."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")

from tests.reason.service_support import QUESTION, ServeProcess, scripted_serve, write_script  # noqa: E402

TOKEN = "clients-token-for-tests"
SCHEMA = "https://w3id.org/mirage-kg/schema#"
KG = "https://w3id.org/mirage-kg/entity/"
pytestmark = [pytest.mark.server, pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings"),
              pytest.mark.filterwarnings("ignore:ConjunctiveGraph is deprecated")]  # raised inside SPARQLWrapper


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with scripted_serve(tmp_path_factory.mktemp("clients"), TOKEN) as process:
        yield process


def own_ask(served: ServeProcess) -> dict[str, Any]:
    """The same question through the API's own /v1/ask, to compare with what the foreign clients get."""
    response = httpx.post(f"{served.url}/v1/ask", json={"question": QUESTION},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


# -- the openai SDK ----------------------------------------------------------------------------------------------

def test_openai_client_chat_non_streamed_and_streamed(served: ServeProcess) -> None:
    openai = pytest.importorskip("openai", reason="the openai client is not installed: pip install 'mirage-kg[test]'")
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=TOKEN, max_retries=0, timeout=120)
    assert [m.id for m in client.models.list()] == ["mirage"]
    assert client.models.retrieve("mirage").owned_by == "mirage-kg"

    expected = own_ask(served)
    completion = client.chat.completions.create(model="mirage", messages=[
        {"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": QUESTION}])
    message = completion.choices[0].message
    assert message.role == "assistant" and completion.choices[0].finish_reason == "stop"
    text = message.content or ""
    record = completion.model_extra["mirage"]  # the documented extension field: the whole answer record
    # the answer, how grounded it is and the cited paths, as a person reads them in a chat window
    assert text.startswith(expected["answer"]) and "Salbutamol" in text
    assert "Grounding:" in text and "Knowledge-graph paths cited:" in text
    assert record["answer"] == expected["answer"] and record["claims"] == expected["claims"]
    assert record["claims"] and all(c["citations"] for c in record["claims"])
    for path in (p for c in record["claims"] for p in c["citations"]):
        assert path["text"] in text
    for key in ("support", "flags"):
        if key in expected:
            assert record[key] == expected[key]
    if "support" in record:
        assert f"Grounding: {record['support']['verdict']}" in text
    assert completion.usage is not None and completion.usage.completion_tokens == record["tokens"]["total"]

    stream = client.chat.completions.create(model="mirage", stream=True,
                                            messages=[{"role": "user", "content": QUESTION}])
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in chunks if c.choices)
    assert streamed == text  # the same answer, scripted model and all
    assert "Sub-question: What medication treats asthma?" in reasoning and "Searching the knowledge graph" in reasoning
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["mirage"]["claims"] == record["claims"]


def test_openai_client_errors(served: ServeProcess) -> None:
    openai = pytest.importorskip("openai", reason="the openai client is not installed: pip install 'mirage-kg[test]'")
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=TOKEN, max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{served.url}/v1", api_key="wrong-token-123", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError, match="no model 'gpt-4o'"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.BadRequestError, match="role 'user'"):
        client.chat.completions.create(model="mirage", messages=[{"role": "system", "content": "hello"}])
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="mirage", n=2, messages=[{"role": "user", "content": QUESTION}])


# -- the mcp SDK -------------------------------------------------------------------------------------------------

EXPECTED_TOOLS = {"link", "anchor", "bridge", "sparql", "ask"}


async def _exercise_mcp(client: Any, with_ask: bool) -> dict[str, Any]:
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    expected = (EXPECTED_TOOLS if with_ask else EXPECTED_TOOLS - {"ask"})
    try:
        import mirage_kg.retrieval.differential  # noqa: F401

        expected = expected | {"differential"}
    except ImportError:
        pass
    assert set(tools) == expected
    anchor_schema = tools["anchor"].input_schema
    assert anchor_schema["required"] == ["entity"] and anchor_schema["properties"]["k"]["maximum"] == 200
    assert all(t.description for t in tools.values())
    out: dict[str, Any] = {}
    for name, args in (("link", {"text": "asthma and a cough"}), ("anchor", {"entity": "KG:Asthma", "k": 3}),
                       ("bridge", {"source": "KG:Asthma", "target": "KG:Wheezing", "max_hops": 2}),
                       ("sparql", {"query": "ASK { ?s ?p ?o }"})):
        result = await client.call_tool(name, args)
        assert not result.is_error, result.content
        assert json.loads(result.content[0].text) == result.structured_content
        out[name] = result.structured_content
    if "differential" in tools:
        result = await client.call_tool("differential", {"findings": ["KG:Wheezing", "KG:Cough"], "top": 3})
        assert not result.is_error, result.content
        out["differential"] = result.structured_content
    refused = await client.call_tool("sparql", {"query": "DELETE WHERE { ?s ?p ?o }"})
    assert refused.is_error and "read-only" in refused.content[0].text
    unknown = await client.call_tool("anchor", {"entity": "KG:No_such_thing"})
    assert unknown.is_error and "No_such_thing" in unknown.content[0].text
    bad = await client.call_tool("anchor", {"entity": "KG:Asthma", "k": 0})
    assert bad.is_error
    if with_ask:
        result = await client.call_tool("ask", {"question": QUESTION})
        assert not result.is_error, result.content
        out["ask"] = result.structured_content
    return out


def _check_mcp_results(out: dict[str, Any]) -> None:
    from click.testing import CliRunner

    from mirage_kg.cli import main

    def cli(*args: str) -> Any:
        result = CliRunner().invoke(main, [*args, "--json", "--embedding-model", "none"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert out["link"] == cli("link", "asthma and a cough", "--top", "5")
    assert {k: v for k, v in out["anchor"].items() if k != "resolved"} == \
        {k: v for k, v in cli("query", "anchor", "KG:Asthma", "-k", "3").items() if k != "resolved"}
    assert out["bridge"]["paths"] and all(p["length"] <= 2 for p in out["bridge"]["paths"])
    assert out["sparql"] == {"boolean": True}
    if "differential" in out:
        assert out["differential"]["candidates"]
    if "ask" in out:
        assert "Salbutamol" in out["ask"]["record"]["answer"] and out["ask"]["record"]["claims"]
        assert "Grounding:" in out["ask"]["text"] and "Knowledge-graph paths cited:" in out["ask"]["text"]


def test_mcp_client_over_streamable_http_on_serve(served: ServeProcess) -> None:
    pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'mirage-kg[mcp]'")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict[str, Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                      timeout=httpx2.Timeout(120.0)) as http:
            async with Client(streamable_http_client(f"{served.url}/mcp", http_client=http)) as client:
                return await _exercise_mcp(client, with_ask=True)

    _check_mcp_results(asyncio.run(main()))
    # the token guards /mcp as it guards the rest of the API
    assert httpx.post(f"{served.url}/mcp", json={}).status_code == 401


def test_mcp_client_over_stdio(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'mirage-kg[mcp]'")
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "mirage_kg.cli", "mcp", "--embedding-model", "none", "--script", str(write_script(tmp_path))],
        env={"MIRAGE_KG_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"})

    async def main() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _exercise_mcp(client, with_ask=True)

    _check_mcp_results(asyncio.run(main()))


# -- SPARQLWrapper and rdflib's SPARQLStore ----------------------------------------------------------------------

SELECT = f"SELECT ?d ?m WHERE {{ ?d <{SCHEMA}need_medication> ?m }} ORDER BY ?d ?m LIMIT 3"
CONSTRUCT = f"CONSTRUCT {{ <{KG}Asthma> ?p ?o }} WHERE {{ <{KG}Asthma> ?p ?o }}"


def _wrapper(served: ServeProcess, query: str, fmt: str, method: str = "GET") -> Any:
    wrapper_module = pytest.importorskip("SPARQLWrapper", reason="SPARQLWrapper is not installed: pip install "
                                         "'mirage-kg[test]'")
    sparql = wrapper_module.SPARQLWrapper(f"{served.url}/sparql")
    sparql.addCustomHttpHeader("Authorization", f"Bearer {TOKEN}")
    sparql.setMethod(method)
    sparql.setReturnFormat(fmt)
    sparql.setQuery(query)
    return sparql


def test_sparqlwrapper_select_ask_construct_and_update_refused(served: ServeProcess) -> None:
    import rdflib
    from rdflib.compare import isomorphic
    from SPARQLWrapper import CSV, JSON, POST, TSV, TURTLE, XML

    # the rows the store itself gives (through the API's own JSON), to compare every format with
    own = httpx.post(f"{served.url}/v1/sparql", json={"query": SELECT},
                     headers={"Authorization": f"Bearer {TOKEN}"}).json()
    rows = [(b["d"]["value"], b["m"]["value"]) for b in own["results"]["bindings"]]
    assert len(rows) == 3

    for method in ("GET", POST):
        result = _wrapper(served, SELECT, JSON, method).queryAndConvert()
        assert [(b["d"]["value"], b["m"]["value"]) for b in result["results"]["bindings"]] == rows
    xml = _wrapper(served, SELECT, XML).queryAndConvert()  # a DOM document
    assert [n.firstChild.data for n in xml.getElementsByTagName("uri")] == [v for row in rows for v in row]
    csv_text = _wrapper(served, SELECT, CSV).queryAndConvert().decode("utf-8")
    assert csv_text.splitlines() == ["d,m", *(f"{d},{m}" for d, m in rows)]
    tsv_text = _wrapper(served, SELECT, TSV).queryAndConvert().decode("utf-8")
    assert tsv_text.splitlines() == ["?d\t?m", *(f"<{d}>\t<{m}>" for d, m in rows)]

    assert _wrapper(served, "ASK { ?s ?p ?o }", JSON).queryAndConvert() == {"boolean": True}
    assert _wrapper(served, f"ASK {{ <{KG}Asthma> <{SCHEMA}no_such> ?o }}", XML).query().convert() \
        .getElementsByTagName("boolean")[0].firstChild.data == "false"

    graph = _wrapper(served, CONSTRUCT, XML).queryAndConvert()  # RDF/XML, parsed into an rdflib Graph
    turtle = _wrapper(served, CONSTRUCT, TURTLE).queryAndConvert()
    assert isinstance(graph, rdflib.Graph) and len(graph) > 3
    assert isomorphic(graph, rdflib.Graph().parse(data=turtle, format="turtle"))
    assert (rdflib.URIRef(f"{KG}Asthma"), rdflib.URIRef(f"{SCHEMA}need_medication"), None) in graph

    for update in ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "DELETE WHERE { ?s ?p ?o }"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _wrapper(served, update, JSON, POST).query()
        assert refused.value.code == 403 and b"read-only" in refused.value.read()
    # the guard of `query sparql`: SERVICE (the server fetching any URL a query names) is refused too
    with pytest.raises(urllib.error.HTTPError) as service:
        _wrapper(served, "SELECT * WHERE { SERVICE <http://127.0.0.1:1/sparql> { ?s ?p ?o } }", JSON).query()
    assert service.value.code == 403
    # the store is untouched
    assert _wrapper(served, "ASK { <urn:a> <urn:b> <urn:c> }", JSON).queryAndConvert() == {"boolean": False}


def test_rdflib_sparqlstore_select_ask_construct_and_update_refused(served: ServeProcess) -> None:
    import rdflib
    from rdflib.plugins.stores.sparqlstore import SPARQLStore, SPARQLUpdateStore

    headers = {"Authorization": f"Bearer {TOKEN}"}
    graph = rdflib.Graph(SPARQLStore(f"{served.url}/sparql", headers=headers))
    rows = [(str(r[0]), str(r[1])) for r in graph.query(SELECT)]
    assert len(rows) == 3 and all(d.startswith(KG) for d, _ in rows)
    assert graph.query("ASK { ?s ?p ?o }").askAnswer is True
    built = graph.query(CONSTRUCT).graph
    assert (rdflib.URIRef(f"{KG}Asthma"), rdflib.URIRef(f"{SCHEMA}need_medication"), None) in built
    labels = list(graph.query(f"SELECT ?l WHERE {{ <{KG}Asthma> <{rdflib.SKOS.prefLabel}> ?l }}"))
    assert labels == [(rdflib.Literal("Asthma", lang="en"),)]  # a language-tagged literal survives the XML results
    with pytest.raises(TypeError):  # SPARQLStore itself is read-only
        graph.update("INSERT DATA { <urn:a> <urn:b> <urn:c> }")
    writer = SPARQLUpdateStore(f"{served.url}/sparql", f"{served.url}/sparql", headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        writer.update("INSERT DATA { <urn:a> <urn:b> <urn:c> }")
    assert refused.value.code == 403
    assert graph.query("ASK { <urn:a> <urn:b> <urn:c> }").askAnswer is False


def test_sparql_protocol_negotiation_and_refusals(served: ServeProcess) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{served.url}/sparql"
    assert httpx.get(url, params={"query": "ASK { ?s ?p ?o }"}).status_code == 401
    plain = httpx.get(url, params={"query": "ASK { ?s ?p ?o }"}, headers=auth)
    assert plain.headers["content-type"].startswith("application/sparql-results+json")
    assert plain.json() == {"boolean": True}
    ranked = httpx.get(url, params={"query": SELECT}, headers={
        **auth, "Accept": "application/sparql-results+json;q=0.5, text/csv;q=0.9, */*;q=0.1"})
    assert ranked.headers["content-type"].startswith("text/csv") and ranked.text.startswith("d,m")
    refused = httpx.get(url, params={"query": CONSTRUCT}, headers={**auth, "Accept": "text/csv"})
    assert refused.status_code == 406 and "text/turtle" in refused.json()["error"]["message"]
    body = httpx.post(url, content=SELECT, headers={**auth, "Content-Type": "application/sparql-query",
                                                    "Accept": "text/tab-separated-values"})
    assert body.status_code == 200 and body.text.startswith("?d\t?m")
    for update in ({"update": "CLEAR ALL"}, {"query": "CLEAR ALL"}):
        assert httpx.post(url, data=update, headers=auth).status_code == 403
    assert httpx.post(url, content="CLEAR ALL", headers={
        **auth, "Content-Type": "application/sparql-update"}).status_code == 403
    dataset = httpx.get(url, params={"query": SELECT, "default-graph-uri": "urn:x"}, headers=auth)
    assert dataset.status_code == 400 and "FROM" in dataset.json()["error"]["message"]
    assert httpx.get(url, params={"query": "SELEC ?x"}, headers=auth).status_code == 400
    assert httpx.get(url, headers=auth).status_code == 400


# -- in process: a server without a model, a failing model, the OpenAPI description -----------------------------

def _app(backend: Any | None) -> Any:
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.pipeline.config import MirageConfig
    from mirage_reason.service import AskService, create_app

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    return kg, create_app(kg, AskService(kg, backend, MirageConfig(n_r=2)) if backend is not None else None)


def test_chat_without_a_model_and_a_failing_model_mid_stream() -> None:
    openai = pytest.importorskip("openai", reason="the openai client is not installed: pip install 'mirage-kg[test]'")
    from fastapi.testclient import TestClient

    from mirage_reason.backends.scripted import ScriptedBackend
    from mirage_reason.errors import BackendError

    _, no_model = _app(None)
    with TestClient(no_model) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)
        assert [m.id for m in client.models.list()] == ["mirage"]
        with pytest.raises(openai.InternalServerError, match="without a model"):
            client.chat.completions.create(model="mirage", messages=[{"role": "user", "content": QUESTION}])
        spec = http.get("/openapi.json").json()["paths"]
        assert {"/v1/chat/completions", "/v1/models", "/sparql"} <= set(spec)

    def broken(prompt: str) -> str:
        raise BackendError("the model server went away")

    _, failing = _app(ScriptedBackend(broken))
    with TestClient(failing) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)
        with pytest.raises(openai.APIStatusError, match="went away"):
            client.chat.completions.create(model="mirage", messages=[{"role": "user", "content": QUESTION}])
        with pytest.raises(openai.APIError, match="went away"):  # the stream has begun: the error is an event
            for _ in client.chat.completions.create(model="mirage", stream=True,
                                                    messages=[{"role": "user", "content": QUESTION}]):
                pass


def test_mcp_tools_in_process_without_a_model() -> None:
    pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'mirage-kg[mcp]'")
    from mcp import Client

    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.service.mcp_server import build_mcp

    server = build_mcp(KnowledgeGraph(demo_store(), embedding_model="none"), None, max_k=7)

    async def main() -> tuple[set[str], dict[str, Any], Any]:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            over = await client.call_tool("anchor", {"entity": "KG:Asthma", "k": 8})
            return set(tools), tools["anchor"].input_schema, over

    names, schema, over = asyncio.run(main())
    assert "ask" not in names and {"link", "anchor", "bridge", "sparql"} <= names
    assert schema["properties"]["k"]["maximum"] == 7  # the schema carries the server's limits
    assert over.is_error


def test_mcp_over_http_checks_the_host_on_loopback() -> None:
    pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'mirage-kg[mcp]'")
    from fastapi.testclient import TestClient

    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.service import ServiceSettings, create_app

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for host, rebound in (("127.0.0.1", 421), ("0.0.0.0", 200)):
        app = create_app(kg, None, ServiceSettings(host=host))
        with TestClient(app, base_url="http://127.0.0.1:8000") as http:
            assert http.post("/mcp", json=initialize, headers=headers).status_code == 200
            # a page on another name that resolves to this machine (DNS rebinding) is refused on loopback
            other = http.post("/mcp", json=initialize, headers={**headers, "Host": "evil.example:8000"})
            assert other.status_code == rebound, host


def test_health_says_when_the_linker_is_warm(served: ServeProcess) -> None:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = httpx.get(f"{served.url}/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        if health["linker_warm"]:
            break
        time.sleep(0.2)
    assert health["labels_ready"] and health["linker_warm"]
