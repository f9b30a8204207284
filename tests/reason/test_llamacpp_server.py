"""OpenAIBackend and the whole pipeline against a third-party server: llama.cpp's own (llama-cpp-python's
``llama_cpp.server``) on the same SmolLM2 GGUF, started for real on loopback. It names neither the stop string that
fired nor EOS, which is exactly the case ``Completion.stop_unknown`` exists for."""

from __future__ import annotations

from typing import Any

import pytest

from mirage_reason.backends import GenerationParams

pytestmark = [pytest.mark.llm, pytest.mark.server, pytest.mark.slow]

GREEDY = GenerationParams(max_new_tokens=24, temperature=0.0)
QUESTIONS = ("What is diabetes?", "List three symptoms of the flu, one per line.", "Name a drug for asthma.")


def test_completions_stops_limits_and_usage(llamacpp_server: str) -> None:
    from mirage_reason.backends.openai_backend import OpenAIBackend

    with OpenAIBackend(llamacpp_server) as client:  # model=None: asks /v1/models
        assert client.model == "smollm2"
        prompts = [client.format_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
        stopped = client.generate(prompts, stop=["\n", "."], params=GREEDY)  # three concurrent requests
        again = client.generate(prompts, stop=["\n", "."], params=GREEDY)
        [cut] = client.generate(prompts[:1], params=GenerationParams(max_new_tokens=3, temperature=0.0))
    assert again == stopped  # greedy on one server: deterministic
    for completion in stopped:
        assert completion.text and "\n" not in completion.text and "." not in completion.text
        assert 0 < completion.completion_tokens <= GREEDY.max_new_tokens and completion.prompt_tokens > 5
        if completion.finish_reason == "stop":
            assert completion.stop is None and completion.stop_unknown  # llama.cpp does not say which
    assert any(c.finish_reason == "stop" for c in stopped)
    assert cut.finish_reason == "length" and cut.completion_tokens == 3 and not cut.stop_unknown
    assert stopped[0].text.startswith(cut.text.strip()[:5])


def test_chat_mode(llamacpp_server: str) -> None:
    from mirage_reason.backends.openai_backend import OpenAIBackend

    with OpenAIBackend(llamacpp_server, "smollm2", mode="chat") as client:
        [answer] = client.generate([client.format_chat([{"role": "user", "content": QUESTIONS[0]}])], params=GREEDY)
    assert "diabet" in answer.text.lower() and answer.completion_tokens > 0


def test_ask_pipeline_over_llama_cpp(llamacpp_server: str) -> None:
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.backends.openai_backend import OpenAIBackend
    from mirage_reason.pipeline.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.pipeline.coordinator import Mirage

    kg = KnowledgeGraph(demo_store())
    config = MirageConfig(**{**SMALL_MODEL_BUDGETS, "seed": 3, "n_q": 2, "max_turns": 2})
    with OpenAIBackend(llamacpp_server, "smollm2") as client:
        answer = Mirage(kg, client, config).answer("What medication treats asthma?")
    record: dict[str, Any] = answer.to_json()
    assert record["answer"] and record["chains"] and record["sub_questions"]
    assert record["tokens"]["chains"] > 0 and record["timings"]["chains"] > 0
    for claim in record["claims"]:  # every claim rests on graph paths
        assert claim["citations"] and all(c["nodes"] for c in claim["citations"])


def test_llama_cpp_in_process_and_out_of_process_agree(llamacpp_server: str, llamacpp_backend: Any) -> None:
    """The same engine on the same GGUF, in this process and behind its server: the same greedy text."""
    from mirage_reason.backends.openai_backend import OpenAIBackend

    prompts = [llamacpp_backend.format_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    local = [llamacpp_backend.generate([p], stop=["\n"], params=GREEDY)[0] for p in prompts]
    with OpenAIBackend(llamacpp_server, "smollm2") as client:
        assert client.format_chat([{"role": "user", "content": QUESTIONS[0]}]).endswith(prompts[0].split("user\n")[-1])
        remote = [client.generate([p], stop=["\n"], params=GREEDY)[0] for p in prompts]
    assert [c.text for c in remote] == [c.text for c in local]
    assert [c.completion_tokens for c in remote] == [c.completion_tokens for c in local]
