"""Batched chains: N graph-augmented reasoning chains advanced together (one ``generate`` call per step) against
the same N chains run one after another, on the same backend, KG, prompts and budgets, in one run.

    python benchmarks/bench_chains.py [--backends smollm2,tiny] [--engines auto,generate] [--chains 8]
                                      [--tokens 64] [--same-question | --distinct N] [--threads N] [--json]

Decoding is greedy so both runs make the same text, and the chains are seeded with ``retrieve`` evidence from the
demo KG as in the pipeline. Prints wall time, generated tokens and tokens/s of each run, and the batched wall time
over one chain alone (target <= 1.5x), both over the mean chain and over the longest one (a batch cannot end
before its longest chain). ``--same-question`` runs 8 copies of one question, so every chain has the same length
and the ratio is the cost of batching alone. ``--engines`` compares the backend's decoding loop ("auto"/"loop")
with transformers' own ``generate``. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    "I have palpitations and feel dizzy and anxious. What could it be?",
    "What medication treats asthma?",
    "I am always thirsty and urinate a lot. Should I get tested for diabetes?",
    "What tests are needed for hypertension?",
    "I have a fever, a cough and muscle aches. Is it the flu?",
    "Can I take ibuprofen with a peptic ulcer?",
    "What are the symptoms of migraine?",
    "My joints are stiff and swollen in the morning. What could cause this?",
    "What is the treatment for hyperthyroidism?",
    "I have heartburn after meals. What should I do?",
    "What causes shortness of breath and wheezing?",
    "Which drugs are used for depression?",
]


def make_backend(name: str, engine: str = "auto", threads: int | None = None, cpu_pack: bool = True,
                 kv_reuse_mb: int | None = None) -> Any:
    from mirage_reason.backends.local_models import tiny_model
    from mirage_reason.backends.transformers_backend import TransformersBackend

    options: dict[str, Any] = {"engine": engine, "threads": threads, "cpu_pack": cpu_pack, "kv_reuse_mb": kv_reuse_mb}
    if name == "smollm2":
        return TransformersBackend("smollm2", **options)
    if name == "tiny":
        model, tokenizer = tiny_model(seed=0, layers=4, hidden=128)
        return TransformersBackend.from_model(model, tokenizer, name="tiny", **options)
    raise SystemExit(f"unknown backend {name!r}: use smollm2 or tiny")


def run_chains(kg: Any, backend: Any, config: Any, specs: list[Any]) -> tuple[float, int, float]:
    """Wall seconds, generated tokens and CPU seconds of running ``specs`` together."""
    from mirage_reason.chain import ChainRunner

    runner = ChainRunner(kg, backend, config)
    start, cpu = time.perf_counter(), time.process_time()
    results = runner.run(specs)
    return time.perf_counter() - start, sum(r.completion_tokens for r in results), time.process_time() - cpu


def bench(kg: Any, backend_name: str, chains: int, tokens: int, engine: str = "auto", threads: int | None = None,
          distinct: int | None = None, step_tokens: int | None = None, kv_reuse_mb: int | None = None
          ) -> dict[str, Any]:
    from mirage_reason.chain import ChainSpec
    from mirage_reason.config import MirageConfig

    backend = make_backend(backend_name, engine=engine, threads=threads, kv_reuse_mb=kv_reuse_mb)
    step = step_tokens or tokens
    config = MirageConfig(temperature=0.0, max_new_tokens=step, max_chain_tokens=tokens,
                          max_turns=max(3, -(-tokens // step) + 2), n_r=2, seed_facts=8, rank_by_question=False)
    kinds = min(distinct or len(QUESTIONS), len(QUESTIONS))
    questions = [QUESTIONS[i % kinds] for i in range(chains)]  # --distinct 4 with 8 chains: 2 samples per question
    specs = [ChainSpec(q, q, tuple(kg.retrieve(q, budget=config.retrieve_budget).evidence), tag=i)
             for i, q in enumerate(questions)]
    run_chains(kg, backend, config, specs[:1])  # warm-up: first-call allocations, tokenizer caches
    singles = [run_chains(kg, backend, config, [spec]) for spec in specs]
    seq_wall = sum(w for w, _, _ in singles)
    seq_tokens = sum(t for _, t, _ in singles)
    seq_cpu = sum(c for _, _, c in singles)
    batch_wall, batch_tokens, batch_cpu = run_chains(kg, backend, config, specs)
    one = statistics.mean(w for w, _, _ in singles)
    longest = max(w for w, _, _ in singles)
    return {
        "backend": backend_name, "engine": backend.engine, "threads": backend.threads,
        "packed_layers": backend.packed_layers, "distinct_questions": kinds, "step_tokens": step,
        "kv_reuse": backend.kv_pool is not None,
        "reused_tokens": backend.kv_pool.reused_tokens if backend.kv_pool is not None else 0,
        "chains": chains, "max_tokens_per_chain": tokens,
        "sequential": {"wall_s": seq_wall, "cpu_s": seq_cpu, "tokens": seq_tokens,
                       "tokens_per_s": seq_tokens / seq_wall},
        "batched": {"wall_s": batch_wall, "cpu_s": batch_cpu, "tokens": batch_tokens,
                    "tokens_per_s": batch_tokens / batch_wall},
        "one_chain_mean_s": one, "one_chain_longest_s": longest,
        "ratio_batched_to_one_chain": batch_wall / one,
        "ratio_batched_to_longest_chain": batch_wall / longest,
        "ratio_cpu_batched_to_one_chain": batch_cpu / (seq_cpu / chains),
        "speedup_vs_sequential": seq_wall / batch_wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="smollm2,tiny", help="comma-separated: smollm2, tiny")
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64, help="tokens each chain may generate")
    parser.add_argument("--engines", default="auto", help="comma-separated: auto (the default: loop where the "
                        "model allows), loop, generate (transformers' generate)")
    parser.add_argument("--threads", type=int, help="torch CPU threads [default: the backend's choice]")
    parser.add_argument("--same-question", action="store_true", help="every chain gets the same question")
    parser.add_argument("--distinct", type=int, help="distinct questions among the chains (the others repeat them, "
                        "like --samples) [default: all distinct]")
    parser.add_argument("--step-tokens", type=int, help="tokens per generate step (a chain continues a cut step in "
                        "the next one, re-sending its whole prompt) [default: --tokens, one step]")
    parser.add_argument("--kv-reuse-mb", default="1024", help="comma-separated KV pool sizes to compare (0 = off)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    import torch

    from mirage_kg import KnowledgeGraph, demo_store

    kg = KnowledgeGraph(demo_store())
    distinct = 1 if args.same_question else args.distinct
    rows = [bench(kg, name.strip(), args.chains, args.tokens, engine.strip(), args.threads, distinct,
                  args.step_tokens, int(reuse))
            for name in args.backends.split(",") if name.strip()
            for engine in args.engines.split(",") if engine.strip()
            for reuse in args.kv_reuse_mb.split(",") if reuse.strip()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.chains} chains, <= {args.tokens} tokens each"
          f"{f' in steps of {args.step_tokens}' if args.step_tokens else ''}, greedy, demo KG seeds"
          f"{f', {distinct} distinct question(s)' if distinct else ''}; "
          f"CPU: {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}, torch {torch.__version__}")
    print(f"{'backend':<9} {'engine':<9} {'run':<11} {'wall s':>8} {'cpu s':>8} {'tokens':>7} {'tok/s':>8}")
    for row in rows:
        engine = row["engine"] + ("+onednn" if row["packed_layers"] else "") + ("+kv" if row["kv_reuse"] else "")
        for run in ("sequential", "batched"):
            r = row[run]
            print(f"{row['backend']:<9} {engine:<9} {run:<11} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
                  f"{r['tokens']:>7} {r['tokens_per_s']:>8.1f}")
        print(f"{row['backend']:<9} {engine} ({row['threads']} threads) one chain: mean {row['one_chain_mean_s']:.2f} s, longest "
              f"{row['one_chain_longest_s']:.2f} s | batched / one chain = {row['ratio_batched_to_one_chain']:.2f}x "
              f"(target <= 1.5x), batched / longest = {row['ratio_batched_to_longest_chain']:.2f}x, "
              f"speed-up over sequential = {row['speedup_vs_sequential']:.2f}x; in CPU time batched / one chain = "
              f"{row['ratio_cpu_batched_to_one_chain']:.2f}x")


if __name__ == "__main__":
    main()
