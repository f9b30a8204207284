"""Evaluation of answer pipelines (MIRAGE, its ablations and baselines) on medical QA sets: datasets, pipelines,
metrics, a resumable runner and reports. ``mirage-kg eval`` is its command line; :func:`evaluate` its Python API.

Importing this package is light; the KG, the models and matplotlib load only when a run needs them."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "Example": "mirage_reason.evaluation.datasets",
    "load_dataset": "mirage_reason.evaluation.datasets",
    "DATASETS": "mirage_reason.evaluation.datasets",
    "PIPELINE_NAMES": "mirage_reason.evaluation.pipelines",
    "Pipeline": "mirage_reason.evaluation.pipelines",
    "PipelineOutput": "mirage_reason.evaluation.pipelines",
    "build_pipeline": "mirage_reason.evaluation.pipelines",
    "BertScorer": "mirage_reason.evaluation.metrics",
    "extract_letter": "mirage_reason.evaluation.metrics",
    "retrieval_metrics": "mirage_reason.evaluation.metrics",
    "run_pipelines": "mirage_reason.evaluation.runner",
    "RunSettings": "mirage_reason.evaluation.runner",
    "summarise": "mirage_reason.evaluation.report",
    "render_html": "mirage_reason.evaluation.report",
    "EvalRequest": "mirage_reason.evaluation.session",
    "evaluate": "mirage_reason.evaluation.session",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirage_reason.evaluation' has no attribute {name!r}")
