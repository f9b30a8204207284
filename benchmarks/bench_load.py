"""Load speed: ``mirage-kg load`` of a generated triple file against pyoxigraph's own ``bulk_load`` of the same
triples pre-written as N-Triples, each in a fresh process and a fresh on-disk store, in one run.

    python benchmarks/bench_load.py [--facts 1000000] [--seed 0]

Prints wall time and peak RSS of each and the ratio (target <= 1.5, aim 1.3). Never gates CI."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_BULK = """
import sys, pyoxigraph as ox
store = ox.Store(sys.argv[1])
store.bulk_load(path=sys.argv[2], format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode("urn:bench:g"))
store.flush()
print(len(store))
"""


def generate(path: Path, facts: int, seed: int) -> None:
    rng = random.Random(seed)
    entities = max(10, facts // 10)
    relations = [f"relation_{i}" for i in range(12)]
    with open(path, "w", encoding="utf-8") as handle:
        batch = []
        for _ in range(facts):
            h = int(rng.paretovariate(1.2) * 7) % entities
            batch.append(f"Concept_{h}\t{rng.choice(relations)}\tConcept_{rng.randrange(entities)}\n")
            if len(batch) >= 10_000:
                handle.write("".join(batch))
                batch.clear()
        handle.write("".join(batch))


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MiB and stdout of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "MIRAGE_KG_PROGRESS": "0"})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[:4]} failed: {err}")
    return wall, usage.ru_maxrss // 1024, out.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.loaders.triples import TriplesLoader

    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        tmpdir = Path(tmp)
        tsv, nt = tmpdir / "facts.tsv", tmpdir / "facts.nt"
        generate(tsv, args.facts, args.seed)
        # The baseline gets exactly the triples our loader writes (facts, labels, types), as N-Triples.
        with open(nt, "w", encoding="utf-8") as handle:
            for chunk in TriplesLoader().lines(tsv, LoadOptions(), LoadReport()):
                handle.write(chunk)
        ours = timed([sys.executable, "-m", "mirage_kg.cli", "load", str(tsv), "--store", str(tmpdir / "ours")])
        base = timed([sys.executable, "-c", CHILD_BULK, str(tmpdir / "base"), str(nt)])
        print(f"{'':28}{'wall s':>10}{'peak MiB':>10}")
        print(f"{'mirage-kg load (tsv)':28}{ours[0]:>10.2f}{ours[1]:>10}")
        print(f"{'pyoxigraph bulk_load (nt)':28}{base[0]:>10.2f}{base[1]:>10}")
        print(f"facts={args.facts:,} triples in baseline store={int(base[2]):,}")
        print(f"ratio (ours / bulk_load): {ours[0] / base[0]:.2f}   target <= 1.5 (aim 1.3)")


if __name__ == "__main__":
    main()
