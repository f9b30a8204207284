"""The vLLM adapter's own work, on any machine: how ``VLLMBackend`` hands requests to vLLM's asynchronous engine
(``AsyncLLMEngine.generate`` on a loop thread of its own), maps the final output to a ``Completion``, fails one
request without stopping the others, and aborts a cancelled request. vLLM itself needs a CUDA GPU, so here a
stand-in module with vLLM's API shape plays the engine (it streams outputs the way vLLM does, the last one
``finished``); tests/reason/test_vllm_backend.py runs the same adapter on the real engine where there is one."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mirage_reason.backends import CompletionRequest, GenerationParams, OutputConstraint
from mirage_reason.errors import BackendError


@dataclass
class _Out:
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: str | int | None = None


@dataclass
class _RequestOutput:
    request_id: str
    outputs: list[_Out]
    prompt_token_ids: list[int]
    finished: bool


@dataclass
class _Engine:
    """vLLM's ``AsyncLLMEngine`` as the adapter sees it: ``generate`` streams cumulative outputs, the last one
    finished; a prompt containing "FAIL" raises as vLLM does for a request it refuses; "HANG" never finishes
    until the request is aborted (the task cancelled)."""

    args: Any
    loop_threads: set[str] = field(default_factory=set)
    aborted: list[str] = field(default_factory=list)
    shut: bool = False

    def get_tokenizer(self) -> Any:
        async def tokenizer() -> Any:
            return types.SimpleNamespace(chat_template=None)
        return tokenizer()

    async def generate(self, prompt: str, sampling: Any, request_id: str) -> AsyncIterator[_RequestOutput]:
        self.loop_threads.add(threading.current_thread().name)
        if "FAIL" in prompt:
            raise ValueError("the prompt is longer than the model's context")
        words = [w for w in ("alpha", "beta", "gamma", "delta", "epsilon") if w][: sampling.max_tokens]
        try:
            for i in range(len(words)):
                await asyncio.sleep(0)
                if "HANG" in prompt:
                    await asyncio.sleep(3600)
                done = i == len(words) - 1
                yield _RequestOutput(request_id, [_Out(" ".join(words[: i + 1]), list(range(i + 1)),
                                                       ("length" if len(words) == sampling.max_tokens else "stop")
                                                       if done else None)],
                                     list(range(len(prompt.split()))), done)
        except asyncio.CancelledError:
            self.aborted.append(request_id)
            raise

    def shutdown(self) -> None:
        self.shut = True


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    module = types.ModuleType("vllm")
    engines: list[_Engine] = []

    class AsyncEngineArgs:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class AsyncLLMEngine:
        @staticmethod
        def from_engine_args(args: AsyncEngineArgs) -> _Engine:
            asyncio.get_running_loop()  # made on a running loop, as vLLM's output handler needs
            engines.append(_Engine(args))
            return engines[-1]

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            if kwargs["max_tokens"] < 1:
                raise ValueError("max_tokens must be at least 1")
            self.__dict__.update(kwargs)

    class StructuredOutputsParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    module.AsyncEngineArgs = AsyncEngineArgs  # type: ignore[attr-defined]
    module.AsyncLLMEngine = AsyncLLMEngine  # type: ignore[attr-defined]
    module.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    module.sampling_params = types.SimpleNamespace(StructuredOutputsParams=StructuredOutputsParams)  # type: ignore[attr-defined]
    module.engines = engines  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delitem(sys.modules, "mirage_reason.backends.vllm_backend", raising=False)
    yield module
    sys.modules.pop("mirage_reason.backends.vllm_backend", None)


def _request(prompt: str, max_new_tokens: int = 3, stop: tuple[str, ...] = (),
             constraint: OutputConstraint | None = None) -> CompletionRequest:
    return CompletionRequest(prompt, stop, GenerationParams(max_new_tokens=max_new_tokens, seed=1), constraint)


def test_requests_go_through_the_async_engine_each_with_its_settings(fake_vllm: types.ModuleType) -> None:
    vllm_backend = importlib.import_module("mirage_reason.backends.vllm_backend")
    backend = vllm_backend.VLLMBackend("some/model", gpu_memory_utilization=0.3, max_model_len=4096)
    try:
        engine = fake_vllm.engines[0]
        assert engine.args.kwargs == {"model": "some/model", "tensor_parallel_size": 1, "enable_prefix_caching": True,
                                      "gpu_memory_utilization": 0.3, "max_model_len": 4096}
        short = backend.submit(_request("one two three", max_new_tokens=2))
        stopped = backend.submit(_request("four five", max_new_tokens=5, stop=(" gamma",)))
        choice = backend.submit(_request("pick", constraint=OutputConstraint(choices=("A", "B"))))
        done = short.result(10)
        assert (done.text, done.prompt_tokens, done.completion_tokens, done.finish_reason) == \
            ("alpha beta", 3, 2, "length")
        assert stopped.result(10).text == "alpha beta" and stopped.result().stop == " gamma"
        assert choice.result(10).finish_reason == "length"
        assert engine.loop_threads == {"mirage-vllm"}  # every request ran on the adapter's loop thread
        assert backend.format_chat([{"role": "user", "content": "hi"}]).startswith("<|im_start|>user\nhi")
    finally:
        backend.close()
    assert engine.shut
    with pytest.raises(BackendError, match="closed"):
        backend.submit(_request("late"))


def test_a_refused_request_fails_alone_and_a_cancelled_one_is_aborted(fake_vllm: types.ModuleType) -> None:
    vllm_backend = importlib.import_module("mirage_reason.backends.vllm_backend")
    backend = vllm_backend.VLLMBackend("some/model")
    try:
        engine = fake_vllm.engines[0]
        refused = backend.submit(_request("FAIL this one"))
        bad_settings = backend.submit(_request("fine", max_new_tokens=0))
        hanging = backend.submit(_request("HANG here"))
        fine = backend.submit(_request("fine"))
        with pytest.raises(BackendError, match="refused the request: the prompt is longer"):
            refused.result(10)
        with pytest.raises(BackendError, match="max_tokens must be at least 1"):
            bad_settings.result(10)
        assert fine.result(10).text == "alpha beta gamma"
        assert hanging.cancel()
        for _ in range(200):
            if engine.aborted:
                break
            threading.Event().wait(0.01)
        assert len(engine.aborted) == 1 and engine.aborted[0].startswith("mirage-")
    finally:
        backend.close()
