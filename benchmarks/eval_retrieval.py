"""Retrieval on GenMedGPT-5k's 248 linked questions over the EMCKG graph: linking recall@5 of the gold question
entities (``input_KG``) from the question text, evidence recall of the gold answer entities (``output_KG``) in what
``retrieve`` returns, and the mean evidence size, with the same retriever run from the gold question entities as a
reference line in the same run.

    python benchmarks/eval_retrieval.py [--budget 100] [--limit N] [--embedding-model NAME|none] [--json]

Targets (issue 4): evidence recall >= 0.60 at <= 100 entities, linking recall@5 >= 0.50. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("MIRAGE_KG_SHARED_DATA", ROOT.parent / "shared" / "data"))


def gold_ids(names: str) -> set[str]:
    """EMCKG names (``_`` for spaces, comma-separated) -> entity CURIEs as the triples loader mints them."""
    from mirage_kg.model.namespaces import ENTITY, compress, mint

    return {compress(mint(ENTITY, n.strip())) for n in names.split(",") if n.strip()}


def recall(gold: set[str], found: set[str]) -> float | None:
    return len(gold & found) / len(gold) if gold else None


def emckg_questions(embedding_model: str | None, threads: int = 1, limit: int = 0) -> tuple[Any, list[dict[str, Any]]]:
    """The EMCKG graph loaded in memory (a ``KnowledgeGraph``) and GenMedGPT-5k's linked rows (the first ``limit``;
    0: all); exits when the public data is absent."""
    triples = DATA / "emckg" / "triples.tsv"
    questions = DATA / "genmedgpt5k" / "linked_248.jsonl"
    if not triples.is_file() or not questions.is_file():
        raise SystemExit(f"public data not found under {DATA} (set MIRAGE_KG_SHARED_DATA)")
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass

    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
    from mirage_kg.store import OxigraphStore, ensure_schema

    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, triples, LoadOptions(), LoadReport())
    kg = KnowledgeGraph(store, embedding_model=embedding_model)
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    return kg, rows[:limit] if limit else rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=100, help="Entity budget of retrieve().")
    parser.add_argument("--limit", type=int, default=0, help="Only the first N questions.")
    parser.add_argument("--embedding-model", default=None, help="sentence-transformers name or path; 'none' = off.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on small machines).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()

    kg, rows = emckg_questions(args.embedding_model, args.threads, args.limit)
    from mirage_kg.retrieval.retriever import Retriever

    start = time.perf_counter()
    kg.linker.index  # noqa: B018 - build the indexes before timing questions
    kg.linker.matrix  # noqa: B018
    setup = time.perf_counter() - start
    retriever = Retriever(kg)
    figures: dict[str, list[float]] = {k: [] for k in ("link", "link_top5", "evidence", "size", "facts",
                                                       "gold_evidence", "gold_size", "gold_facts")}
    start = time.perf_counter()
    for row in rows:
        gold_q, gold_a = gold_ids(row["input_KG"]), gold_ids(row["output_KG"])
        result = kg.retrieve(row["input"], budget=args.budget)
        per_mention = {c.entity.id for m in result.mentions for c in m.candidates[:5]}
        top5 = {e.id for e in result.entities[:5]}
        for key, value in (("link", recall(gold_q, per_mention)), ("link_top5", recall(gold_q, top5)),
                           ("evidence", recall(gold_a, result.evidence_entities()))):
            if value is not None:
                figures[key].append(value)
        figures["size"].append(len(result.evidence_entities()))
        figures["facts"].append(len(result.evidence))
        # reference: the same retriever from the gold question entities (weight 1 each)
        known = {}
        for curie in sorted(gold_q):
            try:
                known[curie] = kg.entity(curie)
            except Exception:  # a gold name the graph lacks
                continue
        ref = retriever.retrieve_linked(row["input"], (), {e.iri: 1.0 for e in known.values()},
                                        {e.iri: e for e in known.values()}, {}, args.budget)
        value = recall(gold_a, ref.evidence_entities())
        if value is not None:
            figures["gold_evidence"].append(value)
        figures["gold_size"].append(len(ref.evidence_entities()))
        figures["gold_facts"].append(len(ref.evidence))
    elapsed = time.perf_counter() - start

    def mean(key: str) -> float:
        return statistics.fmean(figures[key]) if figures[key] else float("nan")

    out = {
        "questions": len(rows),
        "budget": args.budget,
        "linking_recall_at_5": round(mean("link"), 4),
        "linking_recall_top5_entities": round(mean("link_top5"), 4),
        "evidence_recall": round(mean("evidence"), 4),
        "mean_evidence_entities": round(mean("size"), 1),
        "max_evidence_entities": max(figures["size"], default=0),
        "mean_evidence_facts": round(mean("facts"), 1),
        "reference_from_gold_entities": {"evidence_recall": round(mean("gold_evidence"), 4),
                                         "mean_evidence_entities": round(mean("gold_size"), 1),
                                         "mean_evidence_facts": round(mean("gold_facts"), 1)},
        "seconds_per_question": round(elapsed / max(len(rows), 1), 3),
        "index_setup_seconds": round(setup, 1),
        "embeddings": kg.linker.matrix is not None,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"GenMedGPT-5k linked questions: {out['questions']}, EMCKG graph, budget {args.budget} entities, "
          f"embeddings {'on' if out['embeddings'] else 'off'}")
    print(f"{'figure':<48}{'value':>10}{'target':>10}")
    print(f"{'linking recall@5 (gold question entities)':<48}{out['linking_recall_at_5']:>10.3f}{'>= 0.50':>10}")
    print(f"{'  ... among the 5 best linked entities':<48}{out['linking_recall_top5_entities']:>10.3f}")
    print(f"{'evidence recall (gold answer entities)':<48}{out['evidence_recall']:>10.3f}{'>= 0.60':>10}")
    print(f"{'mean evidence size (entities)':<48}{out['mean_evidence_entities']:>10.1f}{'<= 100':>10}")
    print(f"{'  max evidence size (entities)':<48}{out['max_evidence_entities']:>10}")
    print(f"{'  mean evidence size (facts)':<48}{out['mean_evidence_facts']:>10.1f}")
    ref = out["reference_from_gold_entities"]
    print(f"{'reference, from the gold question entities:':<48}")
    print(f"{'  evidence recall':<48}{ref['evidence_recall']:>10.3f}")
    print(f"{'  mean evidence size (entities)':<48}{ref['mean_evidence_entities']:>10.1f}")
    print(f"{'seconds per question (retrieve)':<48}{out['seconds_per_question']:>10.3f}")
    print(f"{'index set-up seconds (labels + embeddings)':<48}{out['index_setup_seconds']:>10.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
