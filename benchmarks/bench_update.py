"""Updating a graph to a new release against loading the new release afresh, in one run, each step a fresh
process (wall time and peak RSS from ``wait4``), on generated releases of about ``--triples`` triples:

- ``snomed``: an RF2 Snapshot and a Delta that changes about ``--changed`` of its relationships (half
  inactivated, half new IS-A rows) plus as many description rewordings; ``load --update DELTA`` against a fresh
  load of the later Snapshot (the Snapshot with the Delta applied);
- ``triples``: a ``head<TAB>relation<TAB>tail`` file and its successor with ``--changed`` of its facts re-pointed:
  ``load --update`` (only the rows that differ from the previous file are parsed) against a fresh load of the
  successor;
- ``umls``: an RRF release and its successor with ``--changed`` of its MRREL rows re-pointed and half as many
  MRCONSO atoms reworded: ``load --update`` (only the rows naming the changed CUIs are parsed) against a fresh load
  of the successor.

Loads run with ``--no-index`` (the index step after a load is measured by its own benchmarks).

    python benchmarks/bench_update.py [--triples 5000000] [--changed 0.01] [--shapes snomed,triples,umls]

Prints update and fresh-load seconds, their ratio (target <= 0.3), the same for CPU seconds (a shared machine's load
moves wall time more), peak RSS (target < 2 GB), and checks that the updated graph holds as many triples as the
fresh one. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import timed  # noqa: E402  (wall seconds, peak RSS in MiB and stdout of one child process)
from bench_sources import (  # noqa: E402
    SNOMED_TRIPLES_PER_CONCEPT,
    UMLS_TRIPLES_PER_CONCEPT,
    phrase,
    write_snomed,
    write_umls,
)

COUNT = """
import sys
from mirage_kg.store import OxigraphStore
store = OxigraphStore(sys.argv[1], read_only=True)
print(store.triple_count(sys.argv[2]))
"""

RELEASED = """
import sys
from mirage_kg.model.namespaces import compress
from mirage_kg.releases import releases
from mirage_kg.store import OxigraphStore
print(" ".join(compress(g) for g in releases(OxigraphStore(sys.argv[1], read_only=True))))
"""

# The child's own peak: ru_maxrss (what ``timed`` reads) keeps the RSS the bench process had when it forked the
# child, through exec, so it over-reports a child started by a bench holding a generated release in memory.
# VmHWM is the peak of the child's own address space, written to stderr at exit.
_PEAK = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        kb = next((line.split()[1] for line in status if line.startswith("VmHWM:")), "0")
    sys.stderr.write(f"\\nchild-peak-kb {kb}\\n")
atexit.register(peak)
sys.argv = ["mirage-kg", *sys.argv[1:]]
runpy.run_module("mirage_kg.cli", run_name="__main__")
"""


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", _PEAK, *args]


