"""Run pipelines over examples, streaming one scored JSON line per (pipeline, example) to ``results.jsonl``.

A line's key is the pipeline, the example id and a hash of the run's settings; a run started again with the same
arguments skips every key already written, so a killed run resumes where it stopped and its final report (built
only from the file) equals that of a run that was never interrupted, timings aside.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg import MirageError

from mirage_reason.evaluation.datasets import Example
from mirage_reason.evaluation.metrics import (BertScorer, answer_conditions, citation_counts, diagnosis_at,
                                              evidence_recall, extract_letter, gold_conditions, recall)
from mirage_reason.evaluation.pipelines import Pipeline, PipelineOutput

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

__all__ = ["RESULTS_FILE", "ResultStore", "RunOutcome", "RunSettings", "done_records", "run_pipelines", "score_output"]

RESULTS_FILE = "results.jsonl"


@dataclass(frozen=True)
class RunSettings:
    """Everything that changes an example's result; its hash is part of every result key.

    The pipeline list, ``--limit``, the batch size and the output options are not in it: adding a pipeline or
    raising the limit reuses what is already done."""

    dataset: str
    data: str | None = None
    kg: str | None = None
    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    seed: int = 0
    reasoner: Mapping[str, Any] = field(default_factory=dict)
    bertscore: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "data": self.data, "kg": self.kg, "backend": self.backend,
                "model": self.model, "base_url": self.base_url, "seed": self.seed,
                "reasoner": dict(self.reasoner), "bertscore": self.bertscore}

    @property
    def fingerprint(self) -> str:
        return _digest(self.to_json())

    def fingerprint_for(self, uses_model: bool) -> str:
        """A model-free pipeline's results do not depend on the backend or the sampling settings: leaving those
        out lets a model run reuse the ``retrieve`` results of an earlier one."""
        if uses_model:
            return self.fingerprint
        data = self.to_json()
        for key in ("backend", "model", "base_url"):
            data.pop(key)
        data["reasoner"] = {k: v for k, v in data["reasoner"].items() if k == "retrieve_budget"}
        return _digest(data)


def _digest(data: Mapping[str, Any]) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def question_digest(example: Example) -> str:
    """Guards against an edited dataset file: a changed question under the same id is not 'done'."""
    blob = json.dumps([example.question, list(example.options), example.reference, example.gold_letter],
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def result_key(pipeline: str, example_id: str, fingerprint: str) -> str:
    return f"{pipeline}\t{example_id}\t{fingerprint}"


class ResultStore:
    """``results.jsonl``: appended a line at a time, flushed and fsynced, so a kill loses at most the line being
    written; a torn last line is cut off before the next append."""

    def __init__(self, path: FsPath) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._repair()

    def _repair(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb+") as handle:
            data = handle.read()
            if data and not data.endswith(b"\n"):
                handle.truncate(data.rfind(b"\n") + 1)

    def records(self) -> list[dict[str, Any]]:
        """Every complete record in the file (a line that does not parse is ignored)."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and "key" in record:
                    out.append(record)
        return out

    def append(self, records: Sequence[Mapping[str, Any]]) -> None:
        if not records:
            return
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


