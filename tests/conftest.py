"""Shared fixtures: the public data folder (skipped when absent), live SPARQL servers (``oxigraph serve`` with and
without ``--union-default-graph``, and Debian's Virtuoso when installed), and store fixtures parametrised over
the Store implementations so contract tests run on each."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirage_kg.store import OxigraphStore, SparqlStore, Store, ensure_schema

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MIRAGE_KG_SHARED_DATA", ROOT.parent / "shared" / "data"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MIRAGE_KG_PROGRESS", "0")
os.environ.pop("MIRAGE_KG_SERVER", None)  # a developer's warm server must not answer the tests' asks and links
# load and build-default skip their index step (tests that want it pass --index) and, asked, leave out embeddings
os.environ.setdefault("MIRAGE_KG_INDEX", "0")
os.environ.setdefault("MIRAGE_KG_INDEX_EMBEDDINGS", "0")


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public data not available: {path} (see ../shared/data/README.md)")
    return path


@pytest.fixture(scope="session")
def emckg_path() -> Path:
    return shared_file("emckg", "triples.tsv")


def _die_with_parent() -> None:
    """In the server's child process: have the kernel stop it when the test process dies, even by SIGKILL (a
    killed test run must not leave servers behind)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: stop() still runs on a normal exit


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OxigraphServer:
    """A real ``oxigraph serve`` process on a free loopback port, with a fresh folder; ``union`` passes
    ``--union-default-graph``."""

    def __init__(self, tmp: Path, union: bool = True) -> None:
        binary = shutil.which("oxigraph")
        if binary is None:
            pytest.skip("the oxigraph server binary is not installed (pip install oxigraph)")
        self.port = _free_port()
        self.dir = tmp
        self.url = f"http://127.0.0.1:{self.port}"
        flags = ["--union-default-graph"] if union else []
        self.proc = subprocess.Popen(
            [binary, "serve", "--location", str(tmp), "--bind", f"127.0.0.1:{self.port}", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/query", params={"query": "ASK {}"}, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("oxigraph server did not start")

    @property
    def query_url(self) -> str:
        return self.url + "/query"

    def clear(self) -> None:
        httpx.post(self.url + "/update", data={"update": "DROP ALL"}, timeout=30).raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def oxigraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OxigraphServer]:
    server = OxigraphServer(tmp_path_factory.mktemp("oxigraph-server"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oxigraph_server_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OxigraphServer]:
    """``oxigraph serve`` with its default settings: the default graph is not the union of the named graphs."""
    server = OxigraphServer(tmp_path_factory.mktemp("oxigraph-plain"), union=False)
    yield server
    server.stop()


VIRTUOSO_INI = """[Database]
DatabaseFile = {d}/virtuoso.db
ErrorLogFile = {d}/virtuoso.log
LockFile = {d}/virtuoso.lck
TransactionFile = {d}/virtuoso.trx
xa_persistent_file = {d}/virtuoso.pxa
TempStorage = TempDatabase
[TempDatabase]
DatabaseFile = {d}/virtuoso-temp.db
TransactionFile = {d}/virtuoso-temp.trx
[Parameters]
ServerPort = 127.0.0.1:{sql}
DisableUnixSocket = 1
NumberOfBuffers = 10000
MaxDirtyBuffers = 6000
DirsAllowed = ., {d}
[HTTPServer]
ServerPort = 127.0.0.1:{http}
ServerRoot = {d}
ServerThreads = 10
[SPARQL]
ResultSetMaxRows = 10000
MaxQueryExecutionTime = 60
"""


class VirtuosoServer:
    """Debian's Virtuoso 7 (``virtuoso-opensource``, installed by scripts/test.sh when it can be) on free loopback
    ports with a throwaway database and ini under ``tmp``, its SPARQL settings left at their defaults
    (ResultSetMaxRows 10,000); the one setup step a user also takes: SPARQL updates granted to the SPARQL user."""

    def __init__(self, tmp: Path) -> None:
        binary, isql = shutil.which("virtuoso-t"), shutil.which("isql-vt") or shutil.which("isql")
        if binary is None or isql is None:
            pytest.skip("Virtuoso is not installed (Debian: apt-get install virtuoso-opensource; scripts/test.sh "
                        "tries it)")
        self.dir = tmp
        self.sql_port, self.http_port = _free_port(), _free_port()
        (tmp / "virtuoso.ini").write_text(VIRTUOSO_INI.format(d=tmp, sql=self.sql_port, http=self.http_port))
        self.proc = subprocess.Popen([binary, "+foreground", "+configfile", str(tmp / "virtuoso.ini")], cwd=tmp,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        self.query_url = f"http://127.0.0.1:{self.http_port}/sparql"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.skip(f"Virtuoso did not start (exit {self.proc.returncode}; see {tmp}/virtuoso.log)")
            try:
                if httpx.get(self.query_url, params={"query": "ASK { ?s ?p ?o }"}, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        else:
            self.stop()
            pytest.skip("Virtuoso did not answer within 90 s")
        grant = subprocess.run([isql, str(self.sql_port), "dba", "dba", 'exec=GRANT SPARQL_UPDATE TO "SPARQL";'],
                               capture_output=True, text=True, timeout=60)
        if grant.returncode != 0:
            self.stop()
            pytest.skip(f"could not grant SPARQL updates on Virtuoso: {grant.stdout[-300:]} {grant.stderr[-300:]}")
        self.system_graphs = self._graphs()

    def _graphs(self) -> set[str]:
        # On a loaded machine Virtuoso can stop answering for minutes (a checkpoint flushing to a busy disk): fresh-ci
        # once saw six setups in a row time out at 60 s, then every later one pass. Wait for it, up to 5 minutes.
        deadline = time.monotonic() + 300
        while True:
            try:
                answer = httpx.post(self.query_url, headers={"Accept": "application/sparql-results+json"},
                                    data={"query": "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }"}, timeout=60)
                return {b["g"]["value"] for b in answer.json()["results"]["bindings"]}
            except httpx.TimeoutException:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise

    def clear(self) -> None:
        """Drop every graph but Virtuoso's own (DROP ALL would drop those too)."""
        for graph in sorted(self._graphs() - self.system_graphs):
            httpx.post(self.query_url, data={"update": f"DROP SILENT GRAPH <{graph}>"}, timeout=60).raise_for_status()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def virtuoso_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VirtuosoServer]:
    server = VirtuosoServer(tmp_path_factory.mktemp("virtuoso"))
    yield server
    server.stop()


#: every Store the endpoint contract runs on
STORE_KINDS = ["memory", "disk", "oxigraph-server", "oxigraph-server-plain", "virtuoso"]


def open_kind(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Store:
    """A fresh, empty store of ``kind`` with the schema loaded."""
    if kind == "memory":
        opened: Store = OxigraphStore()
    elif kind == "disk":
        opened = OxigraphStore(tmp_path / "store")
    else:
        fixture = {"oxigraph-server": "oxigraph_server", "oxigraph-server-plain": "oxigraph_server_plain",
                   "virtuoso": "virtuoso_server"}[kind]
        server = request.getfixturevalue(fixture)
        server.clear()
        opened = SparqlStore(server.query_url)
    ensure_schema(opened)
    return opened


@pytest.fixture(params=STORE_KINDS)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store with the schema loaded, once per kind of store (embedded in memory and on disk, Oxigraph
    server with and without a union default graph, Virtuoso)."""
    opened = open_kind(request, request.param, tmp_path)
    yield opened
    opened.close()


@pytest.fixture(params=["oxigraph", "sparql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store with the schema loaded, once per Store implementation."""
    if request.param == "oxigraph":
        opened: Store = OxigraphStore(tmp_path / "store")
    else:
        server: OxigraphServer = request.getfixturevalue("oxigraph_server")
        server.clear()
        opened = SparqlStore(server.query_url)
    ensure_schema(opened)
    yield opened
    opened.close()
