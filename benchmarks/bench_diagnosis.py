"""Diagnosis@1 / @3 on GenMedGPT-5k's 248 linked questions over EMCKG: the graph's differential (what ``retrieve``
reports) beside a plain baseline on the same rows, in one run, under three readings of "the right disease".

The baseline (issue 30's): rank every condition of the KG by the specificity-weighted overlap (IDF over the
conditions) of its findings with the question's entities; a condition the question's entities name comes first. It
runs from the gold question entities (``input_KG``) and from our linker's entities (each mention's best candidate at
>= 0.7), so the gap splits into linking and ranking. Conditions and findings come from the ontology's kinds and
clinical roles (``has_finding`` / ``finding_of``), not from relation names.

Gold readings, each a set of rows:

* ``answer_or_question``: a disease the gold answer or the gold question names (the issue's 68% baseline: 171 rows);
* ``answer``: a disease among the gold answer entities (``output_KG``; the eval's metric before it read the
  reference: 115 rows);
* ``reference``: those gold answer diseases the reference answer names by label or synonym (the eval's metric now,
  ``mirage_reason.evaluation.metrics.gold_conditions``).

The ceiling lines say what no ranking from the question can reach: rows whose gold disease none of the gold question
entities touches (neither named nor having one of its findings), and the ties (conditions sharing the gold disease's
baseline score).

    python benchmarks/bench_diagnosis.py [--limit N] [--embedding-model NAME|none] [--json]

Never gates CI."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def gold_ids(names: str) -> list[str]:
    """EMCKG names (``_`` for spaces, comma-separated) -> entity CURIEs as the triples loader mints them."""
    from mirage_kg.model.namespaces import ENTITY, compress, mint

    return [compress(mint(ENTITY, n.strip())) for n in names.split(",") if n.strip()]


class Baseline:
    """Every condition's findings, read through the clinical roles, and the baseline ranking over them."""

    def __init__(self, kg) -> None:  # type: ignore[no-untyped-def]
        from mirage_kg.retrieval.differential import finding_relations
        from mirage_kg.model.namespaces import compress
        from mirage_kg.model.terms import iri_ref

        relations = finding_relations(kg)
        forward = " ".join(iri_ref(r) for r, role in relations.items() if role == "has_finding")
        backward = " ".join(iri_ref(r) for r, role in relations.items() if role == "finding_of")
        parts = []
        if forward:
            parts.append(f"{{ VALUES ?p {{ {forward} }} GRAPH ?g {{ ?c ?p ?f }} }}")
        if backward:
            parts.append(f"{{ VALUES ?q {{ {backward} }} GRAPH ?g {{ ?f ?q ?c }} }}")
        if not parts:
            raise SystemExit("the KG declares no relation with a finding role (has_finding / finding_of)")
        self.findings: dict[str, set[str]] = {}
        for row in kg.store.select(f"SELECT DISTINCT ?c ?f WHERE {{ {' UNION '.join(parts)} }}"):
            self.findings.setdefault(compress(row["c"].value), set()).add(compress(row["f"].value))
        df: dict[str, int] = {}
        for found in self.findings.values():
            for f in found:
                df[f] = df.get(f, 0) + 1
        n = len(self.findings)
        self.idf = {f: math.log((n + 1) / (d + 1)) for f, d in df.items()}
        self.conditions = sorted(self.findings)

    def scores(self, entities: Iterable[str]) -> dict[str, float]:
        q = set(entities)
        return {c: sum(self.idf[f] for f in q & found) + (1000.0 if c in q else 0.0)
                for c, found in self.findings.items()}

    def rank(self, entities: Iterable[str]) -> list[str]:
        score = self.scores(entities)
        return [c for c in sorted(self.conditions, key=lambda c: (-score[c], c)) if score[c] > 0]


