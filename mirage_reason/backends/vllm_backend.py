"""vLLM offline (``vllm.LLM``) as an in-process backend: every request its own ``SamplingParams`` (max tokens, stop
strings, seed), prefix caching on, tensor parallelism across the GPUs of one node. An optional extra
(``pip install 'mirage-kg[vllm]'``, GPU only); nothing else needs it installed.

vLLM's engine is continuous batching with paged KV memory: requests join and leave the running batch at every step.
One engine thread adds what was submitted and steps the engine (``LLMEngine.add_request`` / ``step``, vLLM's own
serving loop API), completing each future the step its request finishes. Output constraints are vLLM's structured
outputs (``StructuredOutputsParams(json=...)`` / ``choice=[...]``; ``GuidedDecodingParams`` on vLLM before 0.10).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

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


class VLLMBackend(BackendBase):
    """A model served by vLLM in this process; ``model`` is a hub id or local directory (QwQ-32B by default).

    ``tensor_parallel_size`` splits the model over that many GPUs; ``enable_prefix_caching`` (on) makes a chain's
    next turn reuse its previous prompt's KV blocks. Other keyword arguments go to ``vllm.LLM``.
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
        **llm_kwargs: Any,
    ) -> None:
        self.name = name or model
        self.think: ThinkMode = think
        self.llm = vllm.LLM(model, tensor_parallel_size=tensor_parallel_size,
                            enable_prefix_caching=enable_prefix_caching, **llm_kwargs)
        self._engine = self.llm.llm_engine
        self._ids = itertools.count()
        self._pending: dict[str, tuple[CompletionRequest, Future[Completion]]] = {}
        self._incoming: list[tuple[str, CompletionRequest, Future[Completion]]] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="mirage-vllm", daemon=True)
        self._thread.start()

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._wake:
            if self._closed:
                raise BackendError("the vLLM backend is closed", hint="build a new VLLMBackend")
            self._incoming.append((f"mirage-{next(self._ids)}", request, future))
            self._wake.notify()
        return future

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        tokenizer = self.llm.get_tokenizer()
        if not getattr(tokenizer, "chat_template", None):
            return chatml(messages, add_generation_prompt=add_generation_prompt)
        return str(tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                 add_generation_prompt=add_generation_prompt))

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
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

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._incoming and not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    for _, future in self._pending.values():
                        future.cancel()
                    return
                incoming, self._incoming = self._incoming, []
            for request_id, request, future in incoming:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    self._engine.add_request(request_id, request.prompt, self._sampling(request))
                except Exception as exc:  # a bad request (too long, bad settings): fail it, keep serving
                    future.set_exception(BackendError(f"vLLM refused the request: {exc}",
                                                      hint="shorten the prompt or lower max_new_tokens"))
                    continue
                self._pending[request_id] = (request, future)
            if not self._pending:
                continue
            try:
                outputs = self._engine.step()
            except Exception as exc:  # the engine itself failed: every request in it fails
                error = BackendError(f"vLLM failed: {exc}", retryable=True, hint="check GPU memory and the log")
                for _, future in self._pending.values():
                    future.set_exception(error)
                self._pending.clear()
                continue
            for output in outputs:
                if output.finished and output.request_id in self._pending:
                    request, future = self._pending.pop(output.request_id)
                    future.set_result(self._completion(request, output))

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
