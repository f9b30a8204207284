"""VLLMBackend on a real GPU (the optional ``vllm`` extra): SmolLM2's weights through vLLM's engine, every request
its own SamplingParams. Marked ``gpu``; skipped, saying why, wherever vLLM or a CUDA GPU is missing."""

from __future__ import annotations

import importlib.util

import pytest

from mirage_reason.backends import CompletionRequest, GenerationParams

pytestmark = [pytest.mark.gpu, pytest.mark.llm]


@pytest.fixture(scope="module")
def vllm_backend():  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed: pip install 'mirage-kg[vllm]' (GPU only)")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from mirage_reason.backends.local_models import smollm2_dir
    from mirage_reason.backends.vllm_backend import VLLMBackend

    backend = VLLMBackend(str(smollm2_dir()), gpu_memory_utilization=0.3, max_model_len=4096)
    yield backend
    backend.close()


def test_vllm_requests_have_their_own_limits_stops_and_seeds(vllm_backend) -> None:  # type: ignore[no-untyped-def]
    prompt = vllm_backend.format_chat([{"role": "user", "content": "Tell me a one-line story about a cat."}])
    short = vllm_backend.submit(CompletionRequest(prompt, (), GenerationParams(max_new_tokens=3, temperature=0.0)))
    stopped = vllm_backend.submit(CompletionRequest(prompt, (" ",), GenerationParams(max_new_tokens=30)))
    seeded = [vllm_backend.submit(CompletionRequest(prompt, (), GenerationParams(max_new_tokens=16, temperature=1.0,
                                                                               seed=s))) for s in (1, 2, 1)]
    assert short.result(120).completion_tokens == 3 and short.result().finish_reason == "length"
    assert " " not in stopped.result(120).text and stopped.result().finish_reason == "stop"
    texts = [f.result(120).text for f in seeded]
    assert texts[0] == texts[2] and texts[0] != texts[1]


def test_vllm_structured_outputs_hold_json_schemas_and_choices(vllm_backend) -> None:  # type: ignore[no-untyped-def]
    from mirage_reason.backends import OutputConstraint

    prompt = vllm_backend.format_chat([{"role": "user", "content": "Name a fruit and a colour as JSON."}])
    schema = OutputConstraint(json_schema={"type": "object", "properties": {
        "fruit": {"type": "string", "enum": ["apple", "pear"]}, "colour": {"type": "string", "maxLength": 12}},
        "required": ["fruit", "colour"], "additionalProperties": False})
    choice = OutputConstraint(choices=("A", "B", "C"))
    for seed in range(4):
        params = GenerationParams(max_new_tokens=64, temperature=1.0, seed=seed)
        for constraint in (schema, choice):
            done = vllm_backend.submit(CompletionRequest(prompt, (), params, constraint)).result(120)
            assert done.finish_reason == "stop" and constraint.check(done.text) is None, done