def timed_own_peak(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, the child's own peak RSS in MiB (VmHWM) and its stdout; its CPU seconds (user + system, all
    threads) go to ``CPU_SECONDS`` (on a shared machine wall time follows the others' load, CPU time much less)."""
    import resource
    import subprocess
    import time

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    start, start_cpu = time.perf_counter(), cpu()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MIRAGE_KG_PROGRESS": "0"},
                          check=False)
    wall = time.perf_counter() - start
    CPU_SECONDS.append(cpu() - start_cpu)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[3:6]} failed: {done.stderr[-2000:]}")
    peaks = [int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("child-peak-kb ")]
    return wall, (peaks[-1] // 1024 if peaks else 0), done.stdout.strip()


CPU_SECONDS: list[float] = []


# --- SNOMED CT: a Snapshot, a Delta, and the later Snapshot ------------------------------------------------------
def snomed_pair(work: Path, triples: int, changed: float, seed: int) -> tuple[Path, Path, Path]:
    old = work / "snomed_20990131"
    write_snomed(old, max(50, int(triples / SNOMED_TRIPLES_PER_CONCEPT)), seed)
    rng = random.Random(seed + 1)
    terminology = old / "Snapshot" / "Terminology"
    rel_file = terminology / "sct2_Relationship_Snapshot_INT_20990131.txt"
    desc_file = terminology / "sct2_Description_Snapshot-en_INT_20990131.txt"
    rels = rel_file.read_bytes().decode("utf-8").split("\r\n")[1:-1]
    descs = desc_file.read_bytes().decode("utf-8").split("\r\n")[1:-1]
    count = max(2, int(len(rels) * changed))
    delta_rels: dict[str, str] = {}
    for line in rng.sample(rels, count // 2):
        fields = line.split("\t")
        fields[1], fields[2] = "20990228", "0"
        delta_rels[fields[0]] = "\t".join(fields)
    concepts = [line.split("\t")[4] for line in rng.sample(rels, count - count // 2)]
    for n, source in enumerate(concepts):
        target = rng.choice(concepts)
        if target != source:
            delta_rels[f"{n}31"] = (f"{n}31\t20990228\t1\t900000000000207008\t{source}\t{target}\t0\t116680003\t"
                                     "900000000000011006\t900000000000451002")
    delta_descs: dict[str, str] = {}
    for line in rng.sample(descs, max(1, int(len(descs) * changed / 2))):
        fields = line.split("\t")
        if fields[6] == "900000000000013009":
            fields[1], fields[7] = "20990228", phrase(rng)
            delta_descs[fields[0]] = "\t".join(fields)
    delta, later = work / "snomed_20990228_delta" / "Delta", work / "snomed_20990228" / "Snapshot"
    for folder, kind in ((delta, "Delta"), (later, "Snapshot")):
        for sub in ("Terminology", "Refset/Language"):
            (folder / sub).mkdir(parents=True)
    for path in sorted((old / "Snapshot").rglob("*.txt")):
        lines = path.read_bytes().decode("utf-8").split("\r\n")[:-1]
        changes = delta_rels if "Relationship" in path.name else delta_descs if "Description" in path.name else {}
        relative = path.relative_to(old / "Snapshot")
        name = str(relative).replace("20990131", "20990228")
        (delta / name.replace("Snapshot", "Delta")).write_text(
            "\r\n".join([lines[0], *changes.values()]) + "\r\n", encoding="utf-8", newline="")
        pending = dict(changes)
        merged = [pending.pop(line.split("\t", 1)[0], line) for line in lines] + list(pending.values())
        (later / name).write_text("\r\n".join(merged) + "\r\n", encoding="utf-8", newline="")
    return old / "Snapshot", delta, later


# --- a triple file and its successor --------------------------------------------------------------------------
def triples_pair(work: Path, triples: int, changed: float, seed: int) -> tuple[Path, Path, Path]:
    rng = random.Random(seed)
    facts = max(100, int(triples / 1.25))
    entities = max(10, facts // 10)
    relations = [f"relation_{i}" for i in range(12)]
    rows = [f"Concept_{int(rng.paretovariate(1.2) * 7) % entities}\t{rng.choice(relations)}\t"
            f"Concept_{rng.randrange(entities)}\n" for _ in range(facts)]
    old, new = work / "v1" / "facts.tsv", work / "v2" / "facts.tsv"
    old.parent.mkdir(parents=True)
    new.parent.mkdir(parents=True)
    old.write_text("".join(rows), encoding="utf-8")
    for index in rng.sample(range(facts), int(facts * changed)):
        head, rel, _ = rows[index].split("\t")
        rows[index] = f"{head}\t{rel}\tConcept_{rng.randrange(entities)}\n"
    new.write_text("".join(rows), encoding="utf-8")
    return old, new, new


# --- a UMLS release and its successor --------------------------------------------------------------------------
def umls_pair(work: Path, triples: int, changed: float, seed: int) -> tuple[Path, Path, Path]:
    old, new = work / "2099AA", work / "2099AB"
    concepts = max(20, int(triples / UMLS_TRIPLES_PER_CONCEPT))
    write_umls(old, concepts, seed)
    rng = random.Random(seed + 1)
    (new / "META").mkdir(parents=True)
    (new / "release.dat").write_text("umls.release.name=2099AB\n")
    for name in ("MRSTY.RRF", "MRSAB.RRF"):
        (new / "META" / name).write_bytes((old / "META" / name).read_bytes())
    for name, share in (("MRREL.RRF", changed), ("MRCONSO.RRF", changed / 2)):
        rows = (old / "META" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        for index in rng.sample(range(len(rows)), max(1, int(len(rows) * share))):
            fields = rows[index].split("|")
            if name == "MRREL.RRF":
                fields[4] = f"C{rng.randint(1, concepts):07d}"  # re-pointed to another concept
            else:
                fields[14] = phrase(rng)  # reworded
            rows[index] = "|".join(fields)
        (new / "META" / name).write_text("".join(rows), encoding="utf-8")
    return old, new, new


def measure(shape: str, work: Path, triples: int, changed: float, seed: int) -> dict[str, object]:
    make = {"snomed": snomed_pair, "triples": triples_pair, "umls": umls_pair}[shape]
    old, update_with, fresh_release = make(work / shape, triples, changed, seed)
    updated, fresh = work / shape / "store-updated", work / shape / "store-fresh"
    # the loads alone: the index step after a load (labels, embeddings) is measured by bench_index/bench_scale
    load_s, load_mb, _ = timed_own_peak(cli("load", str(old), "--store", str(updated), "--no-index"))
    (graph,) = timed([sys.executable, "-c", RELEASED, str(updated)])[2].split()  # not `stats`: it counts the KG
    update_s, update_mb, output = timed_own_peak(cli("load", "--update", str(update_with), "--store", str(updated),
                                                     "--no-index"))
    update_cpu = CPU_SECONDS[-1]
    fresh_s, fresh_mb, _ = timed_own_peak(cli("load", str(fresh_release), "--store", str(fresh), "--graph", graph,
                                              "--no-index"))
    fresh_cpu = CPU_SECONDS[-1]
    counts = [int(timed([sys.executable, "-c", COUNT, str(s), _expand(graph)])[2]) for s in (updated, fresh)]
    summary = next((line.strip() for line in output.splitlines() if line.strip().startswith("triples:")), "")
    compared = next((line.strip() for line in output.splitlines() if line.strip().startswith("compared:")), "")
    return {"shape": shape, "triples": counts[1], "load_v1_s": load_s, "update_s": update_s, "fresh_s": fresh_s,
            "ratio": update_s / fresh_s, "update_cpu_s": update_cpu, "fresh_cpu_s": fresh_cpu,
            "cpu_ratio": update_cpu / fresh_cpu if fresh_cpu else 0.0, "update_peak_mb": update_mb, "fresh_peak_mb": fresh_mb,
            "load_peak_mb": load_mb, "same_count": counts[0] == counts[1], "diff": summary,
            "compared": compared}


def _expand(curie: str) -> str:
    from mirage_kg.model.namespaces import expand

    return expand(curie)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, default=5_000_000, help="about this many triples per release")
    parser.add_argument("--changed", type=float, default=0.01, help="share of facts the successor changes")
    parser.add_argument("--shapes", default="snomed,triples,umls")
    parser.add_argument("--seed", type=int, default=20250818)
    parser.add_argument("--workdir", help="make the temporary folder here")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-update-", dir=args.workdir) as tmp:
        for shape in args.shapes.split(","):
            rows.append(measure(shape, Path(tmp), args.triples, args.changed, args.seed))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; --triples {args.triples:,} --changed {args.changed}")
    print(f"{'shape':8} {'triples':>11} {'update s':>9} {'fresh s':>8} {'ratio':>6} {'update peak MB':>15} "
          f"{'fresh peak MB':>14} {'same':>5}  diff")
    for r in rows:
        print(f"{r['shape']:8} {r['triples']:>11,} {r['update_s']:>9.1f} {r['fresh_s']:>8.1f} {r['ratio']:>6.2f} "
              f"{r['update_peak_mb']:>15.0f} {r['fresh_peak_mb']:>14.0f} {str(r['same_count']):>5}  {r['diff']}")
        print(f"{'':8} {r['compared']}")
        print(f"{'':8} CPU seconds (user + system): update {r['update_cpu_s']:.1f}, fresh {r['fresh_cpu_s']:.1f}, "
              f"ratio {r['cpu_ratio']:.2f}")


if __name__ == "__main__":
    main()
