"""Endpoint loads that finish, and readers that never write: a read command beside a running load issues no
update (it used to drop the load's staging graph, and wait 10 minutes on that update); a writer drops only the
loads whose process is gone; a new graph loads in place (no MOVE of millions of triples at commit) and stays
invisible until it commits; a commit the client gave up on is confirmed from the manifest; every command that
talks to an endpoint takes ``--timeout``."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import EndpointError
from mirage_kg.store import SparqlStore, open_store
from mirage_kg.store.base import MANIFEST_GRAPH, PENDING
from mirage_kg.model.terms import iri_ref, literal

GRAPH = "https://w3id.org/mirage-kg/graph/"
DATA = b"".join(f"<urn:t:{i}> <urn:t:p> <urn:t:{i + 1}> .\n".encode() for i in range(50))


def _snapshot(url: str) -> dict[str, int]:
    import httpx

    answer = httpx.post(url, data={"query": "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g"},
                        headers={"Accept": "application/sparql-results+json"}, timeout=60)
    return {b["g"]["value"]: int(b["n"]["value"]) for b in answer.json()["results"]["bindings"]}


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _pending(store: SparqlStore, name: str, token: str) -> str:
    """A load under way as another process would leave it: a marked graph holding a few triples."""
    target = GRAPH + name
    store.update(f"INSERT DATA {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ {iri_ref(target)} {iri_ref(PENDING)} "
                 f"{literal(token)} }} }} ; INSERT DATA {{ GRAPH {iri_ref(target)} {{ <urn:a> <urn:b> <urn:c> }} }}")
    return target


@pytest.fixture
def live(oxigraph_server: Any) -> Any:
    oxigraph_server.clear()
    with open_store(endpoint=oxigraph_server.query_url, create=True) as store:
        store.load(io.BytesIO(DATA), media_type="application/n-triples", graph=GRAPH + "data", source="data")
    return oxigraph_server


def test_read_commands_issue_no_update_beside_a_running_load(live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """stats, anchor, bridge, link, validate, export and query sparql beside a load under way (its process
    alive): not one update, and the load's graph still there afterwards."""
    url = live.query_url
    with SparqlStore(url) as store:
        running = _pending(store, "running", f"{'a' * 32} {socket.gethostname()} {os.getpid()}")
        killed = _pending(store, "killed", f"{'b' * 32} {socket.gethostname()} {_dead_pid()}")
    before = _snapshot(url)
    updates: list[str] = []
    real = SparqlStore.update
    monkeypatch.setattr(SparqlStore, "update", lambda self, text: (updates.append(text), real(self, text))[1])
    where = ["--endpoint", url]
    commands = [["stats", *where], ["query", "anchor", "urn:t:3", *where],
                ["query", "bridge", "urn:t:3", "urn:t:5", *where], ["link", "t 3", "--embedding-model", "none", *where],
                ["validate", *where], ["query", "sparql", "ASK { ?s ?p ?o }", *where]]
    runner = CliRunner()
    for args in commands:
        result = runner.invoke(main, args)
        assert result.exit_code in (0, 1), (args, result.output)
        assert "Traceback" not in result.output
    assert updates == []
    assert _snapshot(url) == before
    assert {running, killed} <= set(before)


def test_a_writer_drops_only_the_loads_whose_process_is_gone(live: Any) -> None:
    url = live.query_url
    with SparqlStore(url) as store:
        running = _pending(store, "running", f"{'a' * 32} {socket.gethostname()} {os.getpid()}")
        killed = _pending(store, "killed", f"{'b' * 32} {socket.gethostname()} {_dead_pid()}")
        older = _pending(store, "older", "c" * 32)  # an older mirage-kg's token names no process: dropped
    with open_store(endpoint=url, create=True) as writer:
        dropped = writer.recover()
    graphs = _snapshot(url)
    assert running in graphs and killed not in graphs and older not in graphs
    assert dropped == []  # open_store's own recovery had dropped them already
    with SparqlStore(url) as store:
        rows = store.select(f"SELECT ?g WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ ?g {iri_ref(PENDING)} ?t }} }}")
    assert [r["g"].value for r in rows] == [running]


