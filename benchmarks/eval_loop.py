"""Does MIRAGE's own loop run? Per mode, over the README question on the demo KG and GenMedGPT-5k-linked questions
over EMCKG, with the default CPU engine (SmolLM2 on llama.cpp in process, ``ask``'s small-model budgets):

- chains that searched (at least one KG search), searches per chain, garbled blocks or unusable actions;
- sub-questions the model wrote (not the fallback template), over questions that link two or more entities;
- answers whose model wording survived the claim check (not replaced by the cited claims);
- evidence recall of the gold answer entities (``output_KG``): mirage's (seeds and searches), what its chains'
  own searches added beyond their seed facts, and ``retrieve``'s (the LLM-free baseline) in the same run;
- BERTScore F1 against the reference answer, mirage vs retrieve (``--bertscore``);
- seconds per question.

Modes run in the same process on the same questions, one question at a time in turn: ``structured`` (the engine
constrains the decomposition, the chains' actions, the wording and any letter: ``structured="auto"``, what ``ask``
does) and ``markers`` (the paper's free-text protocol: ``structured="never"``).

    python benchmarks/eval_loop.py [--limit 20] [--modes structured,markers] [--seed 0] [--bertscore] [--out F.json]

Figures are written to ``--out`` after every question, so a run cut short keeps what it measured. Never gates CI.
"""

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
README_QUESTION = ("I have palpitations, feel dizzy and short of breath. What could it be and what should I take?")
MODES = {"structured": "auto", "markers": "never"}
# the model's wording replaced by the cited claims, or its sentences shown apart as not supported
REPLACED = {"harmful_instruction", "unsupported_dose", "unsupported_entity", "unsupported_recommendation",
            "missing_claim", "empty_wording", "unsupported_text"}
FALLBACK = ("The knowledge graph points to", "From the knowledge graph:")  # the synthesizer's own verbalisation


def gold_ids(names: str) -> set[str]:
    from mirage_kg.model.namespaces import ENTITY, compress, mint

    return {compress(mint(ENTITY, n.strip())) for n in names.split(",") if n.strip()}


def emckg() -> Any:
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
    from mirage_kg.store import OxigraphStore, ensure_schema

    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, DATA / "emckg" / "triples.tsv", LoadOptions(), LoadReport())
    return KnowledgeGraph(store)


