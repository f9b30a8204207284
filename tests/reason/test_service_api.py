"""The HTTP API of ``mirage-kg serve`` with FastAPI's test client over the demo KG and a scripted model: the same
JSON as the CLI's ``--json``, errors as 4xx JSON, the token, the size limits, CORS, the ask queue and its stream,
and a store that stays untouched."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")

from click.testing import CliRunner  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from mirage_kg import KnowledgeGraph, OxigraphStore, QueryError, StoreError, demo_store, open_store  # noqa: E402
from mirage_kg.cli import main  # noqa: E402
from mirage_reason.backends.scripted import ScriptedBackend  # noqa: E402
from mirage_reason.pipeline.config import MirageConfig  # noqa: E402
from mirage_reason.service import AskService, ServiceSettings, create_app  # noqa: E402

from tests.reason.service_support import QUESTION, script_reply, write_script  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def kg() -> KnowledgeGraph:
    return KnowledgeGraph(demo_store(), embedding_model="none")


@pytest.fixture(scope="module")
def client(kg: KnowledgeGraph) -> Iterator[TestClient]:
    asks = AskService(kg, ScriptedBackend(script_reply), MirageConfig(n_r=2))
    with TestClient(create_app(kg, asks)) as test_client:
        yield test_client


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json", "--embedding-model", "none"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- the same JSON as the CLI ----------------------------------------------------------------------------------------

def test_anchor_matches_the_cli(client: TestClient) -> None:
    response = client.get("/v1/anchor", params={"entity": "KG:Asthma", "k": 3})
    assert response.status_code == 200
    assert response.json() == cli_json("query", "anchor", "KG:Asthma", "-k", "3")
    assert response.json()["neighbours"]
    filtered = client.get("/v1/anchor", params={"entity": "KG:Asthma", "relation": "MKG:need_medication",
                                                "direction": "out"}).json()
    assert filtered == cli_json("query", "anchor", "KG:Asthma", "--relation", "MKG:need_medication",
                                "--direction", "out")
    assert {n["relation"] for n in filtered["neighbours"]} == {"MKG:need_medication"}


def test_bridge_link_and_sparql_match_the_cli(client: TestClient) -> None:
    bridge = client.get("/v1/bridge", params={"source": "KG:Asthma", "target": "KG:Wheezing", "max_hops": 2}).json()
    assert bridge == cli_json("query", "bridge", "KG:Asthma", "KG:Wheezing", "--max-hops", "2")
    assert bridge["paths"] and all(p["length"] <= 2 for p in bridge["paths"])
    link = client.get("/v1/link", params={"text": "asthma and a cough"}).json()
    assert link == cli_json("link", "asthma and a cough")
    query = "SELECT ?d WHERE { ?d <https://w3id.org/mirage-kg/schema#need_medication> ?m } ORDER BY ?d LIMIT 3"
    via_api = client.post("/v1/sparql", json={"query": query}).json()
    result = CliRunner().invoke(main, ["query", "sparql", query, "--json"])
    assert via_api == json.loads(result.stdout) and len(via_api["results"]["bindings"]) == 3
    assert client.get("/v1/sparql", params={"query": "ASK { ?s ?p ?o }"}).json() == {"boolean": True}


def test_entity_search_labels_retrieve_stats_validation(client: TestClient) -> None:
    entity = client.get("/v1/entity", params={"id": "KG:Asthma"}).json()
    assert entity["entity"] == {"id": "KG:Asthma", "label": "Asthma"} and entity["degree"] > 0
    matches = client.get("/v1/search", params={"q": "asth"}).json()["matches"]
    assert matches[0]["id"] == "KG:Asthma"
    assert [m["id"] for m in client.get("/v1/search", params={"q": "pain", "limit": 3}).json()["matches"]] \
        and len(client.get("/v1/search", params={"q": "pain", "limit": 3}).json()["matches"]) == 3
    labels = client.get("/v1/labels", params={"id": ["KG:Asthma"], "relation": ["MKG:has_symptom"]}).json()
    assert labels["entities"] == {"KG:Asthma": "Asthma"}
    assert labels["relations"]["MKG:has_symptom"]["label"] == "has symptom"
    retrieved = client.get("/v1/retrieve", params={"question": "what treats asthma?", "budget": 20}).json()
    assert retrieved == cli_json("retrieve", "what treats asthma?", "--budget", "20")
    stats = client.get("/v1/stats").json()
    assert stats["entities"] == 274 and stats["facts"] > 0
    report = client.get("/v1/validation").json()
    assert {"errors", "warnings"} <= set(report) or "findings" in report


def test_openapi_describes_every_endpoint(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in ("/v1/entity", "/v1/search", "/v1/anchor", "/v1/bridge", "/v1/link", "/v1/retrieve", "/v1/sparql",
                 "/v1/stats", "/v1/validation", "/v1/ask", "/v1/ask/stream", "/v1/labels"):
        assert path in spec["paths"], path
    assert "AnchorResponse" in spec["components"]["schemas"] and "AskRequest" in spec["components"]["schemas"]


# -- bad input is a 4xx JSON error, never a 500 ----------------------------------------------------------------------

@pytest.mark.parametrize(("method", "url", "body", "status", "kind"), [
    ("get", "/v1/anchor?entity=KG:No_such_thing", None, 404, "UnknownEntityError"),
    ("get", "/v1/anchor?entity=nosuchprefix:x y", None, 404, "UnknownEntityError"),
    ("get", "/v1/anchor?entity=%20", None, 400, "InputError"),
    ("get", "/v1/anchor?entity=KG:Asthma&k=0", None, 422, "RequestValidationError"),
    ("get", "/v1/anchor?entity=KG:Asthma&direction=sideways", None, 422, "RequestValidationError"),
    ("get", "/v1/anchor?entity=http://x/%3E%7D", None, 400, None),
    ("get", "/v1/bridge?source=KG:Asthma", None, 422, "RequestValidationError"),
    ("get", "/v1/bridge?source=KG:Asthma&target=KG:Nope", None, 404, "UnknownEntityError"),
    ("get", "/v1/entity?id=KG:Nope", None, 404, "UnknownEntityError"),
    ("post", "/v1/sparql", {"query": "SELEC ?x WHERE {"}, 400, "QueryError"),
    ("post", "/v1/sparql", {"query": "DELETE WHERE { ?s ?p ?o }"}, 403, "UpdateRefusedError"),
    ("post", "/v1/sparql", {"query": "INSERT DATA { <urn:a> <urn:b> <urn:c> }"}, 403, "UpdateRefusedError"),
    ("post", "/v1/sparql", {"query": "DROP ALL"}, 403, "UpdateRefusedError"),
    ("post", "/v1/sparql", {"query": "ASK {}", "extra": 1}, 422, "RequestValidationError"),
    ("post", "/v1/ask", {"question": ""}, 422, "RequestValidationError"),
    ("post", "/v1/ask", {"question": "x", "n_q": 99}, 422, "RequestValidationError"),
    ("get", "/v1/nothing-here", None, 404, "HTTPException"),
])
def test_bad_input_is_a_clear_4xx(client: TestClient, method: str, url: str, body: Any, status: int,
                                  kind: str | None) -> None:
    response = client.request(method.upper(), url, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status and error["message"] and "Traceback" not in response.text
    if kind:
        assert error["type"] == kind


def test_a_name_several_concepts_carry_is_409_with_candidates() -> None:
    store = OxigraphStore()
    store.load(io.BytesIO(b"@prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix kg: <https://w3id.org/mirage-kg/entity/> ."
               b" kg:A skos:prefLabel \"Cold\"@en . kg:B skos:prefLabel \"Cold\"@en . kg:A kg:near kg:B ."),
               media_type="text/turtle", graph="urn:x:test")
    with TestClient(create_app(KnowledgeGraph(store, embedding_model="none"))) as test_client:
        response = test_client.get("/v1/anchor", params={"entity": "Cold"})
    assert response.status_code == 409
    message = response.json()["error"]["message"]
    assert "KG:A" in message and "KG:B" in message


def test_an_unexpected_failure_is_a_plain_500(kg: KnowledgeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(kg)
    monkeypatch.setattr(kg.linker, "complete", lambda *a: 1 / 0)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        response = test_client.get("/v1/search", params={"q": "x"})
    assert response.status_code == 500 and response.json()["error"]["type"] == "InternalError"
    assert "ZeroDivisionError" not in response.text and "Traceback" not in response.text


# -- safety: token, sizes, CORS, time ---------------------------------------------------------------------------------

def test_token_is_required_on_every_request(kg: KnowledgeGraph) -> None:
    with TestClient(create_app(kg, settings=ServiceSettings(token=TOKEN))) as test_client:
        for url in ("/", "/v1/anchor?entity=KG:Asthma", "/openapi.json", "/static/app.js", "/v1/health"):
            response = test_client.get(url)
            assert response.status_code == 401, url
            assert response.headers["www-authenticate"].startswith("Bearer")
        assert test_client.get("/v1/health", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        good = test_client.get("/v1/anchor?entity=KG:Asthma", headers={"Authorization": f"Bearer {TOKEN}"})
        assert good.status_code == 200
        # the web app: /?token=... once sets an HttpOnly cookie and drops the token from the address bar
        opened = test_client.get(f"/?token={TOKEN}", follow_redirects=False)
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        assert "HttpOnly" in opened.headers["set-cookie"] and "SameSite=Strict" in opened.headers["set-cookie"]
        assert test_client.get("/").status_code == 200  # the client kept the cookie
        test_client.cookies.clear()
        assert test_client.get("/?token=wrong-token-123", follow_redirects=False).status_code == 401


def test_bad_tokens_are_refused_at_start() -> None:
    for bad in ("", "short", "has space inside", "semi;colon-token"):
        with pytest.raises(ValueError):
            ServiceSettings(token=bad)


def test_query_strings_and_bodies_are_bounded(kg: KnowledgeGraph) -> None:
    settings = ServiceSettings(max_body_bytes=1000, max_query_string_bytes=500)
    with TestClient(create_app(kg, settings=settings)) as test_client:
        assert test_client.get("/v1/search", params={"q": "a" * 600}).status_code == 414
        big = test_client.post("/v1/sparql", json={"query": "ASK { ?s ?p ?o } #" + "x" * 2000})
        assert big.status_code == 413 and big.json()["error"]["type"] == "BodyTooLarge"
        assert test_client.post("/v1/sparql", json={"query": "ASK { ?s ?p ?o }"}).status_code == 200


def test_cors_is_off_unless_asked(kg: KnowledgeGraph) -> None:
    origin = {"Origin": "http://app.example"}
    with TestClient(create_app(kg)) as test_client:
        response = test_client.get("/v1/health", headers=origin)
        assert "access-control-allow-origin" not in response.headers
        assert response.headers["x-frame-options"] == "DENY"
    with TestClient(create_app(kg, settings=ServiceSettings(cors_origins=("http://app.example",)))) as test_client:
        assert test_client.get("/v1/health", headers=origin).headers["access-control-allow-origin"] == \
            "http://app.example"


def test_a_slow_request_gets_504(kg: KnowledgeGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    app = create_app(kg, settings=ServiceSettings(request_timeout=0.3))
    monkeypatch.setattr(kg.linker, "complete", lambda *a: release.wait(5) and [])
    try:
        with TestClient(app) as test_client:
            response = test_client.get("/v1/search", params={"q": "x"})
        assert response.status_code == 504 and response.json()["error"]["type"] == "RequestTimeout"
    finally:
        release.set()


# -- asks ------------------------------------------------------------------------------------------------------------

def test_ask_json_is_the_cli_shape(client: TestClient, tmp_path: Path) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION, "seed": 1})
    assert response.status_code == 200, response.text
    data = response.json()
    cli = cli_json("ask", QUESTION, "--script", str(write_script(tmp_path)), "--n-r", "2", "--seed", "1")
    assert list(data) == list(cli)
    # the same record for the same question and seed: everything but how long it took
    assert {k: v for k, v in data.items() if k not in ("timings", "engine")} == \
        {k: v for k, v in cli.items() if k not in ("timings", "engine")}
    assert data["support"]["verdict"] == "grounded" and data["sentences"] and "flags" in data
    assert len(data["sub_questions"]) == 2 and data["claims"]


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_ask_streams_its_progress(client: TestClient) -> None:
    with client.stream("POST", "/v1/ask", json={"question": QUESTION, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.read().decode("utf-8"))
    kinds = [kind for kind, _ in events]
    assert kinds[:4] == ["queued", "started", "entities", "sub_questions"] and kinds[-2:] == ["answer", "done"]
    data = dict(events)
    assert data["sub_questions"]["sub_questions"] == ["What medication treats asthma?", "What causes a cough?"]
    assert len(data["sub_questions"]["chains"]) == 2
    searches = [d for k, d in events if k == "search"]
    assert sorted(s["search"]["query"] for s in searches) == ["Asthma", "Cough"]
    assert all(s["search"]["results"] for s in searches)
    assert kinds.count("chain_done") == 2 and kinds.index("claims") > kinds.index("chain_done")
    claims = data["claims"]["claims"]
    assert claims and all(c["citations"] for c in claims)
    assert data["answer"]["answer"]["claims"] == [{"text": c["text"], "citations": c["citations"]} for c in claims]
    # the same through GET, for EventSource
    with client.stream("GET", "/v1/ask/stream", params={"question": QUESTION}) as response:
        assert [k for k, _ in _events(response.read().decode("utf-8"))][-1] == "done"


def test_a_full_ask_queue_answers_429(kg: KnowledgeGraph) -> None:
    gate = threading.Event()
    started = threading.Semaphore(0)

    def slow(prompt: str) -> str:
        started.release()
        gate.wait(10)
        return script_reply(prompt)

    asks = AskService(kg, ScriptedBackend(slow), MirageConfig(n_r=1, use_decomposer=False), workers=1, queue=1)
    app = create_app(kg, asks)
    try:
        first, place = asks.submit("What treats asthma?")
        assert place == 0 and started.acquire(timeout=10)  # the worker is busy
        second, place = asks.submit("What treats asthma?")
        assert place == 1  # waits in line
        with TestClient(app) as test_client:
            response = test_client.post("/v1/ask", json={"question": "What treats asthma?"})
            assert response.status_code == 429
            assert int(response.headers["retry-after"]) >= 1 and response.json()["error"]["type"] == "AskQueueFull"
            streamed = test_client.get("/v1/ask/stream", params={"question": "What treats asthma?"})
            assert streamed.status_code == 429
            gate.set()
            assert first.result(10).text and second.result(10).text  # both in line were answered
    finally:
        gate.set()
        asks.close()


def test_asks_off_is_503(kg: KnowledgeGraph) -> None:
    with TestClient(create_app(kg)) as test_client:
        response = test_client.post("/v1/ask", json={"question": "anything"})
    assert response.status_code == 503 and "without a model" in response.json()["error"]["message"]


# -- the store stays untouched, the CLI stays light --------------------------------------------------------------------

def test_the_served_store_is_read_only(tmp_path: Path) -> None:
    folder = tmp_path / "kg"
    result = CliRunner().invoke(main, ["load", str(Path(__file__).parents[2] / "ontologies" / "demo.ttl"),
                                       "--store", str(folder)])
    assert result.exit_code == 0, result.output
    store = open_store(str(folder))  # how `serve` opens it: read-only, shared
    assert store.read_only
    before = store.triple_count()
    with pytest.raises((QueryError, StoreError, OSError, RuntimeError)):  # pyoxigraph refuses writes
        store.update("INSERT DATA { <urn:a> <urn:b> <urn:c> }")
    kg = KnowledgeGraph(store, embedding_model="none")
    with TestClient(create_app(kg)) as test_client:
        assert test_client.get("/v1/anchor", params={"entity": "KG:Asthma"}).status_code == 200
        assert test_client.post("/v1/sparql", json={"query": "INSERT DATA { <urn:a> <urn:b> <urn:c> }"}) \
            .status_code == 403
    assert store.triple_count() == before
    store.close()
    with pytest.raises(StoreError, match="no store at"):
        open_store(str(tmp_path / "missing"))


def test_listing_commands_does_not_import_fastapi() -> None:
    code = ("import sys; from click.testing import CliRunner; from mirage_kg.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert 'serve ' in r.output, r.output; "
            "print(','.join(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--token" in result.output and "127.0.0.1" in result.output
