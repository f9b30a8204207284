"""``mirage-kg ask`` end to end: the README's first question on the demo KG with SmolLM2, on each CPU engine in the
same run (llama.cpp in process, the CPU default; llama.cpp's C++ server with parallel slots; or transformers), each
with llama.cpp's thread count chosen by the product's rule (``auto``: the idle cores, not counting this process)
and forced (e.g. ``1``), cold and warm, with per-stage seconds and tokens/s.

    python benchmarks/bench_ask.py [--engines llamacpp,llamacpp-server] [--threads auto,1] [--warm 2] [--json]

Cold: building the engine (loading the model) plus the first answer; warm: each further answer of the same
question with everything loaded (the mean of ``--warm`` runs). The KG and its embedding model are loaded once,
before any engine, and reported apart (so ``auto`` measures the idle cores right after our own start-up, as ``ask``
does). Settings are what ``ask`` uses for SmolLM2 (``SMALL_MODEL_BUDGETS``), sampled with a fixed seed.

What the rates count (all over the answer's generated tokens, ``Answer.tokens["total"]``):
- ``gen tok/s``: generated tokens over the seconds the engine itself spent generating them (llama.cpp's own
  timings: decoding steps only, no prompt evaluation, no KG search). Sequences decoded together (the server's
  slots) each count their own seconds, so this is the rate of one sequence, what ``llama-bench``'s tg measures;
- ``prompt tok/s``: prompt tokens the engine evaluated (not reused from its cache) over its prompt seconds;
- ``wall tok/s``: generated tokens over the model stages' wall time (decompose + chains + synthesize: prompt
  evaluation, searches and waiting included).
Targets on a 2-core CPU: <= 20 s warm end to end, >= 100 generated tokens/s (``gen tok/s``). Never gates CI.
The whole ``mirage-kg ask`` command, first and second call (``MIRAGE_KG_WARM``: a background server and its answer
cache), is ``bench_warm_ask.py``.
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
    engine = dict(answer.engine)
    generation_s, prompt_s = engine.get("generation_s"), engine.get("prompt_eval_s")
    return {"total_s": answer.timings["total"], "stages_s": {k: round(v, 3) for k, v in answer.timings.items()},
            "tokens": tokens, "wall_tokens_per_s": tokens / model_s if model_s else 0.0,
            "generated_tokens_per_s": engine["generated_tokens"] / generation_s if generation_s else None,
            "prompt_tokens_per_s": engine["prompt_evaluated"] / prompt_s if prompt_s else None,
            "prompt_evaluated": engine.get("prompt_evaluated"),
            "engine": engine, "chains": len(answer.chains)}


def _mean(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.mean(values) if values else None


def bench(kg: Any, engine: str, threads: str, question: str, warm: int, seed: int) -> dict[str, Any]:
    from mirage_reason.backends import get_backend
    from mirage_reason.pipeline.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.pipeline.coordinator import Mirage

    config = MirageConfig(**SMALL_MODEL_BUDGETS, seed=seed)
    options: dict[str, Any] = {"model": "smollm2"}
    if engine.startswith("llamacpp") and threads != "auto":
        options["threads"] = int(threads)
    started = time.perf_counter()
    backend = get_backend(engine, **options)
    load = time.perf_counter() - started
    try:
        first = Mirage(kg, backend, config).answer(question)
        cold = time.perf_counter() - started
        warm_runs = [_summary(Mirage(kg, backend, config).answer(question)) for _ in range(warm)]
    finally:
        backend.close()
    info = dict(getattr(backend, "engine_info", {}))
    runs = warm_runs or [_summary(first)]
    return {"engine": engine, "threads_setting": threads, "threads": info.get("threads"),
            "threads_reason": info.get("threads_reason"), "load_s": load, "cold_s": cold, "cold": _summary(first),
            "warm": warm_runs, "warm_s": statistics.mean(r["total_s"] for r in warm_runs) if warm_runs else None,
            "generated_tokens_per_s": _mean(runs, "generated_tokens_per_s"),
            "prompt_tokens_per_s": _mean(runs, "prompt_tokens_per_s"), "prompt_evaluated": _mean(runs, "prompt_evaluated"),
            "wall_tokens_per_s": _mean(runs, "wall_tokens_per_s")}


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="llamacpp,llamacpp-server",
                        help="comma-separated: llamacpp, llamacpp-server, transformers")
    parser.add_argument("--threads", default="auto,1",
                        help="llama.cpp thread counts to run each llama.cpp engine with, comma-separated: 'auto' (the "
                        "product's rule: idle cores, not counting this process) or a number; the last is the baseline")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--warm", type=int, default=2, help="warm answers to average")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    settings = [t.strip() for t in args.threads.split(",") if t.strip()]
    if not settings or any(t != "auto" and not (t.isdigit() and int(t) > 0) for t in settings):
        parser.error(f"--threads takes 'auto' or positive numbers, comma-separated, not {args.threads!r}")

    from mirage_kg import KnowledgeGraph, demo_store

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.perf_counter()
    kg = KnowledgeGraph(demo_store())
    kg.link("warm up the embedding model")
    kg_load = time.perf_counter() - started
    rows = []
    for engine in (e.strip() for e in args.engines.split(",") if e.strip()):
        for threads in settings if engine.startswith("llamacpp") else ["-"]:
            rows.append(bench(kg, engine, threads, args.question, args.warm, args.seed))
    report = {"question": args.question, "kg_load_s": kg_load, "engines": rows,
              "load_average_before": load_before,
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"ask on the demo KG, SmolLM2, seed {args.seed}; KG + embeddings loaded in {kg_load:.1f} s; "
          f"CPU: {os.cpu_count()} cores, load (1/5/15 min) before {_loads(load_before)}, after "
          f"{_loads(report['load_average'])}; python {sys.version.split()[0]}")
    print(f"{'engine':<15} {'threads':>11} {'load s':>6} {'cold s':>6} {'warm s':>6} {'tokens':>6} {'gen tok/s':>9} "
          f"{'prompt: tok, tok/s':>18} {'wall tok/s':>10}  warm stages (s)")
    for row in rows:
        last = row["warm"][-1] if row["warm"] else row["cold"]
        stages = ", ".join(f"{k} {v:.1f}" for k, v in last["stages_s"].items() if v >= 0.05 and k != "total")
        warm = f"{row['warm_s']:.1f}" if row["warm_s"] is not None else "-"
        threads = f"{row['threads']} ({row['threads_setting']})" if row["threads"] is not None else "-"
        evaluated = row["prompt_evaluated"]
        prompt = f"{evaluated:.0f}, {_rate(row['prompt_tokens_per_s'])}" if evaluated is not None else "-"
        print(f"{row['engine']:<15} {threads:>11} {row['load_s']:>6.1f} {row['cold_s']:>6.1f} {warm:>6} "
              f"{last['tokens']:>6} {_rate(row['generated_tokens_per_s']):>9} {prompt:>18} "
              f"{_rate(row['wall_tokens_per_s']):>10}  {stages}")
    for row in rows:
        if row["threads_reason"]:
            print(f"  {row['engine']} threads={row['threads_setting']}: {row['threads']} thread(s), "
                  f"{row['threads_reason']}")
    for engine in dict.fromkeys(r["engine"] for r in rows):
        same = [r for r in rows if r["engine"] == engine and r["warm_s"]]
        base = same[-1] if same else None
        for row in same[:-1]:
            assert base is not None
            gen = (f", {row['generated_tokens_per_s'] / base['generated_tokens_per_s']:.2f}x the generated tok/s"
                   if row["generated_tokens_per_s"] and base["generated_tokens_per_s"] else "")
            print(f"{engine}: threads {row['threads_setting']} vs {base['threads_setting']}: warm "
                  f"{base['warm_s'] / row['warm_s']:.2f}x faster{gen}")
    print("gen tok/s: generated tokens / the engine's own generation seconds (per sequence, no prompt evaluation); "
          "prompt: tokens the engine evaluated (not from its cache) and their rate; wall tok/s: generated tokens / "
          "model stages' wall time")
    print("targets: <= 20 s warm end to end, >= 100 generated tokens/s")


def _loads(values: Any) -> str:
    return "/".join(f"{v:.2f}" for v in values) if values else "?"


if __name__ == "__main__":
    main()