def score_output(example: Example, output: PipelineOutput, *, pipeline: str, fingerprint: str,
                 kg: KnowledgeGraph | None, seconds_total: float) -> dict[str, Any]:
    """One result line: the output and every metric that does not need a model (BERTScore is added in batches)."""
    letter = None
    correct = None
    if example.kind == "choice":
        letter = output.letter if output.picks_letter else extract_letter(output.answer, example.options)
        if example.gold_letter is not None:
            correct = letter == example.gold_letter
    citations_valid = citations_total = None
    if output.cited is not None and kg is not None:
        citations_valid, citations_total = citation_counts(kg, output.cited)
    diagnosis: dict[int, bool | None] = {1: None, 3: None}
    conditions = output.conditions
    gold: set[str] = set()
    if kg is not None and example.gold_answer_entities:
        gold = gold_conditions(kg, example.gold_answer_entities, example.reference)
        if gold:
            if conditions is None:
                conditions = tuple(answer_conditions(kg, output.answer))
            diagnosis = {k: diagnosis_at(gold, conditions, k) for k in diagnosis}
    return {
        "key": result_key(pipeline, example.id, fingerprint),
        "pipeline": pipeline,
        "example_id": example.id,
        "config_hash": fingerprint,
        "question_digest": question_digest(example),
        "kind": example.kind,
        "answer": output.answer,
        "abstained": output.abstained,
        "letter": letter,
        "gold_letter": example.gold_letter,
        "correct": correct,
        "bertscore_f1": None,
        "linking_recall": recall(example.gold_question_entities, output.linked) if output.linked is not None
        else None,
        "evidence_recall": evidence_recall(example.gold_answer_entities, output.evidence_entities)
        if output.evidence_entities is not None else None,
        # in entities, the unit of the retrieval budget (as benchmarks/eval_retrieval.py counts it), and in facts
        "evidence_size": len(output.evidence_entities) if output.evidence_entities is not None else None,
        "evidence_facts": output.evidence_facts,
        "conditions": list(conditions) if conditions is not None else None,
        "gold_conditions": sorted(gold),
        "diagnosis_at_1": diagnosis[1],
        "diagnosis_at_3": diagnosis[3],
        "citations_valid": citations_valid,
        "citations_total": citations_total,
        "tokens": dict(output.tokens),
        "prompt_tokens": output.prompt_tokens,
        "seconds": {k: round(v, 6) for k, v in output.seconds.items()},
        "seconds_total": round(seconds_total, 6),
        "seconds_latency": round(output.latency if output.latency is not None else seconds_total, 6),
        "trace": output.trace,
    }


def _error_record(example: Example, pipeline: str, fingerprint: str, exc: BaseException) -> dict[str, Any]:
    return {"key": result_key(pipeline, example.id, fingerprint), "pipeline": pipeline, "example_id": example.id,
            "config_hash": fingerprint, "question_digest": question_digest(example), "kind": example.kind,
            "error": f"{type(exc).__name__}: {exc}"}


def done_records(store: ResultStore, examples: Sequence[Example],
                 fingerprints: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """The finished records of this run's keys (the last line of a key wins), and per pipeline how many keys end
    in an error line (errors are not finished: the next run retries them)."""
    digests: dict[str | None, str] = {e.id: question_digest(e) for e in examples}  # looked up by a record's id
    wanted = {result_key(p, e.id, fp): p for p, fp in fingerprints.items() for e in examples}
    latest: dict[str, dict[str, Any]] = {}
    for record in store.records():
        if record["key"] in wanted and record.get("question_digest") == digests.get(record.get("example_id")):
            latest[record["key"]] = record
    done = {k: r for k, r in latest.items() if "error" not in r}
    errors: dict[str, int] = {}
    for key, record in latest.items():
        if "error" in record:
            errors[wanted[key]] = errors.get(wanted[key], 0) + 1
    return done, errors


@contextmanager
def _progress(total: int, completed: int, enabled: bool) -> Iterator[Callable[[str, int], None]]:
    """``advance(description, n)``: a rich bar with an ETA on stderr, or nothing when disabled."""
    if not enabled or total == 0:
        yield lambda description, n: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True)) as bar:
        task = bar.add_task("eval", total=total, completed=completed)

        def advance(description: str, n: int) -> None:
            bar.update(task, description=description, advance=n)

        yield advance


def progress_enabled() -> bool:
    flag = os.environ.get("MIRAGE_KG_PROGRESS")
    if flag is not None:
        return flag not in ("0", "false", "no")
    return sys.stderr.isatty()


