"""Chains in flight on real engines at QwQ-32B scale on one GPU (an H200), with random weights: transformers'
continuous batching, transformers' ``generate``, and vLLM, each for 1, 8 and 32 chains.

    python benchmarks/gpu/bench_engines.py [--engines cb,generate,vllm] [--chains 1,8,32] [--json]
    python benchmarks/gpu/bench_engines.py --dry-run     # a tiny model on the CPU in seconds: checks the script runs

No download is possible on the GPU machine, so the model is QwQ-32B's architecture (Qwen2: hidden 5120, 64 layers,
40 attention heads, 8 KV heads, intermediate 27648, vocabulary 152064) with random bf16 weights: built on the GPU
for transformers, ``load_format="dummy"`` from the same config for vLLM. Prompts are random token ids of uneven
length around ``--prompt-tokens`` (no tokenizer needed) and every chain makes exactly ``--new-tokens`` tokens (EOS
ignored), sampled at the paper's settings (0.7 / 0.8 / 20) with one seed per chain, as the reasoner submits them.

Each engine runs in its own child process (so one engine's GPU memory is free for the next) and reports, per chain
count: wall time, generated tokens/s, KV-cache memory (transformers: peak allocated over the weights; vLLM: its
pre-allocated KV pool) and the wall time over one chain's (target for 8 chains: <= 1.3x on an H200). An engine that
is not installed is reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QWQ_32B = {"hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
           "intermediate_size": 27648, "vocab_size": 152064, "max_position_embeddings": 32768,
           "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 4096,
        "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}


def qwen2_config(sizes: dict[str, Any]) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(**sizes, bos_token_id=2, eos_token_id=1, pad_token_id=0, use_cache=True)


def make_prompts(count: int, mean_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(int(mean_len * 0.75), int(mean_len * 1.25)))]
            for _ in range(count)]


def kv_bytes_per_token(sizes: dict[str, Any], dtype_bytes: int) -> int:
    head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
    return 2 * sizes["num_hidden_layers"] * sizes["num_key_value_heads"] * head_dim * dtype_bytes


def build_transformers(sizes: dict[str, Any], device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = qwen2_config(sizes)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # initialise on the GPU: a CPU init of 32B parameters takes many minutes
            model = AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def run_cb(model: Any, prompts: list[list[int]], new_tokens: int, device: str) -> int:
    """transformers' continuous batching: paged KV cache, per-request lengths, rows leave as they finish."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=True, eos_token_id=-1, pad_token_id=0,
                              **SAMPLING)
    cb = None if device == "cuda" else ContinuousBatchingConfig(num_blocks=64, page_size=32, max_batch_tokens=512)
    out = model.generate_batch(inputs=prompts, generation_config=config, continuous_batching_config=cb,
                               warmup=device == "cuda")
    return sum(len(o.generated_tokens) for o in out.values())


