"""A warm ``mirage-kg ask`` and ``link``: with ``MIRAGE_KG_SERVER`` naming a running ``mirage-kg serve``, the request
goes to it and the output is the record (``--json``) or the text a local command prints; options the server cannot honour, a
different store, a server without a model and a server that is down are each refused with a clear message."""

from __future__ import annotations

import json
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