def hits(ranked: list[str], gold: set[str]) -> tuple[bool, bool]:
    return bool(ranked[:1]) and ranked[0] in gold, bool(set(ranked[:3]) & gold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="Only the first N questions.")
    parser.add_argument("--embedding-model", default=None, help="sentence-transformers name or path; 'none' = off.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from eval_retrieval import emckg_questions

    from mirage_reason.evaluation.metrics import entity_key, gold_conditions

    kg, rows = emckg_questions(args.embedding_model, 1, args.limit)
    base = Baseline(kg)
    conditions = set(base.conditions)

    started = time.perf_counter()
    records = []
    for i, row in enumerate(rows):
        gold_q, gold_a = gold_ids(row["input_KG"]), gold_ids(row["output_KG"])
        answer_dx = {c for c in gold_a if c in conditions}
        question_dx = {c for c in gold_q if c in conditions}
        named = gold_conditions(kg, gold_a, row["output"]) if answer_dx else set()
        reference_dx = {c for c in answer_dx if entity_key(c) in named}
        mentions = kg.link(row["input"], top=5)
        linked = [m.best.entity.id for m in mentions if m.best is not None and m.best.score >= 0.7]
        result = kg.retrieve(row["input"], budget=0)
        differential = [c.entity.id for c in result.differential.candidates] if result.differential else []
        records.append({"i": i, "gold_q": gold_q, "answer": answer_dx, "question": question_dx,
                        "reference": reference_dx, "linked": linked, "differential": differential})
    elapsed = time.perf_counter() - started

    readings: dict[str, Callable[[dict], set[str]]] = {
        "answer_or_question": lambda r: r["answer"] | r["question"],
        "answer": lambda r: r["answer"],
        "reference": lambda r: r["reference"],
    }
    methods: dict[str, Callable[[dict], list[str]]] = {
        "baseline_gold_entities": lambda r: base.rank(r["gold_q"]),
        "baseline_linked_entities": lambda r: base.rank(r["linked"]),
        "differential": lambda r: r["differential"],
    }
    out: dict[str, object] = {"questions": len(rows), "seconds": round(elapsed, 1)}
    for reading, gold_of in readings.items():
        scored = [r for r in records if gold_of(r)]
        table: dict[str, object] = {"rows": len(scored)}
        for name, ranked_of in methods.items():
            pairs = [hits(ranked_of(r), gold_of(r)) for r in scored]
            table[name] = {"dx@1": round(statistics.fmean(p[0] for p in pairs), 3) if pairs else None,
                           "dx@3": round(statistics.fmean(p[1] for p in pairs), 3) if pairs else None}
        # the ceiling from the gold question entities: gold diseases no question entity touches, and ties
        unreachable = tie_sizes = 0
        expected = []
        for r in scored:
            score = base.scores(r["gold_q"])
            best_gold = max(score[c] for c in gold_of(r))
            if best_gold <= 0:
                unreachable += 1
                expected.append(0.0)
                continue
            top = max(score.values())
            tied = [c for c in base.conditions if score[c] == top]
            tie_sizes += len(tied) > 1 and best_gold == top
            expected.append(len(set(tied) & gold_of(r)) / len(tied))  # a random pick among the tied
        table["ceiling"] = {
            "gold_disease_untouched_by_gold_question_entities": unreachable,
            "reachable_share": round(1 - unreachable / len(scored), 3) if scored else None,
            "gold_disease_tied_first_with_others": tie_sizes,
            "baseline_gold_entities_dx@1_random_tie_break": round(statistics.fmean(expected), 3) if expected
            else None,
        }
        out[reading] = table
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"GenMedGPT-5k-linked over EMCKG: {len(rows)} questions, {elapsed:.1f} s")
    for reading in readings:
        table = out[reading]  # type: ignore[assignment]
        print(f"\ngold = {reading} ({table['rows']} rows)")  # type: ignore[index]
        for name in methods:
            fig = table[name]  # type: ignore[index]
            print(f"  {name:<26} dx@1 {fig['dx@1']}  dx@3 {fig['dx@3']}")
        print("  ceiling: " + ", ".join(f"{k} {v}" for k, v in table["ceiling"].items()))  # type: ignore[index]


if __name__ == "__main__":
    main()
