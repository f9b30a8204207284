"""vLLM in this process as a backend, through its own asynchronous engine (``vllm.AsyncLLMEngine``: ``AsyncLLM`` on
vLLM's V1 engine): every request its own ``SamplingParams`` (max tokens, stop strings, seed), prefix caching on,
tensor parallelism across the GPUs of one node. An optional extra (``pip install 'mirage-kg[vllm]'``, GPU only);
nothing else needs it installed.

vLLM schedules: its engine is continuous batching with paged KV memory, requests join and leave the running batch at
every step. This adapter only hands each request to ``AsyncLLMEngine.generate`` on an event loop of its own thread
and completes the request's future with the final output; a cancelled future aborts its request in the engine.
Output constraints are vLLM's structured outputs (``StructuredOutputsParams(json=...)`` / ``choice=[...]``;
``GuidedDecodingParams`` on vLLM before 0.10).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from mirage_kg import MissingExtraError

from mirage_reason.backends.base import (
    BackendBase,
    Completion,
    CompletionRequest,
    ThinkMode,
    apply_stop,
    chatml,
    strip_think,
)
from mirage_reason.backends.defaults import DEFAULT_GPU_MODEL
from mirage_reason.errors import BackendError

try:
    import vllm
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtraError("vllm", "vllm") from exc

__all__ = ["VLLMBackend"]

T = TypeVar("T")


class VLLMBackend(BackendBase):
    """A model served by vLLM in this process; ``model`` is a hub id or local directory (QwQ-32B by default).

    ``tensor_parallel_size`` splits the model over that many GPUs; ``enable_prefix_caching`` (on) makes a chain's
    next turn reuse its previous prompt's KV blocks. Other keyword arguments go to ``vllm.AsyncEngineArgs``
    (``gpu_memory_utilization``, ``max_model_len``, ...).
    """

    constraints = frozenset({"json_schema", "choice"})

    def __init__(
        self,
        model: str = DEFAULT_GPU_MODEL,
        *,
        tensor_parallel_size: int = 1,
        enable_prefix_caching: bool = True,
        think: ThinkMode = "keep",
        name: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self.name = name or model
        self.think: ThinkMode = think
        self._ids = itertools.count()
        self._closed = False
        args = vllm.AsyncEngineArgs(model=model, tensor_parallel_size=tensor_parallel_size,
                                    enable_prefix_caching=enable_prefix_caching, **engine_kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mirage-vllm", daemon=True)
        self._thread.start()

        async def start() -> tuple[Any, Any]:  # made on its loop: the engine's output handler is a task of that loop
            engine = vllm.AsyncLLMEngine.from_engine_args(args)
            tokenizer = engine.get_tokenizer()  # a coroutine on some vLLM versions, a plain call on others
            return engine, (await tokenizer) if inspect.isawaitable(tokenizer) else tokenizer

        try:
            self.engine, self._tokenizer = self._call(start())
        except BaseException:
            self._stop_loop()
            raise

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        if self._closed:
            raise BackendError("the vLLM backend is closed", hint="build a new VLLMBackend")
        try:
            sampling = self._sampling(request)
        except Exception as exc:  # bad settings for this engine: this request fails, the engine keeps serving
            failed: Future[Completion] = Future()
            failed.set_exception(BackendError(f"vLLM refused the request: {exc}",
                                              hint="check the request's generation settings"))
            return failed
        return asyncio.run_coroutine_threadsafe(
            self._generate(f"mirage-{next(self._ids)}", request, sampling), self._loop)

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        if not getattr(self._tokenizer, "chat_template", None):
            return chatml(messages, add_generation_prompt=add_generation_prompt)
        return str(self._tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                       add_generation_prompt=add_generation_prompt))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shutdown = getattr(self.engine, "shutdown", None)
        if shutdown is not None:
            self._loop.call_soon_threadsafe(shutdown)
        self._stop_loop()

    # -- internals -----------------------------------------------------------------------------------------------

    async def _generate(self, request_id: str, request: CompletionRequest, sampling: Any) -> Completion:
        """One request through the engine: its final output as a ``Completion``. The engine's failures become
        ``BackendError``s; cancelling the task (the caller cancelled the future) aborts the request in vLLM."""
        final = None
        try:
            async for output in self.engine.generate(request.prompt, sampling, request_id):
                final = output
        except ValueError as exc:  # the request itself: a prompt over the context, a bad setting
            raise BackendError(f"vLLM refused the request: {exc}",
                               hint="shorten the prompt or lower max_new_tokens") from exc
        except Exception as exc:  # the engine failed: every request in it fails
            raise BackendError(f"vLLM failed: {exc}", retryable=True, hint="check GPU memory and the log") from exc
        if final is None or not final.finished:
            raise BackendError(f"vLLM ended request {request_id} without a final output", retryable=True)
        return self._completion(request, final)

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the engine's loop and wait for it (from any thread but the loop's own)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def _sampling(self, request: CompletionRequest) -> Any:
        p = request.params
        extra: dict[str, Any] = {}
        constraint = request.constraint
        if constraint is not None:
            spec = {"choice": list(constraint.choices)} if constraint.choices else {"json": constraint.json_schema}
            structured = getattr(vllm.sampling_params, "StructuredOutputsParams", None)
            if structured is not None:
                extra["structured_outputs"] = structured(**spec)
            else:  # vLLM before 0.10
                extra["guided_decoding"] = vllm.sampling_params.GuidedDecodingParams(**spec)
        return vllm.SamplingParams(
            max_tokens=p.max_new_tokens, temperature=max(0.0, p.temperature), top_p=p.top_p if not p.greedy else 1.0,
            top_k=p.top_k if p.top_k > 0 else 0, repetition_penalty=p.repetition_penalty, seed=p.seed,
            stop=list(request.stop) or None, **extra)

    def _completion(self, request: CompletionRequest, output: Any) -> Completion:
        best = output.outputs[0]
        text, fired = apply_stop(str(best.text), request.stop)
        reported = getattr(best, "stop_reason", None)
        if fired is None and isinstance(reported, str) and reported in request.stop:
            fired = reported
        finish = "length" if best.finish_reason == "length" else "stop"
        if self.think == "strip":
            text = strip_think(text)
        return Completion(text, len(output.prompt_token_ids or ()), len(best.token_ids), finish, fired)