def answer_row(answer: Any, seconds: float, gold: set[str] | None) -> dict[str, Any]:
    """What one answer says about the loop."""
    data = answer.to_json()
    chains = answer.chains
    decomposition = data.get("decomposition") or {}
    codes = {f["code"] for f in data["flags"]}
    seed_ids = {n.id for c in chains for p in c.seed_paths for n in p.nodes}
    search_ids = {n.id for c in chains for s in c.searches for p in s.paths for n in p.nodes}
    row: dict[str, Any] = {
        "seconds": round(seconds, 2),
        "entities": len(answer.question_entities),
        "sub_questions": list(answer.sub_questions),
        "origins": decomposition.get("origins", []),
        "decomposition": decomposition.get("source"),
        "chains": len(chains),
        "modes": sorted({c.mode for c in chains}),
        "searched": sum(1 for c in chains if c.searches),
        "searches": [len(c.searches) for c in chains],
        "garbled": sum(1 for c in chains for e in c.trace if e["event"] == "garbled"),
        "chain_flags": sorted({f for c in chains for f in c.flags}),
        "worded": bool(answer.claims) and not (codes & REPLACED) and not answer.text.startswith(FALLBACK),
        "replaced": sorted(codes & REPLACED),
        "verdict": answer.support.verdict,
        "answer": answer.text,
    }
    if gold is not None:
        evidence = answer.evidence_entities()
        row["recall"] = len(gold & evidence) / len(gold) if gold else None
        row["recall_added"] = len(gold & (search_ids - seed_ids)) / len(gold) if gold else None
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    chains = sum(r["chains"] for r in rows)
    multi = [r for r in rows if r["entities"] >= 2]
    subs = [o for r in multi for o in r["origins"]]
    claimed = [r for r in rows if r["worded"] or r["replaced"]]
    out: dict[str, Any] = {
        "questions": len(rows),
        "chains_searched": f"{sum(r['searched'] for r in rows)}/{chains}",
        "searches_per_chain": round(sum(sum(r["searches"]) for r in rows) / chains, 2) if chains else None,
        "garbled": sum(r["garbled"] for r in rows),
        "model_sub_questions": f"{sum(1 for o in subs if o in ('model', 'repaired'))}/{len(subs)}",
        "wording_survived": f"{sum(1 for r in rows if r['worded'])}/{len(rows)}",
        "wording_survived_of_worded": f"{sum(1 for r in claimed if r['worded'])}/{len(claimed)}",
        "seconds_per_question": round(statistics.mean(r["seconds"] for r in rows), 1) if rows else None,
    }
    recalls = [r["recall"] for r in rows if r.get("recall") is not None]
    if recalls:
        out["evidence_recall"] = round(statistics.mean(recalls), 3)
        out["recall_added_by_searches"] = round(statistics.mean(r["recall_added"] for r in rows
                                                                if r.get("recall_added") is not None), 3)
    if any("bertscore" in r for r in rows):
        out["bertscore"] = round(statistics.mean(r["bertscore"] for r in rows if "bertscore" in r), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=20, help="GenMedGPT-5k-linked questions (0: none).")
    parser.add_argument("--modes", default="structured,markers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bertscore", action="store_true", help="Score answers against the references.")
    parser.add_argument("--no-readme", action="store_true", help="Skip the README question on the demo KG.")
    parser.add_argument("--out", default=None, help="Write the figures here (JSON) after every question.")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    questions = DATA / "genmedgpt5k" / "linked_248.jsonl"
    if args.limit and not (questions.is_file() and (DATA / "emckg" / "triples.tsv").is_file()):
        raise SystemExit(f"public data not found under {DATA} (set MIRAGE_KG_SHARED_DATA)")

    import torch

    torch.set_num_threads(1)
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.backends.llamacpp_backend import LlamaCppBackend
    from mirage_reason.pipeline.config import SMALL_MODEL_BUDGETS, MirageConfig
    from mirage_reason.pipeline.coordinator import Mirage

    backend = LlamaCppBackend("smollm2")
    configs = {m: MirageConfig(**SMALL_MODEL_BUDGETS, seed=args.seed, structured=MODES[m]) for m in modes}
    report: dict[str, Any] = {"engine": backend.engine_info, "modes": modes, "readme": {}, "genmedgpt": {}}
    for mode in modes:
        report["genmedgpt"][mode] = []

    def save() -> None:
        report["summary"] = {m: summary(report["genmedgpt"][m]) for m in modes if report["genmedgpt"][m]}
        if report["genmedgpt"] and any(report["genmedgpt"].values()) and "retrieve" in report:
            report["summary"]["retrieve"] = {k: round(statistics.mean(v), 4) for k, v in report["retrieve"].items()
                                             if v}
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")

    if not args.no_readme:
        demo = KnowledgeGraph(demo_store())
        for mode in modes:
            start = time.perf_counter()
            answer = Mirage(demo, backend, configs[mode]).answer(README_QUESTION)
            report["readme"][mode] = answer_row(answer, time.perf_counter() - start, None)
            print(f"README [{mode}] {json.dumps(report['readme'][mode], ensure_ascii=False)[:600]}", file=sys.stderr)
            save()
    if args.limit:
        kg = emckg()
        rows = [json.loads(ln) for ln in questions.read_text(encoding="utf-8").splitlines() if ln.strip()]
        rows = rows[: args.limit]
        scorer = None
        if args.bertscore:
            from mirage_reason.evaluation.metrics import BertScorer

            scorer = BertScorer()
        report["retrieve"] = {"recall": [], "bertscore": []}
        for i, row in enumerate(rows):
            gold = gold_ids(row["output_KG"])
            result = kg.retrieve(row["input"], budget=MirageConfig().retrieve_budget)
            found = result.evidence_entities()
            report["retrieve"]["recall"].append(len(gold & found) / len(gold) if gold else 0.0)
            if scorer is not None:
                report["retrieve"]["bertscore"].append(scorer.f1([result.to_text()], [row["output"]])[0])
            for mode in modes:
                start = time.perf_counter()
                answer = Mirage(kg, backend, configs[mode]).answer(row["input"])
                record = answer_row(answer, time.perf_counter() - start, gold)
                if scorer is not None:
                    record["bertscore"] = scorer.f1([answer.text], [row["output"]])[0]
                report["genmedgpt"][mode].append(record)
                print(f"[{i + 1}/{len(rows)}] {mode}: searched {record['searched']}/{record['chains']}, origins "
                      f"{record['origins']}, worded {record['worded']}, {record['seconds']} s", file=sys.stderr)
            save()
    save()
    backend.close()
    print(json.dumps({"readme": {m: {k: v for k, v in r.items() if k != "answer"} | {"answer": r["answer"][:300]}
                                 for m, r in report["readme"].items()},
                      "summary": report.get("summary", {})}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
