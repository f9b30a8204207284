"""The contract every backend meets, run over each of them: the scripted double, transformers (a tiny random model
and SmolLM2), llama.cpp in process (SmolLM2's own GGUF), the OpenAI client against llama-cpp-python's server, and llama.cpp's own
C++ server (``llama-server``, parallel slots) managed by ``LlamaServerBackend``.

Requests go in one by one and come back as futures; stop strings cut the text and are reported (or flagged as
unknown, as llama.cpp does); no completion holds more tokens than it asked for, nor does any chain more than its
budget; a seed makes sampling reproducible and different seeds sample differently; ``<think>`` blocks are kept or
stripped; failures are ``BackendError`` saying whether a retry may help, and the backend keeps serving after one.
Output constraints (a JSON schema, a list of choices): a backend that says it honours a kind always hands back text
that parses and stays inside it, with max tokens, stop strings and seeds as exact as without; one that does not
fails the request saying so, never decoding unconstrained.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from fake_kg import FakeKG

from mirage_reason.backends import (
    Backend,
    Completion,
    CompletionRequest,
    GenerationParams,
    OutputConstraint,
    ScriptedBackend,
    can_constrain,
)
from mirage_reason.backends.base import strip_think
from mirage_reason.pipeline.chain import ChainRunner, ChainSpec
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.errors import BackendError

GREEDY = GenerationParams(max_new_tokens=12, temperature=0.0)
PATTERN = "<think>a</think>b\n" * 6 + "<think>a"  # a model that copies patterns closes the block


@dataclass
class Subject:
    backend: Backend
    samples: bool = True  # the engine samples (the scripted double does not)
    context_limit: bool = True  # a prompt can be too long for it


def _scripted() -> ScriptedBackend:
    return ScriptedBackend(lambda p: "one two. three four five six seven eight nine ten eleven twelve thirteen")


@pytest.fixture(params=["scripted", "tiny", pytest.param("smollm2", marks=pytest.mark.llm),
                        pytest.param("llamacpp", marks=pytest.mark.llm),
                        pytest.param("openai-llamacpp", marks=[pytest.mark.llm, pytest.mark.server]),
                        pytest.param("llamacpp-server", marks=[pytest.mark.llm, pytest.mark.server])])  # fmt: skip
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "scripted":
        yield Subject(_scripted(), samples=False, context_limit=False)
    elif request.param == "tiny":
        yield Subject(request.getfixturevalue("tiny_backend"))
    elif request.param == "smollm2":
        yield Subject(request.getfixturevalue("smollm2_backend"))
    elif request.param == "llamacpp":
        yield Subject(request.getfixturevalue("llamacpp_backend"))
    elif request.param == "llamacpp-server":
        yield Subject(request.getfixturevalue("llama_server_backend"))
    else:
        from mirage_reason.backends.openai_backend import OpenAIBackend

        # a long timeout: on a loaded CI machine one request may queue behind others at the single-slot server
        # llama-cpp-python's server takes a GBNF grammar on its completions API (and ignores response_format)
        with OpenAIBackend(request.getfixturevalue("llamacpp_server"), "smollm2", backoff=0.01, timeout=600,
                           structured="grammar") as client:
            yield Subject(client)


def _prompt(backend: Backend, text: str = "Name three fruits.") -> str:
    return backend.format_chat([{"role": "user", "content": text}])


def test_submit_hands_back_a_future_per_request(subject: Subject) -> None:
    backend = subject.backend
    assert isinstance(backend, Backend) and isinstance(backend.name, str) and backend.name
    futures = [backend.submit(CompletionRequest(p, (), GREEDY)) for p in (_prompt(backend), "Once upon a time")]
    assert all(isinstance(f, Future) for f in futures)
    for future in futures:
        completion = future.result(timeout=120)
        assert isinstance(completion, Completion) and completion.prompt_tokens > 0
        assert 0 < completion.completion_tokens <= GREEDY.max_new_tokens
        assert completion.finish_reason in ("stop", "length")
    assert backend.generate([], params=GREEDY) == []


def test_stop_strings_cut_the_text_and_are_reported(subject: Subject) -> None:
    backend = subject.backend
    params = GenerationParams(max_new_tokens=24, temperature=0.0)
    prompts = [_prompt(backend, "Write two short sentences about the sea."), "One. Two. Three. Four. Five."]
    for prompt in prompts:
        [whole] = backend.generate([prompt], params=params)  # alone, as the stopped run below will be
        words = whole.text.split()
        middle = len(whole.text) // 2
        # the greedy text holds it for sure: the completion must end right before its first occurrence
        stop = words[2] if len(words) >= 3 else whole.text[middle:middle + 2]
        assert stop.strip() or stop, whole
        [cut] = backend.generate([prompt], stop=[stop, "never-generated-stop"], params=params)
        assert stop not in cut.text and whole.text.startswith(cut.text)
        assert cut.finish_reason == "stop" and cut.completion_tokens <= whole.completion_tokens
        assert cut.stop == stop or (cut.stop is None and cut.stop_unknown)
    [free] = backend.generate([prompts[1]], stop=["never-generated-stop"], params=GenerationParams(max_new_tokens=3))
    assert free.stop is None and not (free.finish_reason == "length" and free.stop_unknown)


@pytest.mark.parametrize("limit", [1, 5])
def test_no_completion_exceeds_its_max_tokens(subject: Subject, limit: int) -> None:
    backend = subject.backend
    params = GenerationParams(max_new_tokens=limit, temperature=0.0)
    [completion] = backend.generate(["Count: one two three four five six seven eight nine ten"], params=params)
    assert completion.completion_tokens <= limit
    assert completion.finish_reason == "length" or completion.completion_tokens < limit


def test_max_tokens_holds_when_a_character_spans_tokens(subject: Subject) -> None:
    # Chinese characters take several byte-level tokens; llama-cpp-python's own loop overran max_tokens by 1-2
    # tokens whenever the limit fell inside one (ExplainCPE chains failed on it).
    backend = subject.backend
    if type(backend).__name__ == "OpenAIBackend":  # the C++ server (LlamaServerBackend) holds it: tested
        pytest.skip("llama-cpp-python's server has the same overrun in its own loop; the chain runner refuses such a "
                    "completion with an error that names the backend (test_chain)")
    prompt = _prompt(backend, "请用中文详细回答：感冒的症状有哪些？请写很多汉字。")
    for seed in range(4):
        for limit in (3, 8, 13):
            params = GenerationParams(max_new_tokens=limit, temperature=0.9, seed=seed)
            completion = backend.submit(CompletionRequest(prompt, (), params)).result(timeout=120)
            assert completion.completion_tokens <= limit, (seed, limit, completion)


def test_no_chain_exceeds_max_chain_tokens(subject: Subject) -> None:
    config = MirageConfig(max_new_tokens=8, max_chain_tokens=20, max_turns=10, rank_by_question=False, seed=1)
    runner = ChainRunner(FakeKG(), subject.backend, config)
    results = runner.run([ChainSpec("What are the symptoms of the flu?", tag=(0, 0, s)) for s in range(2)])
    for result in results:
        assert 0 < result.completion_tokens <= config.max_chain_tokens
        assert result.finish_reason in ("answered", "max_tokens", "max_turns")


def test_a_seed_reproduces_a_sample_and_other_seeds_sample_differently(subject: Subject) -> None:
    if not subject.samples:
        pytest.skip("the scripted double does not sample")
    backend = subject.backend
    prompt = _prompt(backend, "Tell me a one-line story about a cat.")

    def sample(seed: int) -> str:
        params = GenerationParams(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0, seed=seed)
        return backend.submit(CompletionRequest(prompt, (), params)).result(timeout=120).text

    sample(0)  # the engine now holds this prompt as it will for the rest (llama.cpp reuses the prefix)
    first = sample(1)
    others = {sample(s) for s in (2, 3, 4)}
    assert sample(1) == first
    assert others - {first}, "four seeds sampled the same text"


def test_think_blocks_are_kept_or_stripped(subject: Subject) -> None:
    backend = subject.backend
    params = GenerationParams(max_new_tokens=16, temperature=0.0)
    if isinstance(backend, ScriptedBackend):
        backend = ScriptedBackend(lambda p: "a</think>b <think>c")
    assert getattr(backend, "think") == "keep"
    [kept] = backend.generate([PATTERN], params=params)
    backend.think = "strip"  # type: ignore[attr-defined]
    try:
        [stripped] = backend.generate([PATTERN], params=params)
    finally:
        backend.think = "keep"  # type: ignore[attr-defined]
    assert stripped.text == strip_think(kept.text)
    if "</think>" in kept.text:  # the finished block went, with its reasoning
        assert stripped.text == kept.text.split("</think>", 1)[1].lstrip()


def test_errors_say_whether_a_retry_helps_and_the_backend_goes_on(subject: Subject) -> None:
    backend = subject.backend
    if subject.context_limit:
        failing: Any = backend.submit(CompletionRequest("word " * 10_000, (), GenerationParams(max_new_tokens=4)))
    else:
        backend = ScriptedBackend(["only one"])
        backend.generate(["first"])
        failing = backend.submit(CompletionRequest("second"))
    error = failing.exception(timeout=120)
    assert isinstance(error, BackendError) and error.retryable is False and str(error)
    if subject.context_limit:
        assert backend.generate(["Hello"], params=GREEDY)[0].completion_tokens > 0


# -- output constraints -------------------------------------------------------------------------------------------------

FRUIT = OutputConstraint(json_schema={"type": "object", "properties": {
    "fruit": {"enum": ["apple", "pear", "plum"]},
    "colours": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 12}, "maxItems": 2}},
    "required": ["fruit", "colours"], "additionalProperties": False})
LETTER = OutputConstraint(choices=("A", "B", "C"))


def _constrained(subject: Subject) -> Backend:
    """The subject, or for the scripted double one that plays a constraining engine with scripted text."""
    if isinstance(subject.backend, ScriptedBackend):
        return ScriptedBackend(lambda p: "B" if "letter" in p else '{"fruit": "pear", "colours": ["green"]}',
                               constraints=("json_schema", "choice"))
    return subject.backend


def _fruit_prompt(backend: Backend) -> str:
    return _prompt(backend, "Pick a fruit and its colours, as JSON.")


def test_constrained_completions_parse_and_stay_inside(subject: Subject) -> None:
    backend = _constrained(subject)
    for constraint, prompt in ((FRUIT, _fruit_prompt(backend)), (LETTER, _prompt(backend, "Pick a letter."))):
        if not can_constrain(backend, constraint.kind):  # it must say so, never decode unconstrained
            error = backend.submit(CompletionRequest(prompt, (), GREEDY, constraint)).exception(timeout=120)
            assert isinstance(error, BackendError) and "cannot honour" in str(error) and not error.retryable
            continue
        for seed in range(3):
            params = GenerationParams(max_new_tokens=48, temperature=1.0, top_p=1.0, top_k=0, seed=seed)
            done = backend.submit(CompletionRequest(prompt, (), params, constraint)).result(timeout=120)
            assert done.finish_reason == "stop" and constraint.check(done.text) is None, done
            assert 0 < done.completion_tokens <= params.max_new_tokens
            if constraint is FRUIT:
                assert constraint.parse(done.text)["fruit"] in ("apple", "pear", "plum")


def test_constrained_completions_keep_max_tokens_stops_and_seeds(subject: Subject) -> None:
    backend = _constrained(subject)
    if not can_constrain(backend, "json_schema"):
        pytest.skip(f"{backend.name} honours no JSON schema (it says so: the case above)")
    prompt = _fruit_prompt(backend)
    short = backend.submit(CompletionRequest(prompt, (), GenerationParams(max_new_tokens=3, temperature=0.0),
                                             FRUIT)).result(timeout=120)
    assert short.completion_tokens <= 3 and short.finish_reason == "length"  # cut: unfinished JSON, and it says so
    assert FRUIT.check(short.text) is not None
    whole = backend.submit(CompletionRequest(prompt, (), GenerationParams(max_new_tokens=48, temperature=0.0),
                                             FRUIT)).result(timeout=120)
    [cut] = backend.generate([prompt], stop=['"colours"'], params=GenerationParams(max_new_tokens=48,
                                                                                    temperature=0.0),
                             constraint=FRUIT)
    assert '"colours"' in whole.text and whole.text.startswith(cut.text) and '"colours"' not in cut.text
    assert cut.finish_reason == "stop" and (cut.stop == '"colours"' or cut.stop_unknown)
    if subject.samples:
        def sample(seed: int) -> str:
            params = GenerationParams(max_new_tokens=48, temperature=1.0, top_p=1.0, top_k=0, seed=seed)
            return backend.submit(CompletionRequest(prompt, (), params, FRUIT)).result(timeout=120).text

        first = sample(11)
        assert sample(11) == first
        assert {sample(s) for s in (12, 13, 14, 15)} - {first}, "five seeds sampled the same constrained text"


def test_an_engine_without_constraints_refuses_them() -> None:
    backend = ScriptedBackend(["{}"])  # plays an engine that has none
    for constraint in (FRUIT, LETTER):
        assert not can_constrain(backend, constraint.kind)
        error = backend.submit(CompletionRequest("x", (), GREEDY, constraint)).exception()
        assert isinstance(error, BackendError) and "cannot honour" in str(error)
    assert backend.calls and backend.generate(["x"])[0].text == "{}"  # unconstrained requests still run


@pytest.mark.llm
@pytest.mark.server
def test_a_server_that_ignores_the_constraint_field_is_caught(llamacpp_server: str) -> None:
    from mirage_reason.backends.openai_backend import OpenAIBackend

    # llama-cpp-python's server ignores response_format on /v1/completions: the text comes back unconstrained
    with OpenAIBackend(llamacpp_server, "smollm2", backoff=0.01, timeout=600) as client:
        prompt = _prompt(client, "Write a haiku about the sea.")
        error = client.submit(CompletionRequest(prompt, (), GenerationParams(max_new_tokens=96, temperature=0.0),
                                                LETTER)).exception(timeout=120)
    assert isinstance(error, BackendError) and "did not hold" in str(error)


@pytest.mark.llm
@pytest.mark.server
@pytest.mark.parametrize("mode, structured", [("chat", "response_format"), ("completions", "llama.cpp")])
def test_openai_client_constrains_through_llama_server(llama_server_backend: Any, mode: str, structured: str) -> None:
    from mirage_reason.backends.openai_backend import OpenAIBackend

    # the OpenAI client against llama.cpp's own server: response_format on its chat API, its json_schema / grammar
    # fields on its completions API
    with OpenAIBackend(llama_server_backend.base_url, llama_server_backend.model, mode=mode, structured=structured,
                       vllm_params=False, backoff=0.01, timeout=600) as client:
        for constraint, prompt in ((FRUIT, _fruit_prompt(client)), (LETTER, _prompt(client, "Pick a letter."))):
            for seed in range(2):
                params = GenerationParams(max_new_tokens=48, temperature=1.0, seed=seed)
                done = client.submit(CompletionRequest(prompt, (), params, constraint)).result(timeout=120)
                assert done.finish_reason == "stop" and constraint.check(done.text) is None, done
