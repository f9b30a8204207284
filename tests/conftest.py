"""Shared fixtures: the public data folder (skipped when absent), a live Oxigraph server, and a store fixture
parametrised over every Store implementation so contract tests run on both."""

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


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public data not available: {path} (see ../shared/data/README.md)")
    return path


@pytest.fixture(scope="session")
def emckg_path() -> Path:
    return shared_file("emckg", "triples.tsv")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OxigraphServer:
    """A real ``oxigraph serve`` process on a free loopback port, with a fresh folder."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("oxigraph")
        if binary is None:
            pytest.skip("the oxigraph server binary is not installed (pip install oxigraph)")
        self.port = _free_port()
        self.dir = tmp
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [binary, "serve", "--location", str(tmp), "--bind", f"127.0.0.1:{self.port}", "--union-default-graph"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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
