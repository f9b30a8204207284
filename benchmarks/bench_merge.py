"""Merging into (or replacing) a graph that already holds data, against a fresh load of the same triples, in one run.

    python benchmarks/bench_merge.py [--facts 300000] [--seed 0] [--repeat 1] [--with-before]

Each case runs in a fresh process on a fresh on-disk store (wall time and peak RSS of that process;
``mirage-kg load --no-index``, so the figures are the store's load, not the index step after it):
- fresh: ``mirage-kg load`` of the triple file into an empty store;
- merge: the same load into a store whose graph already holds as many other facts (loaded by an earlier process);
- replace: the same load as a replace of that graph (``Store.replacing``, what ``build-default --force`` does);
- with ``--with-before``, the two ways merges went before, for comparison: ``merge-scratch`` (staged in a
  scratch store, then streamed into the graph: parse and index twice) and ``merge-ADD`` (staged in the store and
  committed with one in-memory ``ADD`` update).
Then Ctrl-C late in a load: a merge is sent SIGINT when half of a fresh load's time has passed, and the seconds
from the signal to the process's exit (the rollback included) are shown.
``--repeat`` runs every case that many times and reports the median. Prints merge/fresh ratios (target: within
1.5x). Never gates CI."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_LOAD = """
import resource, sys, time
from mirage_kg.cli import main
mode = sys.argv.pop(1)
from mirage_kg.store.base import Store
from mirage_kg.store.oxigraph import OxigraphStore
if mode in ("scratch", "ADD"):  # no rollback checkpoint: the load is staged aside, as before
    OxigraphStore._take_checkpoint = lambda self, graph: None
if mode == "ADD":
    OxigraphStore._destination = lambda self, graph: self.raw
    OxigraphStore._commit_staged = Store._commit_staged
if mode == "replace":
    plain_load = OxigraphStore.load
    def replacing_load(self, data, **options):
        with self.replacing(options["graph"]):
            return plain_load(self, data, **options)
    OxigraphStore.load = replacing_load
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
                          "--graph", "bench", "--no-index"], env=env, capture_output=True, text=True, check=True)
    line = next(row for row in out.stdout.splitlines() if row.startswith("RESULT"))
    _, seconds, rss_kb = line.split()
    return float(seconds), int(rss_kb) / 1024


def interrupt_late(path: Path, store: Path, after: float) -> float | None:
    """Seconds from a SIGINT ``after`` seconds into a load to the end of the process (None: it ended first)."""
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "mirage_kg.cli", "load", str(path), "--store", str(store),
                             "--graph", "bench", "--no-index"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    signalled = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    if proc.returncode == 0:
        return None
    if proc.returncode != 1 or "interrupt" not in err:
        raise SystemExit(f"the interrupted load did not stop as expected (exit {proc.returncode}): {err}")
    return time.perf_counter() - signalled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (the median is shown)")
    parser.add_argument("--with-before", action="store_true", help="also time the two earlier ways to merge")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        new, old = folder / "new.tsv", folder / "old.tsv"
        generate(new, args.facts, args.seed, "New")
        generate(old, args.facts, args.seed + 1, "Old")
        cases = [("fresh load", "now", False), ("merge", "now", True), ("replace", "replace", True)]
        if args.with_before:
            cases += [("merge-scratch", "scratch", True), ("merge-ADD", "ADD", True)]
        loads = []
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
        for attempt in range(args.repeat):  # interleaved, so a busy spell of the machine hits every case
            for name, mode, filled in cases:
                store = folder / f"{name}-{attempt}"
                if filled:
                    run("now", old, store)  # the graph's existing content, loaded by another process
                timings[name].append(run(mode, new, store))
                loads.append(os.getloadavg()[0])
                shutil.rmtree(store)
        rows = [(name, statistics.median(t for t, _ in runs), statistics.median(m for _, m in runs))
                for name, runs in timings.items()]
        fresh = rows[0][1:]
        print(f"{args.facts:,} facts; {args.repeat} run(s) per case; load average {min(loads):.1f}-{max(loads):.1f}")
        print(f"{'case':<14}{'seconds':>10}{'peak MB':>10}{'x time':>9}{'x memory':>10}")
        for name, seconds, mb in rows:
            print(f"{name:<14}{seconds:>10.1f}{mb:>10.0f}{seconds / fresh[0]:>9.2f}{mb / fresh[1]:>10.2f}")
        store = folder / "interrupted"
        run("now", old, store)
        stop = interrupt_late(new, store, 0.5 * fresh[0])
        print(f"Ctrl-C at {0.5 * fresh[0]:.1f} s into a merge: " + (
            f"exited {stop:.1f} s after the signal (rolled back)" if stop is not None else
            "the load had ended first; use more --facts"))


if __name__ == "__main__":
    main()
