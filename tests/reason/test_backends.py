"""Tests for the backends' shared text rules, the engine thread, the scripted backend, transformers specifics on the
tiny model and SmolLM2, and the OpenAI client against stub HTTP servers (the contract every backend meets is
tests/reason/test_backend_contract.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from mirage_kg.errors import MirageError
from mirage_reason.backends import (
    Backend,
    Completion,
    GenerationParams,
    ScriptedBackend,
    backend_names,
    get_backend,
)
from mirage_reason.backends.base import (
    apply_stop,
    chatml,
    normalize_stop,
    parse_chatml,
    split_think,
    strip_think,
)
from mirage_reason.errors import BackendError, MissingModelError, ReasonerError

GREEDY = GenerationParams(max_new_tokens=20, temperature=0.0)
QUESTIONS = [
    "What is diabetes?",
    "The capital of France is",  # raw text, not a chat prompt: the shortest row, most padding
    "List three symptoms of the flu, one per line.",
]


def chat_prompts(backend: Backend) -> list[str]:
    return [
        backend.format_chat([{"role": "user", "content": QUESTIONS[0]}]),
        QUESTIONS[1],
        backend.format_chat([{"role": "user", "content": QUESTIONS[2]}]),
    ]


def completion_body(text: str, finish: str = "stop", usage: bool = True, **choice: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish, **choice}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- shared text rules ---------------------------------------------------------------------------------------------


def test_apply_stop_cuts_at_the_earliest_stop_and_names_it() -> None:
    assert apply_stop("a. b\nc", ["\n", "."]) == ("a", ".")
    assert apply_stop("abc", ["x"]) == ("abc", None)
    assert apply_stop("x<|KG_QUERY_END|>y", ["<|KG", "<|KG_QUERY_END|>"]) == ("x", "<|KG_QUERY_END|>")
    assert apply_stop("stop at start", ["stop"]) == ("", "stop")


def test_normalize_stop_treats_a_bare_string_as_one_stop() -> None:
    assert normalize_stop("\n\n") == ("\n\n",)
    assert normalize_stop(["a", "", "a", "b"]) == ("a", "b")
    assert normalize_stop(None) == ()


@pytest.mark.parametrize(
    ("text", "reasoning", "answer"),
    [
        ("<think>\nwhy\n</think>\n\nbecause", "why", "because"),
        ("why</think>because", "why", "because"),  # QwQ's template opens <think> inside the prompt
        ("<think>still thinking <|KG_QUERY_BEGIN|>x", "still thinking <|KG_QUERY_BEGIN|>x", ""),
        ("plain answer", "", "plain answer"),
    ],
)
def test_split_think(text: str, reasoning: str, answer: str) -> None:
    assert split_think(text) == (reasoning, answer)


def test_strip_think_keeps_an_unfinished_block_for_the_chain_to_resume() -> None:
    assert strip_think("<think>a</think>b") == "b"
    assert strip_think("<think>a <|KG_QUERY_BEGIN|>x") == "<think>a <|KG_QUERY_BEGIN|>x"


def test_chatml_round_trips_and_detects_a_partial_answer() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi\nthere"}]
    assert parse_chatml(chatml(messages)) == (messages, False)
    assert parse_chatml(chatml(messages, add_generation_prompt=False)) == (messages, False)
    partial = chatml(messages) + "Hello, I"
    assert parse_chatml(partial) == ([*messages, {"role": "assistant", "content": "Hello, I"}], True)
    assert parse_chatml("no markers") == ([{"role": "user", "content": "no markers"}], False)


# -- errors and registry -------------------------------------------------------------------------------------------


def test_error_tree() -> None:
    assert issubclass(ReasonerError, MirageError)
    assert issubclass(BackendError, ReasonerError)
    assert issubclass(MissingModelError, BackendError)
    err = MissingModelError("Qwen/QwQ-32B", "download it")
    assert err.retryable is False and err.hint == "download it" and "Qwen/QwQ-32B" in str(err)


def test_public_api() -> None:
    import mirage_reason.backends as backends

    assert set(backends.__all__) == {
        "Backend", "BackendBase", "Completion", "CompletionRequest", "GenerationParams", "LlamaCppBackend",
        "LlamaServerBackend", "OpenAIBackend", "OutputConstraint", "ScriptedBackend", "ScriptedCall", "ThinkMode",
        "TransformersBackend", "VLLMBackend", "apply_stop", "backend_names", "can_constrain", "chatml", "derive_seed",
        "get_backend", "split_think", "strip_think",
    }  # fmt: skip
    assert backend_names() == ["llamacpp", "llamacpp-server", "openai", "scripted", "transformers", "vllm"]


def test_importing_the_backends_pulls_in_no_llm_stack() -> None:
    code = (
        "import sys, mirage_reason.backends, mirage_reason.pipeline.coordinator; "
        "print(sorted({'torch', 'transformers', 'llama_cpp', 'vllm'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_get_backend_resolves_names_classes_and_instances() -> None:
    scripted = get_backend("scripted", script=["x"])
    assert isinstance(scripted, ScriptedBackend) and isinstance(scripted, Backend)
    assert get_backend(scripted) is scripted
    assert isinstance(get_backend(ScriptedBackend, script=["x"]), ScriptedBackend)
    names = "llamacpp, llamacpp-server, openai, scripted, transformers, vllm"
    with pytest.raises(ValueError, match=f"choose one of {names}"):
        get_backend("nope")
    with pytest.raises(TypeError):
        get_backend(scripted, script=["y"])
    with get_backend("openai", base_url="http://127.0.0.1:1", model="m") as openai:
        assert openai.name == "openai:m"


# -- the engine thread ---------------------------------------------------------------------------------------------


def test_engine_thread_batches_compatible_requests_and_fails_only_the_broken_batch() -> None:
    from mirage_reason.backends import CompletionRequest
    from mirage_reason.backends.base import EngineThread

    seen: list[list[str]] = []
    gate = threading.Event()

    def run(requests: list[CompletionRequest]) -> list[Completion]:
        gate.wait(5)
        seen.append([r.prompt for r in requests])
        if any(r.prompt == "boom" for r in requests):
            raise RuntimeError("engine fell over")
        return [Completion(r.prompt.upper(), 1, 1, "stop") for r in requests]

    engine = EngineThread(run, name="test", max_batch=2, compatible=lambda a, b: a.stop == b.stop)
    futures = [engine.submit(CompletionRequest(p, stop)) for p, stop in
               [("first", ()), ("a", ()), ("x", (".",)), ("b", ()), ("boom", (".",))]]
    gate.set()
    assert futures[0].result(5).text == "FIRST" and futures[1].result(5).text == "A"
    assert futures[3].result(5).text == "B" and futures[2].exception(5) is not None
    error = futures[4].exception(5)
    assert isinstance(error, BackendError) and not error.retryable and "engine fell over" in str(error)
    assert seen[0] == ["first", "a"] and sorted(map(tuple, seen[1:])) == [("b",), ("x", "boom")]
    engine.close()
    with pytest.raises(BackendError, match="closed"):
        engine.submit(CompletionRequest("late"))


def test_derive_seed_is_stable_and_distinct() -> None:
    from mirage_reason.backends import derive_seed

    assert derive_seed(None, 1) is None
    seeds = {derive_seed(7, "chain", (0, 0, s), "q", 0) for s in range(50)}
    assert len(seeds) == 50 and derive_seed(7, "x") == derive_seed(7, "x") != derive_seed(8, "x")
    assert all(0 <= s < 2**31 for s in seeds if s is not None)


def test_generate_gives_each_prompt_its_own_seed() -> None:
    backend = ScriptedBackend(["a"], cycle=True)
    from mirage_reason.backends import BackendBase

    BackendBase.generate(backend, ["p", "p", "p"], params=GenerationParams(seed=5))
    assert [c.params.seed for c in backend.calls] == [5, 6, 7]


# -- ScriptedBackend -----------------------------------------------------------------------------------------------


def test_scripted_backend_honours_stops_and_limits_and_records_calls() -> None:
    backend = ScriptedBackend(["look <|KG_QUERY_BEGIN|>fever<|KG_QUERY_END|> more", "no stop here", "a b c d e f"])
    out = backend.generate(["p1", "p2"], stop=["<|KG_QUERY_END|>"], params=GenerationParams(max_new_tokens=50))
    assert out[0] == Completion("look <|KG_QUERY_BEGIN|>fever", 1, 2, "stop", "<|KG_QUERY_END|>")
    assert out[1] == Completion("no stop here", 1, 3, "stop", None)
    [short] = backend.generate(["p3 long"], params=GenerationParams(max_new_tokens=3))
    assert short == Completion("a b c", 2, 3, "length", None)
    assert backend.batch_sizes == [2, 1]
    assert backend.prompts == ["p1", "p2", "p3 long"]
    assert backend.calls[0].stop == ("<|KG_QUERY_END|>",)
    with pytest.raises(BackendError, match="ran out after 3"):
        backend.generate(["p4"])


def test_scripted_backend_callable_cycle_and_think() -> None:
    echo = ScriptedBackend(lambda prompt: prompt.upper() + ". rest")
    assert [c.text for c in echo.generate(["ab", "cd"], stop=".")] == ["AB", "CD"]
    cycling = ScriptedBackend(["<think>hmm</think>yes", "no"], cycle=True, think="strip")
    assert [c.text for c in cycling.generate(["a", "b", "c"])] == ["yes", "no", "yes"]


# -- TransformersBackend on the tiny random model ------------------------------------------------------------------


def test_tiny_model_is_fast_and_counts_tokens(tiny_backend: Any) -> None:
    prompts = [f"prompt number {i} " * (i + 1) for i in range(8)]
    start = time.perf_counter()
    out = tiny_backend.generate(prompts, params=GenerationParams(max_new_tokens=32, temperature=0.0))
    elapsed = time.perf_counter() - start
    assert elapsed < 20, f"8 x 32 tokens took {elapsed:.1f} s"  # a few hundred ms normally; only catches hangs
    for prompt, completion in zip(prompts, out):
        assert completion.prompt_tokens == tiny_backend.count_tokens(prompt)
        assert completion.completion_tokens <= 32
        assert completion.finish_reason == "length" or completion.completion_tokens < 32


def test_tiny_model_is_reproducible() -> None:
    pytest.importorskip("transformers")
    from mirage_reason.backends.local_models import tiny_model

    try:
        first, tokenizer = tiny_model(seed=3)
    except MissingModelError as exc:
        pytest.skip(str(exc))
    second, _ = tiny_model(seed=3, tokenizer=tokenizer)
    assert all((a == b).all() for a, b in zip(first.state_dict().values(), second.state_dict().values()))


def test_only_requests_with_the_same_settings_and_seed_share_a_generate_call(tiny_backend: Any) -> None:
    from concurrent.futures import Future

    from mirage_reason.backends import CompletionRequest

    calls: list[int] = []
    original = tiny_backend._run_batch

    def counting(requests: list[Any]) -> list[Completion]:
        calls.append(len(requests))
        return original(requests)

    tiny_backend._engine._run_batch = counting
    try:
        same = GenerationParams(max_new_tokens=6, temperature=0.0)
        busy = GenerationParams(max_new_tokens=48, temperature=0.0)  # other settings: never batched with the rest
        block: Future[Completion] = tiny_backend.submit(CompletionRequest("x " * 400, (), busy))
        futures = [tiny_backend.submit(CompletionRequest(f"p {i}", (), same)) for i in range(3)]
        futures += [tiny_backend.submit(CompletionRequest("p", (), GenerationParams(max_new_tokens=6, seed=s)))
                    for s in (1, 2)]
        block.result()
        [f.result() for f in futures]
    finally:
        tiny_backend._engine._run_batch = original
    assert calls == [1, 3, 1, 1], calls  # the three alike in one call; distinct seeds never share an RNG stream


def test_batched_greedy_equals_one_by_one_on_the_tiny_model_with_a_strong_penalty(tiny_backend: Any) -> None:
    # A strong penalty makes any penalty on padding tokens visible in a random model.
    params = GenerationParams(max_new_tokens=16, temperature=0.0, repetition_penalty=3.0)
    prompts = ["a", "a b c d e f g h i j k l", "<|im_end|> a b"]
    batched = tiny_backend.generate(prompts, params=params)
    assert batched == [tiny_backend.generate([p], params=params)[0] for p in prompts]


def test_repetition_penalty_ignores_left_padding() -> None:
    torch = pytest.importorskip("torch")
    from mirage_reason.backends.transformers_backend import PromptAwareRepetitionPenalty

    input_ids = torch.tensor([[0, 0, 1], [2, 3, 1]])  # row 0 has two pad positions holding token 0
    scores = torch.tensor([[2.0, 2.0, 2.0, 2.0], [2.0, 2.0, -2.0, 2.0]])
    mask = torch.tensor([[0, 0, 1], [1, 1, 1]])
    out = PromptAwareRepetitionPenalty(2.0, mask)(input_ids, scores.clone())
    assert out.tolist() == [[2.0, 1.0, 2.0, 2.0], [2.0, 1.0, -4.0, 1.0]]


def test_repetition_penalty_ignores_padding_in_the_middle() -> None:
    torch = pytest.importorskip("torch")
    from mirage_reason.backends.transformers_backend import PromptAwareRepetitionPenalty

    input_ids = torch.tensor([[3, 0, 1, 2], [3, 2, 1, 0]])  # prompt width 3; row 0 has a pad (token 0) in the middle
    mask = torch.tensor([[1, 0, 1], [1, 1, 1]])
    scores = torch.full((2, 4), 2.0)
    out = PromptAwareRepetitionPenalty(2.0, mask)(input_ids, scores.clone())
    assert out.tolist() == [[2.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]  # generated tokens always count


def test_missing_hub_model_raises_missing_model_error() -> None:
    pytest.importorskip("transformers")
    from mirage_reason.backends.transformers_backend import TransformersBackend

    with pytest.raises(MissingModelError, match="huggingface-cli download Qwen/QwQ-32B") as info:
        TransformersBackend("Qwen/QwQ-32B")
    assert "smollm2" in info.value.hint and not info.value.retryable
    with pytest.raises(MissingModelError, match="no such directory"):
        TransformersBackend("/no/such/model/dir")


# -- TransformersBackend on SmolLM2 --------------------------------------------------------------------------------


@pytest.mark.llm
def test_smollm2_stops_cut_only_the_rows_that_stop(smollm2_backend: Any) -> None:
    prompts = chat_prompts(smollm2_backend)
    free = smollm2_backend.generate(prompts, params=GREEDY)
    stopped = smollm2_backend.generate(prompts, stop=["\n", "Paris"], params=GREEDY)
    fired = []
    for full, cut in zip(free, stopped):
        expected, which = apply_stop(full.text, ["\n", "Paris"])
        assert cut.text == expected  # nothing generated after the stop leaks into the text
        assert cut.stop == which
        if which is not None:
            assert cut.finish_reason == "stop" and cut.completion_tokens < full.completion_tokens
        else:
            assert cut == full
        fired.append(which)
    assert fired[1] == "Paris" and None in fired, fired  # some rows stop, some run to the length limit


@pytest.mark.llm
def test_smollm2_chat_template(smollm2_backend: Any) -> None:
    prompt = smollm2_backend.format_chat([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.llm
def test_smollm2_local_model_cache(smollm2_backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from mirage_reason.backends.local_models import cache_root, smollm2_dir, smollm2_path

    assert smollm2_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf" and smollm2_path().is_file()
    cached = smollm2_dir()
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()
    monkeypatch.setenv("MIRAGE_KG_CACHE", str(tmp_path))
    assert cache_root() == tmp_path


# -- OpenAIBackend failure handling against real (stub) HTTP servers -----------------------------------------------


def _client(url: str, **kwargs: Any) -> Any:
    from mirage_reason.backends.openai_backend import OpenAIBackend

    kwargs.setdefault("backoff", 0.01)
    return OpenAIBackend(url, "m", **kwargs)


def test_openai_sends_the_vllm_request(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (200, completion_body("ok <|KG_QUERY_END|> ignored"), {}))
    params = GenerationParams(max_new_tokens=9, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, seed=1)
    with _client(stub.base_url, api_key="k") as client:
        [out] = client.generate(["prompt"], stop=["<|KG_QUERY_END|>"], params=params)
    assert out == Completion("ok ", 3, 2, "stop", "<|KG_QUERY_END|>")  # a server that echoed the stop string
    assert stub.paths == ["/v1/completions"]
    assert stub.requests[0] == {
        "model": "m", "prompt": "prompt", "max_tokens": 9, "temperature": 0.7, "top_p": 0.8, "n": 1,
        "stop": ["<|KG_QUERY_END|>"], "seed": 1, "top_k": 20, "repetition_penalty": 1.05,
    }  # fmt: skip


def test_openai_reads_stop_reason_reasoning_and_falls_back_without_usage(stub_server: Callable[..., Any]) -> None:
    def reply(hit: int, body: dict[str, Any]) -> Any:
        if "messages" in body:
            message = {"role": "assistant", "content": "Gout.", "reasoning_content": "uric acid"}
            return 200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}, {}
        return 200, completion_body("look up ", usage=False, stop_reason="<|KG_QUERY_END|>"), {}

    stub = stub_server(reply)
    with _client(stub.base_url) as client:
        [out] = client.generate(["a b c"], stop=["<|KG_QUERY_END|>", "x"], params=GREEDY)
    assert out == Completion("look up ", 3, 2, "stop", "<|KG_QUERY_END|>")  # whitespace estimates
    with _client(stub.base_url, mode="chat", think="strip") as chat:
        [answer] = chat.generate([chat.format_chat([{"role": "user", "content": "why?"}])], params=GREEDY)
    assert answer.text == "Gout."
    assert stub.requests[-1]["messages"] == [{"role": "user", "content": "why?"}]
    with _client(stub.base_url, mode="chat") as chat:
        [kept] = chat.generate(["why?"], params=GREEDY)
    assert split_think(kept.text) == ("uric acid", "Gout.")


def test_openai_marks_stops_a_server_does_not_name(stub_server: Callable[..., Any]) -> None:
    bodies = [completion_body("look up "),  # llama.cpp: no stop_reason key at all
              completion_body("done", stop_reason=None),  # vLLM: null = EOS, a known answer
              completion_body("cut", finish="length")]
    stub = stub_server(lambda hit, body: (200, bodies[hit - 1], {}))
    with _client(stub.base_url, concurrency=1) as client:
        silent, eos, cut = (client.generate(["a"], stop=["<|KG_QUERY_END|>"], params=GREEDY)[0] for _ in range(3))
    assert silent.stop is None and silent.stop_unknown
    assert eos.stop is None and not eos.stop_unknown
    assert cut.finish_reason == "length" and not cut.stop_unknown


def test_openai_retries_503_then_succeeds(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (503, {"error": {"message": "busy"}}, {}) if hit <= 2 else
                       (200, completion_body("fine"), {}))  # fmt: skip
    with _client(stub.base_url, max_retries=3) as client:
        [out] = client.generate(["p"], params=GREEDY)
    assert out.text == "fine" and len(stub.requests) == 3


def test_openai_gives_up_after_max_retries(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (503, {"error": {"message": "busy"}}, {}))
    with _client(stub.base_url, max_retries=2) as client, pytest.raises(BackendError) as info:
        client.generate(["p"], params=GREEDY)
    assert info.value.retryable and info.value.status == 503 and len(stub.requests) == 3
    assert "gave up after 3 attempts" in str(info.value) and stub.base_url in str(info.value)


def test_openai_retries_429_honouring_retry_after(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (429, {"error": "slow down"}, {"Retry-After": "0.2"}) if hit == 1 else
                       (200, completion_body("ok"), {}))  # fmt: skip
    start = time.perf_counter()
    with _client(stub.base_url) as client:
        assert client.generate(["p"], params=GREEDY)[0].text == "ok"
    assert time.perf_counter() - start >= 0.2 and len(stub.requests) == 2


def test_openai_does_not_retry_400(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (400, {"error": {"message": "top_k is not allowed"}}, {}))
    with _client(stub.base_url, max_retries=3) as client, pytest.raises(BackendError) as info:
        client.generate(["p"], params=GREEDY)
    err = info.value
    assert not err.retryable and err.status == 400 and len(stub.requests) == 1
    assert "top_k is not allowed" in str(err) and "vllm_params=False" in err.hint
    assert err.endpoint == f"{stub.base_url}/completions"


def test_openai_closed_port_is_a_retryable_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with _client(url, max_retries=1) as client, pytest.raises(BackendError) as info:
        client.generate(["p"], params=GREEDY)
    assert info.value.retryable and f"{url}/completions" in str(info.value)
    assert "llama_cpp.server" in info.value.hint


def test_openai_timeout_is_retryable(stub_server: Callable[..., Any]) -> None:
    def slow(hit: int, body: dict[str, Any]) -> Any:
        time.sleep(0.5)
        return 200, completion_body("late"), {}

    stub = stub_server(slow)
    with _client(stub.base_url, timeout=0.1, max_retries=0) as client, pytest.raises(BackendError) as info:
        client.generate(["p"], params=GREEDY)
    assert info.value.retryable and "timed out" in str(info.value)


def test_openai_sends_a_batch_concurrently(stub_server: Callable[..., Any]) -> None:
    active, peak, lock = [0], [0], threading.Lock()

    def reply(hit: int, body: dict[str, Any]) -> Any:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return 200, completion_body(body["prompt"].upper()), {}

    stub = stub_server(reply)
    with _client(stub.base_url, concurrency=4) as client:
        out = client.generate([f"p{i}" for i in range(8)], params=GREEDY)
    assert [c.text for c in out] == [f"P{i}" for i in range(8)]
    assert peak[0] == 4


def test_openai_base_url_gets_v1(stub_server: Callable[..., Any]) -> None:
    stub = stub_server(lambda hit, body: (200, completion_body("ok"), {}))
    with _client(stub.base_url.removesuffix("/v1")) as client:
        assert client.generate(["p"], params=GREEDY)[0].text == "ok"
    assert stub.paths == ["/v1/completions"]


def test_auto_on_the_cpu_takes_llama_cpp_in_process_else_its_server(tmp_path: Any, monkeypatch: Any) -> None:
    import importlib.util

    from mirage_reason.backends import defaults

    monkeypatch.setattr(defaults, "cuda_available", lambda: False)
    binary = tmp_path / "llama-server"
    binary.write_text("")
    monkeypatch.setenv("MIRAGE_KG_LLAMA_SERVER", str(binary))
    in_process = importlib.util.find_spec("llama_cpp") is not None
    assert defaults.choose_engine("auto", None) == ("llamacpp" if in_process else "llamacpp-server", "smollm2")
    assert defaults.choose_engine("auto", "Qwen/QwQ-32B")[0] == "transformers"  # not a GGUF
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else
                        real_find_spec(name, *a))
    assert defaults.choose_engine("auto", "model.gguf") == ("llamacpp-server", "model.gguf")
    monkeypatch.setenv("MIRAGE_KG_LLAMA_SERVER", str(tmp_path / "missing"))
    assert defaults.choose_engine("auto", None)[0] == "transformers"


def _fake_proc(busy_all: tuple[int, int], busy_self: tuple[int, int]) -> Any:
    """A /proc reader that returns the two samples of an idle-core measurement, in clock ticks."""
    from mirage_reason.backends.cores import CpuTimes

    samples = iter([CpuTimes(busy_all[0], busy_self[0]), CpuTimes(busy_all[1], busy_self[1])])
    return lambda: next(samples)


def _idle(cores: int, others_ticks: int, own_ticks: int) -> Any:
    """idle_cores over a 1-second window at 100 ticks/s where other processes used ``others_ticks`` and we
    ``own_ticks`` of the ``cores * 100`` available."""
    from mirage_reason.backends import cores as cores_module

    times = iter([10.0, 11.0])
    return cores_module.idle_cores(cores=cores, window=1.0, read=_fake_proc((5000, 5000 + others_ticks + own_ticks),
                                                                             (700, 700 + own_ticks)),
                                   sleep=lambda s: None, clock=lambda: next(times), ticks_per_second=100)


@pytest.mark.parametrize(("cores", "others", "own", "threads"), [
    (2, 0, 0, 2),      # an idle machine: every core
    (2, 0, 200, 2),    # only we are busy (our own start-up): still every core, unlike the load average
    (2, 100, 100, 1),  # another process holds a core: one thread
    (2, 200, 0, 1),    # others hold both: at least one
    (2, 900, 0, 1),    # heavy contention (load ~9 on 2 cores): one thread
    (4, 140, 60, 3),   # 1.4 cores busy elsewhere: 2.6 idle -> 3
    (4, 160, 0, 2),    # 2.4 idle -> 2
])
def test_idle_cores_leave_out_our_own_process(cores: int, others: int, own: int, threads: int) -> None:
    """llama.cpp's thread count: usable cores minus what OTHER processes kept busy over the window, rounded,
    at least one, and the reason says so."""
    choice = _idle(cores, others, own)
    assert choice.threads == threads
    assert f"of {cores} cores idle" in choice.reason and "not counting this process" in choice.reason


def test_proc_stat_parsing_counts_busy_ticks_of_our_cpus_and_all_our_threads(tmp_path: Path) -> None:
    from mirage_reason.backends import cores

    stat = ("cpu  30 0 30 900 5 0 0 0 0 0\n"
            "cpu0 10 1 10 400 3 2 1 4 0 0\n"  # busy: user nice system irq softirq steal = 10+1+10+2+1+4
            "cpu1 20 0 20 500 2 0 0 0 0 0\n"
            "intr 1 2 3\n")
    assert cores.parse_proc_stat(stat, {0}) == 28
    assert cores.parse_proc_stat(stat, None) == 28 + 40
    with pytest.raises(ValueError):
        cores.parse_proc_stat(stat, {5})
    # a command name with spaces and parentheses; utime 17, stime 4 are fields 14 and 15
    own = "4242 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 17 4 0 0 20 0 3 0 100 200 300"
    assert cores.parse_self_stat(own) == 21
    (tmp_path / "self").mkdir()
    (tmp_path / "stat").write_text(stat)
    (tmp_path / "self" / "stat").write_text(own)
    read = cores.proc_cpu_times(tmp_path)
    assert read.busy_self == 21 and read.busy_all >= 28


def test_thread_count_override_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """threads= beats $MIRAGE_KG_LLAMA_THREADS beats the measurement; a bad setting is one clear error; where /proc
    cannot be read the load average decides and the reason says so."""
    from mirage_reason.backends import cores

    monkeypatch.setenv(cores.THREADS_ENV, "3")
    assert cores.choose_threads(2) == cores.ThreadChoice(2, "set by threads=")
    assert cores.choose_threads().threads == 3 and cores.THREADS_ENV in cores.choose_threads().reason
    monkeypatch.setenv(cores.THREADS_ENV, "two")
    with pytest.raises(BackendError, match="MIRAGE_KG_LLAMA_THREADS='two'"):
        cores.choose_threads()
    with pytest.raises(BackendError, match="at least 1"):
        cores.choose_threads(0)
    monkeypatch.delenv(cores.THREADS_ENV)

    def unreadable(**_: Any) -> Any:
        raise OSError("no /proc/stat")

    monkeypatch.setattr(cores, "_cached", None)
    monkeypatch.setattr(cores, "idle_cores", unreadable)
    monkeypatch.setattr(cores, "usable_cores", lambda: 4)
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    choice = cores.choose_threads()
    assert choice.threads == 1 and "load average 2.6" in choice.reason and "no /proc/stat" in choice.reason
    monkeypatch.setattr(cores, "idle_cores", lambda **_: cores.ThreadChoice(4, "measured"))
    assert cores.choose_threads().threads == 1  # cached for CACHE_S seconds
    monkeypatch.setattr(cores, "_cached", None)
    assert cores.choose_threads() == cores.ThreadChoice(4, "measured")


def test_in_process_llama_reserves_a_core_for_our_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """A measured count leaves ``reserve`` cores to the caller's own Python (llama.cpp in process samples each
    token in Python), never below 1; a count the user set is taken as it is."""
    from mirage_reason.backends import cores

    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    monkeypatch.setattr(cores, "_cached", None)
    monkeypatch.setattr(cores, "idle_cores", lambda **_: cores.ThreadChoice(2, "2.0 of 2 cores idle"))
    assert cores.choose_threads().threads == 2  # the server: a process of its own
    reserved = cores.choose_threads(reserve=1)
    assert reserved.threads == 1 and "less 1 for this process's own Python" in reserved.reason
    monkeypatch.setattr(cores, "_cached", None)
    monkeypatch.setattr(cores, "idle_cores", lambda **_: cores.ThreadChoice(1, "0.6 of 2 cores idle"))
    assert cores.choose_threads(reserve=1) == cores.ThreadChoice(1, "0.6 of 2 cores idle")
    assert cores.choose_threads(2, reserve=1) == cores.ThreadChoice(2, "set by threads=")


def test_a_seeded_run_takes_its_thread_count_from_the_cores_not_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a seed the count must not follow the load (llama.cpp samples a seed differently on 1 and 2 threads):
    every usable core less ``reserve``; a count the user set still wins; ``ask --seed`` asks for it."""
    from mirage_reason import cli
    from mirage_reason.backends import cores

    monkeypatch.delenv(cores.THREADS_ENV, raising=False)
    monkeypatch.setattr(cores, "_cached", None)
    monkeypatch.setattr(cores, "usable_cores", lambda: 4)
    for idle in (1, 3):
        monkeypatch.setattr(cores, "_cached", None)
        monkeypatch.setattr(cores, "idle_cores", lambda idle=idle, **_: cores.ThreadChoice(idle, f"{idle} idle"))
        assert cores.choose_threads().threads == idle
        steady = cores.choose_threads(steady=True)
        assert steady.threads == 4 and "a seed is set" in steady.reason
        assert cores.choose_threads(reserve=1, steady=True).threads == 3
    assert cores.choose_threads(2, steady=True) == cores.ThreadChoice(2, "set by threads=")
    built: list[dict[str, Any]] = []
    monkeypatch.setattr("mirage_reason.backends.get_backend", lambda engine, **kw: built.append(kw) or object())
    monkeypatch.setattr(cli, "choose_engine", lambda kind, model: ("llamacpp-server", "smollm2"))
    cli.build_backend("llamacpp-server", "smollm2", seeded=True)
    cli.build_backend("llamacpp-server", "smollm2")
    assert built == [{"model": "smollm2", "steady_threads": True}, {"model": "smollm2"}]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_idle_cores_on_this_machine_ignores_our_own_busy_thread() -> None:
    """The real /proc: a thread of ours spinning through the window is not counted against the idle cores (the
    measurement may see others' load, so it checks our share is left out, not an exact count)."""
    import threading

    from mirage_reason.backends import cores

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    try:
        choice = cores.idle_cores(window=0.5)
    finally:
        stop.set()
        worker.join()
    own = float(choice.reason.split("this process's own ")[1].split(" ")[0])
    assert own > 0  # it saw our spinning thread (however little CPU a loaded machine gave it) ...
    assert 1 <= choice.threads <= cores.usable_cores()  # ... and took it out of the busy count


def test_a_string_holding_a_raw_line_break_is_inside_its_schema() -> None:
    # llama-cpp-python's schema converter lets a JSON string hold control characters (SmolLM2 wrote an answer
    # action with a raw line break in its answer): the value is in the schema, so it parses, not "not JSON"
    from mirage_reason.backends.base import OutputConstraint

    schema = OutputConstraint(json_schema={"type": "object", "properties": {"answer": {"type": "string"}},
                                           "required": ["answer"]})
    text = '{"answer": "Panic disorder\nfits"}'
    assert schema.check(text) is None and schema.parse(text) == {"answer": "Panic disorder\nfits"}
    assert schema.check('{"answer": 3}') and schema.check('{"answer": "cut')
