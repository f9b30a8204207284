"""Merging into a graph that already holds data, against a fresh load of the same triples, in one run.

    python benchmarks/bench_merge.py [--facts 300000] [--seed 0] [--with-before]

Each case runs in a fresh process on a fresh on-disk store (wall time and peak RSS of that process):
- fresh: ``mirage-kg load`` of the triple file into an empty store;
- merge: the same load into a store whose graph already holds as many other facts (loaded by an earlier process);
- merge-before (``--with-before``): the merge as it was, staged in the store and committed with one ``ADD`` update.
Prints the figures and merge/fresh ratios (target: within 1.5x). Never gates CI."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD_LOAD = """
import resource, sys, time
from mirage_kg.cli import main
mode = sys.argv.pop(1)
if mode == "before":
    from mirage_kg.store.base import Store
    from mirage_kg.store.oxigraph import OxigraphStore
    OxigraphStore._destination = lambda self, graph: self.raw
    OxigraphStore._commit_staged = Store._commit_staged
started = time.perf_counter()
try:
    main(standalone_mode=False)
finally:
    print(f"RESULT {time.perf_counter() - started:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
"""


def generate(path: Path, facts: int, seed: int, prefix: str) -> None:
    rng = random.Random(seed)
    entities = max(10, facts // 10)
    with open(path, "w", encoding="utf-8") as handle:
        batch = []
        for _ in range(facts):
            batch.append(f"{prefix}_{rng.randrange(entities)}\trelation_{rng.randrange(12)}\t"
                         f"{prefix}_{rng.randrange(entities)}\n")
            if len(batch) >= 10_000:
                handle.write("".join(batch))
                batch.clear()
        handle.write("".join(batch))


def run(mode: str, path: Path, store: Path) -> tuple[float, float]:
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0"}
    out = subprocess.run([sys.executable, "-c", CHILD_LOAD, mode, "load", str(path), "--store", str(store),
                          "--graph", "bench"], env=env, capture_output=True, text=True, check=True)
    line = next(row for row in out.stdout.splitlines() if row.startswith("RESULT"))
    _, seconds, rss_kb = line.split()
    return float(seconds), int(rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--with-before", action="store_true", help="also time the one-transaction ADD merge")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        new, old = folder / "new.tsv", folder / "old.tsv"
        generate(new, args.facts, args.seed, "New")
        generate(old, args.facts, args.seed + 1, "Old")
        rows = []
        fresh = run("now", new, folder / "fresh")
        rows.append(("fresh load", *fresh))
        cases = [("merge", "now")] + ([("merge-before", "before")] if args.with_before else [])
        for name, mode in cases:
            store = folder / name
            run("now", old, store)  # the graph's existing content, loaded by another process
            rows.append((name, *run(mode, new, store)))
        print(f"{args.facts:,} facts; load {os.getloadavg()[0]:.1f}")
        print(f"{'case':<14}{'seconds':>10}{'peak MB':>10}{'x time':>9}{'x memory':>10}")
        for name, seconds, mb in rows:
            print(f"{name:<14}{seconds:>10.1f}{mb:>10.0f}{seconds / fresh[0]:>9.2f}{mb / fresh[1]:>10.2f}")


if __name__ == "__main__":
    main()