def run_generate(model: Any, prompts: list[list[int]], new_tokens: int, device: str) -> int:
    """transformers' ``generate`` on one left-padded batch."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=True, pad_token_id=0, **SAMPLING)
    return int(out[:, width:].numel())


def child(engine: str, sizes: dict[str, Any], chains: list[int], prompt_tokens: int, new_tokens: int,
          device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"engine": engine, "device": device, "rows": []}
    per_token = kv_bytes_per_token(sizes, 2 if device == "cuda" else 4)
    if engine == "vllm":
        try:
            import vllm
        except ImportError as exc:
            return {**info, "skipped": f"vllm is not installed ({exc}): pip install 'mirage-kg[vllm]'"}
        if device != "cuda":
            return {**info, "skipped": "vLLM needs a GPU"}
        folder = Path(tempfile.mkdtemp(prefix="qwq-shaped-"))
        qwen2_config(sizes).save_pretrained(folder)
        llm = vllm.LLM(str(folder), load_format="dummy", dtype="bfloat16", skip_tokenizer_init=True,
                       enable_prefix_caching=True, tensor_parallel_size=1, gpu_memory_utilization=0.9,
                       max_model_len=prompt_tokens * 2 + new_tokens)
        cache = llm.llm_engine.vllm_config.cache_config
        info["kv_pool_bytes"] = int((cache.num_gpu_blocks or 0) * cache.block_size * per_token)

        def run(prompts: list[list[int]]) -> int:
            params = [vllm.SamplingParams(max_tokens=new_tokens, ignore_eos=True, seed=i, **SAMPLING)
                      for i in range(len(prompts))]
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            return sum(len(o.outputs[0].token_ids) for o in outs)
    else:
        model = build_transformers(sizes, device)
        weights = torch.cuda.memory_allocated() if device == "cuda" else 0
        step = run_cb if engine == "cb" else run_generate

        def run(prompts: list[list[int]]) -> int:
            return step(model, prompts, new_tokens, device)

    run(make_prompts(1, prompt_tokens, sizes["vocab_size"], seed=99))  # warm-up: kernels, graphs, allocator
    for n in chains:
        prompts = make_prompts(n, prompt_tokens, sizes["vocab_size"], seed=n)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        tokens = run(prompts)
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
        row: dict[str, Any] = {"chains": n, "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
                               "kv_bytes_needed": sum(len(p) + new_tokens for p in prompts) * per_token}
        if device == "cuda" and engine != "vllm":
            row["kv_peak_bytes"] = int(torch.cuda.max_memory_allocated() - weights)
        info["rows"].append(row)
    one = next((r["wall_s"] for r in info["rows"] if r["chains"] == 1), None)
    for row in info["rows"]:
        row["ratio_to_one_chain"] = row["wall_s"] / one if one else None
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="cb,generate,vllm", help="comma-separated: cb (transformers' "
                        "continuous batching), generate (transformers' generate), vllm")
    parser.add_argument("--chains", default=None, help="comma-separated chain counts [default: 1,8,32; dry run 1,2]")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="mean prompt length [default: 512; dry 24]")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per chain [default: 128; dry run 8]")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the script runs")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one engine in this process
    args = parser.parse_args()
    sizes = TINY if args.dry_run else QWQ_32B
    chains = [int(c) for c in (args.chains or ("1,2" if args.dry_run else "1,8,32")).split(",") if c.strip()]
    prompt_tokens = args.prompt_tokens or (24 if args.dry_run else 512)
    new_tokens = args.new_tokens or (8 if args.dry_run else 128)

    if args.child:
        import torch

        if args.dry_run:
            torch.set_num_threads(1)
        device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
        print(json.dumps(child(args.child, sizes, chains, prompt_tokens, new_tokens, device)))
        return
    results = []
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        command = [sys.executable, __file__, "--child", engine, "--chains", ",".join(map(str, chains)),
                   "--prompt-tokens", str(prompt_tokens), "--new-tokens", str(new_tokens)]
        if args.dry_run:
            command.append("--dry-run")
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        if done.returncode != 0:
            results.append({"engine": engine, "failed": done.stderr[-1500:]})
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    report = {"model": "tiny (dry run)" if args.dry_run else "QwQ-32B-shaped, random bf16", "chains": chains,
              "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "engines": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['model']}: ~{prompt_tokens}-token prompts, {new_tokens} new tokens per chain, sampled")
    print(f"{'engine':<9} {'chains':>6} {'wall s':>8} {'tok/s':>9} {'KV GiB':>7} {'x one':>6}")
    for info in results:
        if "skipped" in info or "failed" in info:
            print(f"{info['engine']:<9} {info.get('skipped') or 'FAILED: ' + info['failed']}")
            continue
        for row in info["rows"]:
            kv = row.get("kv_peak_bytes", row["kv_bytes_needed"]) / 2**30
            ratio = f"{row['ratio_to_one_chain']:.2f}" if row["ratio_to_one_chain"] else "-"
            print(f"{info['engine']:<9} {row['chains']:>6} {row['wall_s']:>8.2f} {row['tokens_per_s']:>9.1f} "
                  f"{kv:>7.2f} {ratio:>6}")
        if "kv_pool_bytes" in info:
            print(f"{info['engine']:<9} KV pool pre-allocated: {info['kv_pool_bytes'] / 2**30:.1f} GiB")
    print("target: 8 chains <= 1.3x one chain's wall time on an H200")


if __name__ == "__main__":
    main()
