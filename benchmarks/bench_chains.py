"""Parallel chains on one engine: 8 samples of one question, and 8 different questions, against one chain alone,
all measured in the same run on the same engine, KG and budgets.

    python benchmarks/bench_chains.py [--engines llamacpp-server,llamacpp] [--threads auto,1] [--chains 8]
        [--tokens 64] [--json]

Every chain is its own request stream (the product's scheduling: a chain's next turn goes to the engine as soon as
its search returns), sampled at the paper's settings, seeded with ``retrieve`` evidence from the demo KG. Without
``--seed`` the engine may batch the samples' requests together (transformers batches only requests with the same
seed); with it, every sample has its own seed, as in a reproducible run. Prints wall time, generated tokens and
tokens/s of each run (all its chains' generated tokens over its wall time: prompt evaluation and searches included)
and the ratios samples / one chain (target <= 1.5x)
and distinct / one chain, for each llama.cpp thread count of ``--threads`` (``auto``: the product's rule, the idle
cores not counting this process; or a number), with the count used and why. Engines: ``llamacpp-server`` (llama.cpp's C++ server, parallel slots), ``llamacpp`` (in
process, one sequence at a time) and ``transformers`` (SmolLM2), ``tiny`` (a random 2-layer model
on transformers, for a quick check). Never gates CI.
"""

from __future__ import annotations

import argparse
import json
import os
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
]


def make_backend(name: str, threads: str = "auto") -> Any:
    from mirage_reason.backends import get_backend

    if name == "tiny":
        from mirage_reason.backends.local_models import tiny_model
        from mirage_reason.backends.transformers_backend import TransformersBackend

        model, tokenizer = tiny_model(seed=0)
        return TransformersBackend.from_model(model, tokenizer, name="tiny")
    if name.startswith("llamacpp") and threads != "auto":
        return get_backend(name, model="smollm2", threads=int(threads))
    return get_backend(name, model="smollm2")


def timed_run(kg: Any, backend: Any, config: Any, questions: list[str], tags: list[Any]) -> dict[str, Any]:
    from mirage_reason.pipeline.chain import ChainRunner, ChainSpec

    specs = [ChainSpec(q, q, tuple(kg.retrieve(q, budget=config.retrieve_budget).evidence), tag=tag, sample=sample)
             for q, (tag, sample) in zip(questions, tags)]
    runner = ChainRunner(kg, backend, config)
    started = time.perf_counter()
    results = runner.run(specs)
    wall = time.perf_counter() - started
    tokens = sum(r.completion_tokens for r in results)
    texts = {r.text for r in results}
    return {"chains": len(results), "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
            "distinct_texts": len(texts), "max_chain_tokens": max(r.completion_tokens for r in results)}


def bench(kg: Any, name: str, chains: int, tokens: int, seed: int | None = None,
          threads: str = "auto") -> dict[str, Any]:
    from mirage_reason.pipeline.config import MirageConfig

    backend = make_backend(name, threads)
    config = MirageConfig(max_new_tokens=tokens, max_chain_tokens=tokens, max_turns=3, n_r=2, seed=seed,
                          seed_facts=10)
    try:
        timed_run(kg, backend, config, QUESTIONS[:1], [(("warm-up",), 0)])  # load and first-call costs out of the way
        one = timed_run(kg, backend, config, QUESTIONS[:1], [((0, 0), 0)])
        samples = timed_run(kg, backend, config, QUESTIONS[:1] * chains, [((0, 0), s) for s in range(chains)])
        distinct = timed_run(kg, backend, config, (QUESTIONS * chains)[:chains], [((q, 0), 0) for q in range(chains)])
    finally:
        backend.close()
    info = dict(getattr(backend, "engine_info", {}))
    return {"engine": name, "threads_setting": threads if name.startswith("llamacpp") else "-",
            "threads": info.get("threads"), "threads_reason": info.get("threads_reason"),
            "tokens_per_chain": tokens, "seed": seed, "one": one, "samples": samples, "distinct": distinct,
            "ratio_samples_to_one": samples["wall_s"] / one["wall_s"],
            "ratio_distinct_to_one": distinct["wall_s"] / one["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp-server,llamacpp", help="comma-separated: llamacpp-server, "
                        "llamacpp, transformers, tiny")
    parser.add_argument("--threads", default="auto,1",
                        help="llama.cpp thread counts, comma-separated: 'auto' (idle cores, not counting this "
                        "process) or a number")
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64, help="most tokens each chain may generate")
    parser.add_argument("--seed", type=int, help="run seed: every request gets its own seed [default: none]")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    from mirage_kg import KnowledgeGraph, demo_store

    kg = KnowledgeGraph(demo_store())
    settings = [t.strip() for t in args.threads.split(",") if t.strip()]
    if not settings or any(t != "auto" and not (t.isdigit() and int(t) > 0) for t in settings):
        parser.error(f"--threads takes 'auto' or positive numbers, comma-separated, not {args.threads!r}")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [bench(kg, name, args.chains, args.tokens, args.seed, threads)
            for name in (n.strip() for n in args.engines.split(",") if n.strip())
            for threads in (settings if name.startswith("llamacpp") else ["-"])]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.chains} chains, <= {args.tokens} tokens each, sampled 0.7/0.8/20, seed {args.seed}, demo KG; "
          f"CPU: {os.cpu_count()} cores, load {load_before:.1f} before, {load:.1f} after; python {sys.version.split()[0]}")
    print(f"{'engine':<15} {'threads':>9} {'run':<9} {'chains':>6} {'wall s':>8} {'tokens':>7} {'tok/s':>8} "
          f"{'distinct':>8}")
    for row in rows:
        threads = f"{row['threads']} ({row['threads_setting']})" if row["threads"] is not None else "-"
        for run in ("one", "samples", "distinct"):
            r = row[run]
            print(f"{row['engine']:<15} {threads:>9} {run:<9} {r['chains']:>6} {r['wall_s']:>8.2f} {r['tokens']:>7} "
                  f"{r['tokens_per_s']:>8.1f} {r['distinct_texts']:>8}")
        if row["threads_reason"]:
            print(f"  threads: {row['threads_reason']}")
        print(f"{row['engine']} threads={row['threads_setting']}: samples / one chain = {row['ratio_samples_to_one']:.2f}x (target <= 1.5x), "
              f"distinct / one chain = {row['ratio_distinct_to_one']:.2f}x")


if __name__ == "__main__":
    main()
