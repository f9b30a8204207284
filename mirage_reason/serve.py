"""Expose any Backend as a small OpenAI-compatible server (``/v1/completions``, ``/v1/chat/completions``,
``/v1/models``), so the OpenAI client path runs end to end on a laptop or in CI against a real local model.

Requests that arrive while the model is busy are coalesced into one batched ``generate`` call when they share stop
strings and sampling parameters. It is a test and demo server: no streaming, no auth, one choice per prompt.

    python -m mirage_reason.serve --model smollm2 --port 8000
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mirage_kg import MirageError

from mirage_reason.backends.base import Backend, Completion, GenerationParams, normalize_stop
from mirage_reason.errors import BackendError

__all__ = ["BackendServer", "main", "make_server", "serve", "start_in_thread"]

_OPENAI_DEFAULT_MAX_TOKENS = 16  # what OpenAI and vLLM use when a request names no max_tokens


class RequestError(ValueError):
    """A request the server cannot honour; becomes an OpenAI-style error response."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Job:
    prompts: list[str]
    stop: tuple[str, ...]
    params: GenerationParams
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Completion] | None = None
    error: BaseException | None = None


class _Batcher:
    """One worker thread owns the backend; jobs that queue up while it works are run together next time."""

    def __init__(self, backend: Backend, *, max_batch: int, window_s: float) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.window_s = window_s
        self.batch_sizes: list[int] = []  # prompts per generate call, for tests and logs
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="mirage-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompts: list[str], stop: tuple[str, ...], params: GenerationParams) -> list[Completion]:
        job = _Job(prompts, stop, params)
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, closing = self._collect(first)
            groups: dict[tuple[tuple[str, ...], GenerationParams], list[_Job]] = {}
            for job in jobs:
                groups.setdefault((job.stop, job.params), []).append(job)
            for (stop, params), group in groups.items():
                self._run_group(group, stop, params)
            if closing:
                return

    def _collect(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs = [first]
        deadline = time.monotonic() + self.window_s
        while sum(len(j.prompts) for j in jobs) < self.max_batch:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _run_group(self, group: list[_Job], stop: tuple[str, ...], params: GenerationParams) -> None:
        prompts = [p for job in group for p in job.prompts]
        try:
            self.batch_sizes.append(len(prompts))
            completions = self.backend.generate(prompts, stop, params)
        except BaseException as exc:  # handed to every waiting request, which turns it into an HTTP error
            for job in group:
                job.error = exc
                job.done.set()
            return
        start = 0
        for job in group:
            job.result = completions[start : start + len(job.prompts)]
            start += len(job.prompts)
            job.done.set()


class BackendServer(ThreadingHTTPServer):
    """An HTTP server bound to one backend; ``model_name`` is the id it lists and accepts."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        backend: Backend,
        *,
        model_name: str | None = None,
        max_batch: int = 32,
        window_s: float = 0.005,
        verbose: bool = False,
    ) -> None:
        super().__init__(address, _Handler)
        self.backend = backend
        self.model_name = model_name or backend.name
        self.verbose = verbose
        self.batcher = _Batcher(backend, max_batch=max_batch, window_s=window_s)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def server_close(self) -> None:
        super().server_close()
        self.batcher.close()

    def stop(self) -> None:
        """Stop a server started with :func:`start_in_thread` and free its port."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: BackendServer
    protocol_version = "HTTP/1.1"  # keep-alive, so clients reuse connections

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            model = {"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "mirage-kg"}
            self._send(200, {"object": "list", "data": [model]})
        elif path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        else:
            self._error(RequestError(f"no route GET {path}", 404))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self._body()
            if path == "/v1/completions":
                self._send(200, self._completions(body))
            elif path == "/v1/chat/completions":
                self._send(200, self._chat(body))
            else:
                raise RequestError(f"no route POST {path}", 404)
        except RequestError as exc:
            self._error(exc)
        except BackendError as exc:
            self._error(RequestError(str(exc), 503 if exc.retryable else 500))
        except Exception as exc:  # an HTTP answer is more useful to the client than a dropped connection
            self._error(RequestError(f"{type(exc).__name__}: {exc}", 500))

    # -- endpoints -----------------------------------------------------------------------------------------------

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise RequestError("'prompt' must be a string or a non-empty list of strings (token ids unsupported)")
        completions = self._generate(body, prompts)
        choices = [
            {"index": i, "text": c.text, "logprobs": None, "finish_reason": c.finish_reason, "stop_reason": c.stop}
            for i, c in enumerate(completions)
        ]
        return self._envelope("text_completion", "cmpl", choices, completions)

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise RequestError("each message needs a string 'role' and a string 'content'")
        backend = self.server.backend
        if body.get("continue_final_message"):
            last = messages[-1]["content"]
            rendered = backend.format_chat(messages, add_generation_prompt=False)
            end = rendered.rfind(last) if last else -1
            if end < 0:
                raise RequestError("continue_final_message needs a non-empty last message")
            prompt = rendered[: end + len(last)]  # drop the end-of-turn so the model carries on the same message
        else:
            prompt = backend.format_chat(messages, add_generation_prompt=body.get("add_generation_prompt", True))
        completion = self._generate(body, [prompt])[0]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": completion.text},
            "logprobs": None,
            "finish_reason": completion.finish_reason,
            "stop_reason": completion.stop,
        }
        return self._envelope("chat.completion", "chatcmpl", [choice], [completion])

    # -- helpers -------------------------------------------------------------------------------------------------

    def _generate(self, body: dict[str, Any], prompts: list[str]) -> list[Completion]:
        model = body.get("model")
        if model is not None and model != self.server.model_name:
            served = self.server.model_name
            raise RequestError(f"model {model!r} is not served here; this server serves {served!r}", 404)
        if body.get("stream"):
            raise RequestError("streaming is not supported by this server")
        if body.get("n", 1) != 1:
            raise RequestError("only n=1 is supported")
        stop = body.get("stop") or []
        if not isinstance(stop, (str, list)) or (isinstance(stop, list) and not all(isinstance(s, str) for s in stop)):
            raise RequestError("'stop' must be a string or a list of strings")
        return self.server.batcher.submit(prompts, normalize_stop(stop), _params(body))

    def _envelope(
        self, obj: str, prefix: str, choices: list[dict[str, Any]], completions: Sequence[Completion]
    ) -> dict[str, Any]:
        prompt_tokens = sum(c.prompt_tokens for c in completions)
        completion_tokens = sum(c.completion_tokens for c in completions)
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": obj,
            "created": int(time.time()),
            "model": self.server.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(f"request body is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        return body

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, exc: RequestError) -> None:
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        self._send(exc.status, {"error": {"message": str(exc), "type": kind, "param": None, "code": exc.status}})


def _params(body: dict[str, Any]) -> GenerationParams:
    """OpenAI/vLLM request fields -> GenerationParams, with the OpenAI defaults for anything left out or null."""

    def get(key: str, default: Any) -> Any:
        value = body.get(key)
        return default if value is None else value

    try:
        params = GenerationParams(
            max_new_tokens=int(get("max_tokens", get("max_completion_tokens", _OPENAI_DEFAULT_MAX_TOKENS))),
            temperature=float(get("temperature", 1.0)),
            top_p=float(get("top_p", 1.0)),
            top_k=max(int(get("top_k", -1)), 0),  # vLLM's -1 means "off", which is 0 here
            repetition_penalty=float(get("repetition_penalty", 1.0)),
            seed=None if body.get("seed") is None else int(body["seed"]),
        )
    except (TypeError, ValueError) as exc:
        raise RequestError(f"bad sampling parameter: {exc}") from exc
    if params.max_new_tokens < 1:
        raise RequestError("max_tokens must be at least 1")
    return params


def make_server(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    model_name: str | None = None,
    max_batch: int = 32,
    verbose: bool = False,
) -> BackendServer:
    """Bind a server (``port=0`` picks a free port) without starting it."""
    return BackendServer((host, port), backend, model_name=model_name, max_batch=max_batch, verbose=verbose)


def serve(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    model_name: str | None = None,
    max_batch: int = 32,
    verbose: bool = True,
) -> None:
    """Serve ``backend`` until interrupted."""
    server = make_server(backend, host, port, model_name=model_name, max_batch=max_batch, verbose=verbose)
    print(f"serving {server.model_name!r} at {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def start_in_thread(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    model_name: str | None = None,
    max_batch: int = 32,
    verbose: bool = False,
) -> tuple[BackendServer, str]:
    """Serve from a daemon thread; returns the server (call ``server.stop()``) and its ``.../v1`` base URL."""
    server = make_server(backend, host, port, model_name=model_name, max_batch=max_batch, verbose=verbose)
    # A short poll interval makes stop() return quickly, which matters in test suites that start many servers.
    server._thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="mirage-serve", daemon=True
    )
    server._thread.start()
    return server, server.base_url


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mirage_reason.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="hub id, local directory or 'smollm2' (default)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--served-model-name", help="the model id clients send (default: --model)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device-map", default="auto", help="'auto' (GPU + accelerate only), 'none', or a device")
    parser.add_argument("--threads", type=int, help="CPU threads for torch while generating (default: every usable core)")
    parser.add_argument("--gguf-file", help="load this GGUF file from the --model directory")
    parser.add_argument("--think", choices=["keep", "strip"], default="keep")
    parser.add_argument("--max-batch", type=int, default=32, help="most prompts per generate call")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="do not log requests")
    args = parser.parse_args(argv)

    try:
        from mirage_reason.backends.transformers_backend import TransformersBackend

        backend = TransformersBackend(
            args.model,
            device_map=None if args.device_map == "none" else args.device_map,
            dtype=args.dtype,
            trust_remote_code=args.trust_remote_code,
            threads=args.threads,
            gguf_file=args.gguf_file,
            think=args.think,
            max_batch_size=args.max_batch,
        )
    except MirageError as exc:
        parser.exit(1, f"error: {exc}\n")
    serve(backend, args.host, args.port, model_name=args.served_model_name or args.model,
          max_batch=args.max_batch, verbose=not args.quiet)


if __name__ == "__main__":
    main()
