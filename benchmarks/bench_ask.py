"""``mirage-kg ask`` end to end: the README's first question on the demo KG with SmolLM2, on each CPU engine in the
same run (llama.cpp's C++ server with parallel slots, the CPU default; llama.cpp in process as the baseline; or
transformers), cold and warm, with per-stage seconds and tokens/s.

    python benchmarks/bench_ask.py [--engines llamacpp-server,llamacpp] [--warm 2] [--json]

Cold: building the engine (loading the model) plus the first answer; warm: each further answer of the same
question with everything loaded (the mean of ``--warm`` runs). The KG and its embedding model are loaded once,
before any engine, and reported apart. Settings are what ``ask`` uses for SmolLM2 (``SMALL_MODEL_BUDGETS``),
sampled with a fixed seed. Generated tokens/s is the answer's generated tokens over its model-stage wall time
(decompose + chains + synthesize). Targets on a 2-core CPU: <= 20 s warm, >= 100 tokens/s. Never gates CI.
"""

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

QUESTION = "I have palpitations, feel dizzy and short of breath. What could it be and what should I take?"
MODEL_STAGES = ("decompose", "chains", "synthesize", "llm")


def _summary(answer: Any) -> dict[str, Any]:
    model_s = sum(answer.timings.get(s, 0.0) for s in MODEL_STAGES)
    tokens = int(answer.tokens.get("total", 0))
    return {"total_s": answer.timings["total"], "stages_s": {k: round(v, 3) for k, v in answer.timings.items()},
            "tokens": tokens, "tokens_per_s": tokens / model_s if model_s else 0.0, "chains": len(answer.chains)}


def bench(kg: Any, engine: str, question: str, warm: int, seed: int) -> dict[str, Any]:
    from mirage_reason.backends import get_backend
    from mirage_reason.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.coordinator import Mirage

    config = MirageConfig(**SMALL_MODEL_BUDGETS, seed=seed)
    started = time.perf_counter()
    backend = get_backend(engine, model="smollm2")
    load = time.perf_counter() - started
    try:
        first = Mirage(kg, backend, config).answer(question)
        cold = time.perf_counter() - started
        warm_runs = [_summary(Mirage(kg, backend, config).answer(question)) for _ in range(warm)]
    finally:
        backend.close()
    return {"engine": engine, "load_s": load, "cold_s": cold, "cold": _summary(first), "warm": warm_runs,
            "warm_s": statistics.mean(r["total_s"] for r in warm_runs) if warm_runs else None,
            "warm_tokens_per_s": statistics.mean(r["tokens_per_s"] for r in warm_runs) if warm_runs else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp-server,llamacpp",
                        help="comma-separated: llamacpp-server, llamacpp, transformers; the last is the baseline")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--warm", type=int, default=2, help="warm answers to average")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    from mirage_kg import KnowledgeGraph, demo_store

    started = time.perf_counter()
    kg = KnowledgeGraph(demo_store())
    kg.link("warm up the embedding model")
    kg_load = time.perf_counter() - started
    rows = [bench(kg, e.strip(), args.question, args.warm, args.seed) for e in args.engines.split(",") if e.strip()]
    report = {"question": args.question, "kg_load_s": kg_load, "engines": rows,
              "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"ask on the demo KG, SmolLM2, seed {args.seed}; KG + embeddings loaded in {kg_load:.1f} s; "
          f"CPU: {os.cpu_count()} cores, load {report['load_average']}; python {sys.version.split()[0]}")
    print(f"{'engine':<13} {'load s':>7} {'cold s':>7} {'warm s':>7} {'tokens':>7} {'tok/s':>7}  warm stages (s)")
    for row in rows:
        last = row["warm"][-1] if row["warm"] else row["cold"]
        stages = ", ".join(f"{k} {v:.1f}" for k, v in last["stages_s"].items() if v >= 0.05 and k != "total")
        warm = f"{row['warm_s']:.1f}" if row["warm_s"] is not None else "-"
        rate = row["warm_tokens_per_s"] if row["warm_tokens_per_s"] is not None else row["cold"]["tokens_per_s"]
        print(f"{row['engine']:<13} {row['load_s']:>7.1f} {row['cold_s']:>7.1f} {warm:>7} {last['tokens']:>7} "
              f"{rate:>7.1f}  {stages}")
    if len(rows) > 1 and all(r["warm_s"] for r in rows):
        base = rows[-1]
        for row in rows[:-1]:
            print(f"{row['engine']} vs {base['engine']}: warm {base['warm_s'] / row['warm_s']:.2f}x faster, "
                  f"{row['warm_tokens_per_s'] / max(base['warm_tokens_per_s'], 1e-9):.2f}x the tokens/s")
    print("targets: <= 20 s warm end to end, >= 100 generated tokens/s")


if __name__ == "__main__":
    main()
