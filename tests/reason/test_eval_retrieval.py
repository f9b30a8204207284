"""The ``retrieve`` pipeline's figures on the real EMCKG graph are those of ``retrieval_metrics`` (the definitions
``benchmarks/eval_retrieval.py`` reports), question by question."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_support import shared_file

from mirage_kg import KnowledgeGraph, open_store
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_reason.evaluation.datasets import load_dataset
from mirage_reason.evaluation.metrics import retrieval_metrics
from mirage_reason.evaluation.session import EvalRequest, evaluate


@pytest.mark.slow
def test_retrieve_pipeline_matches_retrieval_metrics(tmp_path: Path) -> None:
    triples = shared_file("emckg", "triples.tsv")
    linked = shared_file("genmedgpt5k", "linked_248.jsonl")
    examples = load_dataset("genmedgpt5k-linked", linked, limit=12, seed=3)
    run = evaluate(EvalRequest(dataset="genmedgpt5k-linked", data=str(linked), kg=str(triples),
                               pipelines=("retrieve",), output=str(tmp_path / "run"), bertscore=False,
                               progress=False), examples=examples)

    store = open_store(tmp_path / "reference", create=True)  # a separate store, loaded the benchmark's way
    get_loader("triples").load(store, triples, LoadOptions(), LoadReport())
    kg = KnowledgeGraph(store)
    by_id = {r["example_id"]: r for r in run.records}
    for example in examples:
        expected = retrieval_metrics(kg.retrieve(example.question, budget=100), example.gold_question_entities,
                                     example.gold_answer_entities)
        record = by_id[example.id]
        assert {k: record[k] for k in expected} == expected, example.id
    summary = run.report["results"]["retrieve"]
    assert summary["examples"] == 12 and 0 < summary["evidence_recall"] <= 1 and summary["evidence_size"] <= 100
