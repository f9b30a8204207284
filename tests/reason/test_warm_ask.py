"""A warm ``mirage-kg ask`` and ``link``: with ``MIRAGE_KG_SERVER`` naming a running ``mirage-kg serve``, the request
goes to it and the output is the record (``--json``) or the text a local command prints; options the server cannot honour, a
different store, a server without a model and a server that is down are each refused with a clear message."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")

from click.testing import CliRunner  # noqa: E402

from mirage_kg.cli import main  # noqa: E402

from tests.reason.service_support import QUESTION, ServeProcess, free_port, scripted_serve, write_script  # noqa: E402

TOKEN = "warm-ask-token-123"
pytestmark = [pytest.mark.server, pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with scripted_serve(tmp_path_factory.mktemp("warm"), TOKEN) as process:
        yield process


def ask(*args: str, server: str | None, token: str | None = TOKEN) -> object:
    env = {"MIRAGE_KG_SERVER": server, "MIRAGE_KG_TOKEN": token, "MIRAGE_KG_STORE": None}
    return CliRunner().invoke(main, ["ask", *args], env=env)


def test_warm_ask_is_the_servers_answer_in_the_local_shapes(served: ServeProcess, tmp_path: Path) -> None:
    direct = httpx.post(f"{served.url}/v1/ask", json={"question": QUESTION, "seed": 3},
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120).json()
    warm = ask(QUESTION, "--json", "--seed", "3", server=served.url)
    assert warm.exit_code == 0, warm.output
    record = json.loads(warm.stdout)
    assert record["answer"] == direct["answer"] and record["claims"] == direct["claims"]
    assert "answered by the server at" in warm.stderr
    # the same answer a local ask makes with the same scripted model (so the server is not a different pipeline)
    local = CliRunner().invoke(main, ["ask", QUESTION, "--json", "--seed", "3", "--embedding-model", "none",
                                      "--script", str(write_script(tmp_path))], env={"MIRAGE_KG_SERVER": None})
    assert local.exit_code == 0, local.output
    assert json.loads(local.stdout)["answer"] == record["answer"]

    text = ask(QUESTION, server=served.url + "/")
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith(record["answer"]) and "Grounding:" in text.stdout
    assert "Claims and the knowledge-graph paths they rest on:" in text.stdout
    assert record["claims"][0]["citations"][0]["text"] in text.stdout
    assert "sub-question(s)" in text.stderr


def test_warm_ask_refuses_what_the_server_cannot_honour(served: ServeProcess, tmp_path: Path) -> None:
    refused = ask(QUESTION, "--model", "smollm2", "--pipeline", "mirage", server=served.url)
    assert refused.exit_code == 2 and "--model, --pipeline" in refused.output and "unset MIRAGE_KG_SERVER" in \
        refused.output
    other = ask(QUESTION, "--store", str(tmp_path / "other"), server=served.url)
    assert other.exit_code == 1 and "serves memory" in other.output.replace("\n", " ")
    wrong = ask(QUESTION, server=served.url, token="not-the-token")
    assert wrong.exit_code == 1 and "401" in wrong.output and "bearer token" in wrong.output
    down = ask(QUESTION, server=f"http://127.0.0.1:{free_port()}")
    assert down.exit_code == 1 and "did not answer" in down.output and "mirage-kg serve" in down.output


def test_warm_ask_against_a_server_without_a_model() -> None:
    process = ServeProcess("--no-ask", "--embedding-model", "none")
    try:
        result = ask(QUESTION, server=process.url, token=None)
        assert result.exit_code == 1 and "without a model" in result.output
    finally:
        process.stop()


def test_warm_link_is_the_servers_linking_in_the_local_shapes(served: ServeProcess) -> None:
    env = {"MIRAGE_KG_TOKEN": TOKEN, "MIRAGE_KG_STORE": None}
    local = CliRunner().invoke(main, ["link", "asthma and a cough", "--json", "--embedding-model", "none"],
                               env={**env, "MIRAGE_KG_SERVER": None})
    warm = CliRunner().invoke(main, ["link", "asthma and a cough", "--json"], env={**env, "MIRAGE_KG_SERVER": served.url})
    assert warm.exit_code == 0 and local.exit_code == 0, (warm.output, local.output)
    assert json.loads(warm.stdout) == json.loads(local.stdout) and json.loads(warm.stdout)["mentions"]
    whole = CliRunner().invoke(main, ["link", "asthma", "--whole", "--top", "2"],
                               env={**env, "MIRAGE_KG_SERVER": served.url})
    assert whole.exit_code == 0 and "KG:Asthma" in whole.stdout and "mention" in whole.stdout
    refused = CliRunner().invoke(main, ["link", "asthma", "--embedding-model", "none"],
                                 env={**env, "MIRAGE_KG_SERVER": served.url})
    assert refused.exit_code == 2 and "unset MIRAGE_KG_SERVER" in refused.output
    down = CliRunner().invoke(main, ["link", "asthma"], env={**env, "MIRAGE_KG_SERVER": f"http://127.0.0.1:{free_port()}"})
    assert down.exit_code == 1 and "did not answer" in down.output


# -- MIRAGE_KG_WARM: a background server started by the first call, reused, answering repeats from its cache ------

def _warm_env(tmp_path: Path, idle: str = "60") -> dict[str, str | None]:
    return {"MIRAGE_KG_WARM": idle, "MIRAGE_KG_CACHE": str(tmp_path / "cache"), "MIRAGE_KG_SERVER": None,
            "MIRAGE_KG_TOKEN": None, "MIRAGE_KG_STORE": None}


def _servers(tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    folder = tmp_path / "cache" / "servers"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _stop_servers(tmp_path: Path) -> None:
    import signal

    for server in _servers(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(server["pid"], signal.SIGTERM)


def test_warm_start_reuses_one_background_server_and_says_a_cache_hit(tmp_path: Path) -> None:
    script = str(write_script(tmp_path))
    env = _warm_env(tmp_path)
    args = [QUESTION, "--json", "--seed", "3", "--script", script, "--embedding-model", "none"]
    try:
        first = CliRunner().invoke(main, ["ask", *args], env=env)
        assert first.exit_code == 0, first.output
        assert "starting a background mirage-kg serve" in first.stderr and "(started now)" in first.stderr
        fresh = json.loads(first.stdout)
        assert "cache" not in fresh and fresh["claims"]
        [server] = _servers(tmp_path)
        assert (tmp_path / "cache" / "servers").stat().st_mode & 0o077 == 0  # the token stays its owner's

        again = CliRunner().invoke(main, ["ask", *args], env=env)
        assert again.exit_code == 0, again.output
        assert "starting" not in again.stderr and "(warm)" in again.stderr
        hit = json.loads(again.stdout)
        assert hit["cache"]["served_from"] and len(hit["cache"]["key"]) == 32
        assert {k: v for k, v in hit.items() if k != "cache"} == fresh  # the same record, said to be a repeat
        text = CliRunner().invoke(main, ["ask", *args[:1], *args[2:]], env=env)
        assert text.exit_code == 0 and text.stdout.startswith(f"(served from cache of {hit['cache']['served_from']}")
        assert "--no-cache asks the model again" in text.stdout

        # what decides the answer is in the key: another seed, or --no-cache, asks the model again
        other_seed = json.loads(CliRunner().invoke(main, ["ask", *args[:2], "--seed", "4", *args[4:]], env=env).stdout)
        bypassed = json.loads(CliRunner().invoke(main, ["ask", *args, "--no-cache"], env=env).stdout)
        assert "cache" not in other_seed and "cache" not in bypassed
        assert bypassed["answer"] == fresh["answer"]
        assert [s["pid"] for s in _servers(tmp_path)] == [server["pid"]]  # one server all along

        # link reuses the same background server (it links too)
        linked = CliRunner().invoke(main, ["link", "asthma and a cough", "--json", "--embedding-model", "none"],
                                    env=env)
        assert linked.exit_code == 0 and json.loads(linked.stdout)["mentions"], linked.output
        assert [s["pid"] for s in _servers(tmp_path)] == [server["pid"]]
    finally:
        _stop_servers(tmp_path)


def test_a_changed_store_misses_the_answer_cache() -> None:
    from fastapi.testclient import TestClient

    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.backends.scripted import ScriptedBackend
    from mirage_reason.pipeline.config import MirageConfig
    from mirage_reason.service import AskService, create_app

    from tests.reason.service_support import script_reply

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    with TestClient(create_app(kg, AskService(kg, ScriptedBackend(script_reply), MirageConfig(n_r=2)))) as client:
        ask = {"question": QUESTION, "seed": 1}
        assert "cache" not in client.post("/v1/ask", json=ask).json()
        assert "cache" in client.post("/v1/ask", json=ask).json()
        assert "cache" not in client.post("/v1/ask", json={**ask, "cache": False}).json()
        assert "cache" not in client.post("/v1/ask", json={**ask, "question": QUESTION + " "}).json()
        kg.store.load(iter(["<https://w3id.org/mirage-kg/entity/Asthma> "
                            "<http://www.w3.org/2004/02/skos/core#altLabel> \"asthma attack\"@en .\n"]),
                      media_type="application/n-triples", graph="https://w3id.org/mirage-kg/graph/extra",
                      source="test")
        assert "cache" not in client.post("/v1/ask", json=ask).json()  # a load changed the store: asked again


def test_a_background_server_exits_when_idle(tmp_path: Path) -> None:
    env = _warm_env(tmp_path, idle="2")
    linked = CliRunner().invoke(main, ["link", "asthma", "--json", "--embedding-model", "none"], env=env)
    try:
        assert linked.exit_code == 0, linked.output
        [server] = _servers(tmp_path)
        assert "--no-ask" in server["command"] and server["idle_exit"] == 2
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _running(server["pid"]):
            time.sleep(0.5)
        assert not _running(server["pid"]), "the background server outlived its idle limit"
        assert "exiting (--idle-exit)" in next((tmp_path / "cache" / "servers").glob("*.log")).read_text()
    finally:
        _stop_servers(tmp_path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    return True


def test_warm_start_setting_is_checked() -> None:
    result = CliRunner().invoke(main, ["ask", QUESTION], env={"MIRAGE_KG_WARM": "soon", "MIRAGE_KG_SERVER": None})
    assert result.exit_code == 1 and "MIRAGE_KG_WARM='soon'" in result.output


def test_a_background_server_is_ready_once_its_linker_is_warm(tmp_path: Path) -> None:
    """A first request sent while the server still loads its embedding model would wait past its time limit."""
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from mirage_kg.cli.warm_server import _wait

    asked: list[bool] = []

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
            warm = len(asked) >= 3
            asked.append(warm)
            body = json.dumps({"status": "ok", "linker_warm": warm}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait(stand_in, f"http://127.0.0.1:{server.server_address[1]}", "t" * 12, tmp_path / "log")
        assert asked == [False, False, False, True]
    finally:
        stand_in.kill()
        server.shutdown()