def _chunks(items: Sequence[Example], size: int) -> Iterator[list[Example]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


@dataclass
class RunOutcome:
    """The finished records of a run (pipeline then example order) and the error count per pipeline."""

    records: list[dict[str, Any]]
    errors: dict[str, int]
    fingerprints: dict[str, str]


def run_pipelines(examples: Sequence[Example], pipelines: Sequence[Pipeline], settings: RunSettings,
                  output_dir: FsPath, *, batch_size: int = 8, kg: Callable[[], KnowledgeGraph | None] | None = None,
                  scorer: BertScorer | None = None, progress: bool | None = None) -> RunOutcome:
    """Run what is not done yet and return every finished record of this run.

    ``kg`` gives the graph for citation checks (called only when a pipeline cited something); ``scorer`` adds
    BERTScore F1 for free-text examples with a reference. A ``MirageError`` on one example is written as an error
    line and retried by the next run; a retryable backend error (server down) stops the run."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    store = ResultStore(output_dir / RESULTS_FILE)
    fingerprints = {p.name: settings.fingerprint_for(p.uses_model) for p in pipelines}
    done, _ = done_records(store, examples, fingerprints)
    total = len(examples) * len(pipelines)
    with _progress(total, len(done), progress_enabled() if progress is None else progress) as advance:
        for pipeline in pipelines:
            fingerprint = fingerprints[pipeline.name]
            todo = [e for e in examples if result_key(pipeline.name, e.id, fingerprint) not in done]
            for batch in _chunks(todo, batch_size):
                records = _run_batch(pipeline, batch, fingerprint, kg, scorer)
                store.append(records)
                for record in records:
                    if "error" not in record:
                        done[record["key"]] = record
                advance(pipeline.name, len(batch))
    done, errors = done_records(store, examples, fingerprints)
    order = {p.name: i for i, p in enumerate(pipelines)}
    position = {e.id: i for i, e in enumerate(examples)}
    records = sorted(done.values(), key=lambda r: (order[r["pipeline"]], position[r["example_id"]]))
    return RunOutcome(records, errors, fingerprints)


def _run_batch(pipeline: Pipeline, batch: list[Example], fingerprint: str,
               kg: Callable[[], KnowledgeGraph | None] | None, scorer: BertScorer | None) -> list[dict[str, Any]]:
    started = time.perf_counter()
    try:
        outputs: list[PipelineOutput | BaseException] = list(pipeline.run(batch))
    except MirageError as exc:
        if getattr(exc, "retryable", False):
            raise
        if len(batch) == 1:
            outputs = [exc]
        else:  # find the example that fails; the others still count
            outputs = []
            for example in batch:
                try:
                    outputs.extend(pipeline.run([example]))
                except MirageError as single:
                    if getattr(single, "retryable", False):
                        raise
                    outputs.append(single)
    elapsed = time.perf_counter() - started
    if len(outputs) != len(batch):
        raise RuntimeError(f"pipeline {pipeline.name!r} returned {len(outputs)} outputs for {len(batch)} examples")
    per_example = elapsed / len(batch)
    graph = None
    # the KG checks citations and reads the diagnoses of examples whose gold answer names entities
    if kg is not None and any(isinstance(o, PipelineOutput) and (o.cited or e.gold_answer_entities)
                              for e, o in zip(batch, outputs)):
        graph = kg()
    records: list[dict[str, Any]] = []
    for example, output in zip(batch, outputs):
        if isinstance(output, BaseException):
            records.append(_error_record(example, pipeline.name, fingerprint, output))
        else:
            records.append(score_output(example, output, pipeline=pipeline.name, fingerprint=fingerprint, kg=graph,
                                        seconds_total=per_example))
    if scorer is not None:
        todo = [(r, e) for r, e in zip(records, batch) if "error" not in r and e.kind == "free" and e.reference]
        if todo:
            scores = scorer.f1([r["answer"] for r, _ in todo], [e.reference or "" for _, e in todo])
            for (record, _), value in zip(todo, scores):
                record["bertscore_f1"] = value
    return records
