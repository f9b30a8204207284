"""Batched against sequential chain generation at QwQ-32B scale on one GPU (an H200), with random weights.

    python benchmarks/gpu/bench_qwq_batched.py [--chains 8,32] [--prompt-tokens 512] [--new-tokens 128] [--json]
    python benchmarks/gpu/bench_qwq_batched.py --dry-run      # a tiny model on the CPU: checks the script runs

No download is possible on the GPU machine, so the model is QwQ-32B's architecture (Qwen2: hidden 5120, 64 layers,
40 attention heads, 8 KV heads, intermediate 27648, vocabulary 152064) built from its config in code with random
bf16 weights directly on the GPU (about 65 GB). Prompts are random token ids (no tokenizer is needed), of uneven
lengths around ``--prompt-tokens`` so that left padding is exercised as in the chain runner, and every chain makes
exactly ``--new-tokens`` tokens (EOS suppressed) with the paper's sampling settings (0.7 / 0.8 / 20 / 1.05).

For N chains it times N batch-1 generate calls one after another (sequential; the reference code's way) and one
batch-N call (ours), and prints wall time, tokens/s, and the batched wall time over one chain's (target <= 1.5x).
A time budget (``--budget-s``, default 420 s, under the 8 minutes the machine gives a command) caps the sequential
runs: when it would be exceeded, the remaining single-chain runs are estimated from the measured ones and the
output says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

QWQ_32B = {
    "hidden_size": 5120,
    "num_hidden_layers": 64,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "intermediate_size": 27648,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
PAD, EOS = 0, 1
GREEDY = False  # set when random weights give non-finite logits that sampling refuses (greedy costs the same)
ENGINE = "loop"  # "loop": mirage_reason.backends.decoding (the product's path); "generate": transformers' own
DECODING: Any = None


def build_model(sizes: dict[str, Any], device: str, dtype: Any) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**sizes, bos_token_id=2, eos_token_id=EOS, pad_token_id=PAD, use_cache=True)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # initialise on the GPU: a CPU init of 32B parameters would take many minutes
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def make_prompts(count: int, mean_len: int, vocab: int, seed: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(mean_len * 0.75), int(mean_len * 1.25) + 1, (count,), generator=gen).tolist()
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def _decoding_module() -> Any:
    """MIRAGE-KG's decoding loop (``mirage_reason.backends.decoding``: torch and transformers only)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "mirage_reason" / "backends" / "decoding.py"
    spec = importlib.util.spec_from_file_location("mirage_decoding", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # loaded by path: the GPU machine need not have mirage-kg's KG stack
    return module


def generate(model: Any, prompts: list[list[int]], new_tokens: int, seed: int) -> tuple[float, int]:
    """One batched call over ``prompts`` (left-padded); returns wall seconds and tokens generated.

    ``ENGINE`` "loop" runs MIRAGE-KG's decoding loop (what ``TransformersBackend`` uses), "generate" transformers'
    stock ``generate``; both with EOS suppressed, so every row makes exactly ``new_tokens`` tokens.
    """
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    torch.manual_seed(seed)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    if ENGINE == "loop":
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        warpers = LogitsProcessorList() if GREEDY else LogitsProcessorList(
            [TemperatureLogitsWarper(0.7), TopKLogitsWarper(20), TopPLogitsWarper(0.8)])
        rows = DECODING.decode(model, ids, mask, max_new_tokens=new_tokens, eos_ids=set(), tokenizer=None,
                               processors=warpers, repetition_penalty=1.05, sample=not GREEDY)
        made = sum(len(r.tokens) for r in rows)
    else:
        sampling = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20} if not GREEDY else \
            {"do_sample": False}
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, repetition_penalty=1.05, pad_token_id=PAD,
                                 eos_token_id=EOS, **sampling)
        made = (out.shape[1] - width) * len(prompts)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return wall, made


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    started = time.perf_counter()
    if args.dry_run:
        device, dtype, sizes = "cpu", torch.float32, TINY
        torch.set_num_threads(1)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA GPU here; use --dry-run to check the script on a CPU")
        device, dtype, sizes = "cuda", torch.bfloat16, QWQ_32B
    t = time.perf_counter()
    model = build_model(sizes, device, dtype)
    build_s = time.perf_counter() - t
    params = sum(p.numel() for p in model.parameters())
    info: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "dtype": str(dtype).replace("torch.", ""), "parameters": params, "build_s": round(build_s, 1),
        "prompt_tokens_mean": args.prompt_tokens, "new_tokens": args.new_tokens, "torch": torch.__version__,
        "config": sizes, "results": [],
    }
    global GREEDY, ENGINE, DECODING
    GREEDY = args.greedy
    ENGINE = args.engine
    if ENGINE == "loop":
        try:
            DECODING = _decoding_module()
        except Exception as exc:  # noqa: BLE001 - an older transformers there: still measure something
            print(f"MIRAGE-KG's decoding loop does not load here ({type(exc).__name__}: {exc}); timing "
                  "transformers' generate instead", file=sys.stderr)
            ENGINE = "generate"
    info["engine"] = ENGINE
    warm = make_prompts(2, min(args.prompt_tokens, 64), sizes["vocab_size"], 99)
    try:
        generate(model, warm, 4, 0)  # warm-up (also finds out whether sampling works on these random weights)
    except RuntimeError as exc:  # "probability tensor contains either inf, nan or element < 0"
        print(f"sampling failed on the random weights ({exc}); timing greedy decoding instead", file=sys.stderr)
        GREEDY = True
        generate(model, warm, 4, 0)
    info["decoding"] = "greedy" if GREEDY else "sampling 0.7/0.8/20"
    for n in args.chains:
        prompts = make_prompts(n, args.prompt_tokens, sizes["vocab_size"], seed=n)
        batch_wall, batch_tokens = generate(model, prompts, args.new_tokens, seed=1)
        singles: list[float] = []
        tokens_single = 0
        for i, prompt in enumerate(prompts):
            elapsed = time.perf_counter() - started
            if singles and elapsed + statistics.mean(singles) * 1.2 > args.budget_s:
                break
            wall, made = generate(model, [prompt], args.new_tokens, seed=1 + i)
            singles.append(wall)
            tokens_single += made
        measured = len(singles)
        one = statistics.mean(singles)
        seq_wall = sum(singles) + one * (n - measured)
        seq_tokens = round(tokens_single * n / measured)  # measured runs, scaled when the budget cut them short
        row = {
            "chains": n,
            "batched": {"wall_s": batch_wall, "tokens": batch_tokens, "tokens_per_s": batch_tokens / batch_wall},
            "sequential": {"wall_s": seq_wall, "tokens": seq_tokens, "tokens_per_s": seq_tokens / seq_wall,
                           "measured_chains": measured, "estimated": measured < n},
            "one_chain_s": one,
            "ratio_batched_to_one_chain": batch_wall / one,
            "speedup_vs_sequential": seq_wall / batch_wall,
        }
        if device == "cuda":
            row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        info["results"].append(row)
    info["total_s"] = round(time.perf_counter() - started, 1)
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", default=None, help="comma-separated chain counts [default: 8,32; dry run 2,4]")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="mean prompt length [512; dry run 16]")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per chain [128; dry run 8]")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop measuring sequential runs past this")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU, to check the script")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding instead of the paper's sampling")
    parser.add_argument("--engine", choices=("loop", "generate"), default="loop",
                        help="loop: MIRAGE-KG's decoding loop (the product's path); generate: transformers' generate")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.chains = [int(c) for c in (args.chains or ("2,4" if args.dry_run else "8,32")).split(",")]
    args.prompt_tokens = args.prompt_tokens or (16 if args.dry_run else 512)
    args.new_tokens = args.new_tokens or (8 if args.dry_run else 128)
    info = run(args)
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"{info['device']}, {info['dtype']}, {info['parameters'] / 1e9:.2f}B parameters (built in "
          f"{info['build_s']} s), prompts ~{info['prompt_tokens_mean']} tokens, {info['new_tokens']} new tokens "
          f"per chain, {info['decoding']}, engine {info['engine']}, torch {info['torch']}")
    print(f"{'chains':>6} {'run':<11} {'wall s':>8} {'tokens':>7} {'tok/s':>8}")
    for row in info["results"]:
        for name in ("sequential", "batched"):
            r = row[name]
            note = f"  (estimated from {r['measured_chains']} runs)" if r.get("estimated") else ""
            print(f"{row['chains']:>6} {name:<11} {r['wall_s']:>8.2f} {r['tokens']:>7} {r['tokens_per_s']:>8.1f}{note}")
        print(f"{row['chains']:>6} one chain {row['one_chain_s']:.2f} s | batched / one chain = "
              f"{row['ratio_batched_to_one_chain']:.2f}x (target <= 1.5x), speed-up over sequential = "
              f"{row['speedup_vs_sequential']:.2f}x" + (f", peak {row['peak_gpu_gib']} GiB" if "peak_gpu_gib" in row
                                                         else ""))
    print(f"total {info['total_s']} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