def test_a_new_graph_loads_in_place_and_commits_without_moving_it(live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit of a new graph is its manifest record (a few triples), not a MOVE of everything loaded: the
    default KG's disease annotations failed on that MOVE after 20 minutes. Readers see it only once committed."""
    url = live.query_url
    updates: list[str] = []
    seen_mid_load: list[int] = []
    real = SparqlStore.update

    def spy(self: SparqlStore, text: str) -> None:
        updates.append(text)
        real(self, text)
        if text.startswith("INSERT DATA { GRAPH <https://w3id.org/mirage-kg/graph/fresh>"):
            with SparqlStore(url) as reader:
                seen_mid_load.append(reader.triple_count(GRAPH + "fresh"))

    monkeypatch.setattr(SparqlStore, "update", spy)
    with open_store(endpoint=url, create=True, chunk_triples=10) as store:
        receipt = store.load(io.BytesIO(DATA), media_type="application/n-triples", graph=GRAPH + "fresh",
                             source="fresh")
    assert receipt.added == 50
    assert not any("MOVE" in u or "ADD " in u for u in updates)
    assert seen_mid_load and set(seen_mid_load) == {0}  # invisible until its record commits
    with SparqlStore(url) as reader:
        assert reader.triple_count(GRAPH + "fresh") == 50


def test_a_commit_the_client_gave_up_on_is_confirmed_from_the_manifest(
        live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint applied the commit but the answer never came (the client's timeout): the load reads the
    manifest and reports the graph loaded, as the server holds it; a commit that never landed is an error that
    says the server may still apply it, and the graph stays out of every query."""
    url = live.query_url
    real = SparqlStore.update

    def applied_then_lost(self: SparqlStore, text: str) -> None:
        real(self, text)
        if "loadedFrom" in text:
            raise EndpointError("no answer within 600.0 s; narrow the query or raise --timeout", url, retryable=True)

    monkeypatch.setattr(SparqlStore, "update", applied_then_lost)
    with open_store(endpoint=url, create=True) as store:
        receipt = store.load(io.BytesIO(DATA), media_type="application/n-triples", graph=GRAPH + "late",
                             source="late")
    assert receipt.added == 50

    def lost(self: SparqlStore, text: str) -> None:
        if "loadedFrom" in text:
            raise EndpointError("no answer within 600.0 s; narrow the query or raise --timeout", url, retryable=True)
        real(self, text)

    monkeypatch.setattr(SparqlStore, "update", lost)
    monkeypatch.setattr(SparqlStore, "commit_confirm_s", 1.0)
    with open_store(endpoint=url, create=True) as store, pytest.raises(EndpointError) as caught:
        store.load(io.BytesIO(DATA), media_type="application/n-triples", graph=GRAPH + "never", source="never")
    assert "may still apply it" in str(caught.value) and "stats" in str(caught.value)
    with SparqlStore(url) as reader:
        assert reader.triple_count(GRAPH + "never") == 0 and reader.triple_count(GRAPH + "late") == 50


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/query"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("command", [["stats"], ["query", "anchor", "urn:x"], ["query", "bridge", "urn:x", "urn:y"],
                                     ["link", "fever"], ["retrieve", "fever?"], ["validate"], ["index"],
                                     ["export", "--format", "nt"], ["build-default", "--only", "hpo"]])
def test_every_endpoint_command_takes_timeout(silent_endpoint: str, command: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``--timeout 1`` against an endpoint that never answers: exit 1 with the one-line error, in seconds (the
    subprocess's own limit is no timing assertion: without the option the command would wait 30-600 s)."""
    monkeypatch.delenv("MIRAGE_KG_ENDPOINT_TIMEOUT", raising=False)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mirage_kg.cli", *command, "--endpoint", silent_endpoint,
                           "--timeout", "1"], capture_output=True, text=True, timeout=25,
                          env={**os.environ, "MIRAGE_KG_PROGRESS": "0"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no answer within 1.0 s" in done.stderr and "Traceback" not in done.stderr
    print(f"{' '.join(command)} --timeout 1: exit 1 after {time.monotonic() - started:.1f} s")


def test_a_killed_endpoint_load_is_left_to_readers_and_dropped_by_the_next_writer(live: Any, tmp_path: Path) -> None:
    """Killed mid-load: readers already see the endpoint as before, `stats` changes nothing, and the next
    writer to open it drops the leftovers."""
    url = live.query_url
    before = _snapshot(url)
    big = tmp_path / "big.tsv"
    big.write_text("".join(f"Thing_{i}\thas_part\tPart_{i % 997}\n" for i in range(60_000)), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "mirage_kg.cli", "load", str(big), "--endpoint", url,
                             "--chunk-size", "500", "--no-index"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(_snapshot(url).values()) < sum(before.values()) + 2000:
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    during = _snapshot(url)
    assert sum(during.values()) > sum(before.values()) + 1000, "the load was killed before it wrote anything"
    result = CliRunner().invoke(main, ["stats", "--endpoint", url, "--json"])
    assert result.exit_code == 0, result.output
    assert '"triples": 50' in result.output or '"facts": 50' in result.output
    assert _snapshot(url) == during  # a reader writes nothing
    open_store(endpoint=url, create=True).close()
    assert {g: n for g, n in _snapshot(url).items() if g != MANIFEST_GRAPH} == \
        {g: n for g, n in before.items() if g != MANIFEST_GRAPH}
