"""The README question's answer time, warm, this checkout against another (``--baseline DIR``: e.g. a ``git
worktree`` of an earlier commit) in the same run: SmolLM2 on llama.cpp in process over the demo KG, with what
``ask`` uses for it (``SMALL_MODEL_BUDGETS``, seed 0), each checkout in its own process (its own code, the same
venv), the two taking turns so that a busy machine weighs on both alike.

    python benchmarks/bench_loop_ask.py --baseline /tmp/old [--rounds 3] [--json]

Per checkout: the first answer after loading the model apart, then the mean of ``--rounds`` warm answers, with
the chains' searches, tokens and stage seconds; the ratio printed is this checkout's warm mean over the
baseline's. Never gates CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "I have palpitations, feel dizzy and short of breath. What could it be and what should I take?"

# one checkout's worker: reads a line per answer to give, writes one JSON line per answer
_WORKER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
from mirage_kg import KnowledgeGraph, demo_store
from mirage_reason.backends.llamacpp_backend import LlamaCppBackend
try:  # the package layout of this checkout, or that of a checkout before mirage_reason.pipeline
    from mirage_reason.pipeline.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.pipeline.coordinator import Mirage
except ImportError:
    from mirage_reason.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.coordinator import Mirage
kg = KnowledgeGraph(demo_store())
backend = LlamaCppBackend("smollm2")
mirage = Mirage(kg, backend, MirageConfig(**SMALL_MODEL_BUDGETS, seed=0))
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    start = time.perf_counter()
    answer = mirage.answer(sys.argv[2])
    seconds = time.perf_counter() - start
    searches = [len(c.searches) for c in answer.chains]
    print(json.dumps({"seconds": seconds, "searches": searches, "tokens": dict(answer.tokens),
                      "timings": {k: round(v, 2) for k, v in answer.timings.items()}}), flush=True)
"""


class Worker:
    def __init__(self, tree: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.tree = tree
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(tree), QUESTION], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the worker for {self.tree} stopped (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="Another checkout of the repository.")
    parser.add_argument("--rounds", type=int, default=3, help="Warm answers per checkout.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (args.baseline / "mirage_reason").is_dir():
        raise SystemExit(f"{args.baseline} is not a checkout of this repository (no mirage_reason/ in it)")
    trees = {"baseline": args.baseline.resolve(), "this": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    workers = {name: Worker(tree) for name, tree in trees.items()}
    for name, worker in workers.items():
        runs[name].append(worker.ask())  # the first answer after loading the model: not warm
    for _ in range(args.rounds):
        for name, worker in workers.items():
            runs[name].append(worker.ask())
    for worker in workers.values():
        worker.close()
    report: dict[str, Any] = {}
    for name, rows in runs.items():
        warm = [r["seconds"] for r in rows[1:]]
        report[name] = {"tree": str(trees[name]), "first_s": round(rows[0]["seconds"], 2),
                        "warm_s": round(statistics.mean(warm), 2), "warm_runs": [round(s, 2) for s in warm],
                        "searches": rows[-1]["searches"], "tokens": rows[-1]["tokens"],
                        "timings": rows[-1]["timings"]}
    report["warm_ratio"] = round(report["this"]["warm_s"] / report["baseline"]["warm_s"], 3)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    for name in trees:
        r = report[name]
        print(f"{name:9s} first {r['first_s']:7.2f} s  warm {r['warm_s']:7.2f} s {r['warm_runs']}  searches "
              f"{r['searches']}  tokens {r['tokens']}  {r['timings']}  ({r['tree']})")
    print(f"warm ratio (this / baseline): {report['warm_ratio']}")


if __name__ == "__main__":
    main()
