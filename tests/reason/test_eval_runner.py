"""The evaluation runner with a scripted model and the fake KG: every pipeline, resumption after an injected
failure (the report equals an uninterrupted run's), torn result lines, error lines, the report, HTML and the judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_support import TINY
from fake_kg import FakeKG

from mirage_reason.backends import ScriptedBackend
from mirage_reason.evaluation import runner as runner_module
from mirage_reason.evaluation.datasets import Example, load_dataset
from mirage_reason.evaluation.judge import parse_verdict, summarise_verdicts
from mirage_reason.evaluation.pipelines import PIPELINE_NAMES, PipelineOutput
from mirage_reason.evaluation.report import METRICS, render_html, render_table, without_timings, write_html
from mirage_reason.evaluation.runner import RESULTS_FILE, ResultStore
from mirage_reason.evaluation.session import EvalRequest, evaluate, parse_overrides

ANSWER = "It may be influenza; rest and consider oseltamivir. Answer: A"


def model() -> ScriptedBackend:
    """Answers depend on nothing but the prompt, so batching and resumption cannot change them."""
    return ScriptedBackend(lambda prompt: ANSWER)


def examples() -> list[Example]:
    return load_dataset("jsonl", TINY)


def request(output: Path, **changes: object) -> EvalRequest:
    base = dict(dataset="jsonl", data=str(TINY), output=str(output), bertscore=False, batch_size=2, progress=False,
                overrides={"n_r": 2, "samples": 1}, threads=None)
    base.update(changes)
    return EvalRequest(**base)  # type: ignore[arg-type]


def run(output: Path, **changes: object):
    return evaluate(request(output, **changes), kg=FakeKG(), backend=model())


def test_every_pipeline_runs_and_is_scored(tmp_path: Path) -> None:
    result = run(tmp_path / "run")
    report = result.report
    assert report["pipelines"] == list(PIPELINE_NAMES)
    lines = (tmp_path / "run" / RESULTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(PIPELINE_NAMES) * 4  # one line per (pipeline, example)
    for name in PIPELINE_NAMES:
        row = report["results"][name]
        assert row["examples"] == 4 and row["errors"] == 0
        assert row["accuracy"] is not None  # two of the four questions are multiple choice
    assert report["results"]["llm"]["accuracy"] == 0.5  # "Answer: A" is right for asthma-1 only
    assert report["results"]["llm"]["evidence_recall"] is None  # the model alone sees no evidence
    assert report["results"]["retrieve"]["tokens_per_question"] is None  # no model
    retrieve = report["results"]["retrieve"]
    assert retrieve["linking_recall"] == 1.0  # fever, cough and asthma are all linked
    assert retrieve["citation_validity"] == 1.0  # its evidence comes from the graph
    assert report["results"]["mirage"]["tokens_per_question"] > 0
    # diagnosis@k, for every pipeline, over the one example whose gold answer names a condition (influenza)
    assert all(report["results"][name]["diagnosis_examples"] == 1 for name in PIPELINE_NAMES)
    assert report["results"]["llm"]["diagnosis_at_1"] == 1.0  # "It may be influenza"
    assert "diagnosis_at_1" in METRICS and "diagnosis_at_3" in METRICS


def test_resumed_run_gives_the_uninterrupted_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = run(tmp_path / "whole").report

    appended: list[int] = []
    real_append = ResultStore.append

    def failing_append(self: ResultStore, records: list[dict]) -> None:
        if len(appended) == 5:
            raise KeyboardInterrupt  # as if killed after five batches
        appended.append(len(records))
        real_append(self, records)

    monkeypatch.setattr(runner_module.ResultStore, "append", failing_append)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed")
    monkeypatch.setattr(runner_module.ResultStore, "append", real_append)
    written = (tmp_path / "resumed" / RESULTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(written) == sum(appended) == 10

    backend = model()
    resumed = evaluate(request(tmp_path / "resumed"), kg=FakeKG(), backend=backend).report
    assert without_timings(resumed) == without_timings(whole)
    after = (tmp_path / "resumed" / RESULTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(after) == len(PIPELINE_NAMES) * 4  # nothing done twice

    again = model()
    evaluate(request(tmp_path / "resumed"), kg=FakeKG(), backend=again)
    assert again.calls == []  # a finished run asks the model nothing


def test_torn_last_line_is_cut_and_redone(tmp_path: Path) -> None:
    run(tmp_path / "run", pipelines=("retrieve",))
    path = tmp_path / "run" / RESULTS_FILE
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][:40], encoding="utf-8")  # killed mid-write
    report = run(tmp_path / "run", pipelines=("retrieve",)).report
    assert report["results"]["retrieve"]["examples"] == 4
    assert all(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())


def test_limit_and_pipelines_do_not_change_keys(tmp_path: Path) -> None:
    run(tmp_path / "run", pipelines=("retrieve",), limit=2)
    first = len((tmp_path / "run" / RESULTS_FILE).read_text().splitlines())
    run(tmp_path / "run", pipelines=("retrieve", "llm"))
    lines = (tmp_path / "run" / RESULTS_FILE).read_text().splitlines()
    assert first == 2 and len(lines) == 2 + 2 + 4  # the two sampled questions were not redone
    # a different model setting is a different run for the model pipelines, not for retrieve
    run(tmp_path / "run", pipelines=("retrieve", "llm"), max_new_tokens=17)
    assert len((tmp_path / "run" / RESULTS_FILE).read_text().splitlines()) == 8 + 4


class _Flaky:
    """A pipeline that fails on one example (a MirageError), then works on the next run."""

    name = "flaky"
    uses_model = False

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def run(self, batch: list[Example]) -> list[PipelineOutput]:
        from mirage_reason.errors import ReasonerError

        if self.fail and any(e.id == "asthma-1" for e in batch):
            raise ReasonerError("the chain broke")
        return [PipelineOutput(answer="Answer: A") for _ in batch]


def test_a_failing_example_is_an_error_line_and_retried(tmp_path: Path) -> None:
    first = evaluate(request(tmp_path / "run"), kg=FakeKG(), pipelines=[_Flaky(True)]).report
    assert first["results"]["flaky"]["examples"] == 3 and first["results"]["flaky"]["errors"] == 1
    lines = [json.loads(x) for x in (tmp_path / "run" / RESULTS_FILE).read_text().splitlines()]
    assert [x["error"] for x in lines if "error" in x] == ["ReasonerError: the chain broke"]
    second = evaluate(request(tmp_path / "run"), kg=FakeKG(), pipelines=[_Flaky(False)]).report
    assert second["results"]["flaky"]["examples"] == 4 and second["results"]["flaky"]["errors"] == 0


def test_report_shape_table_and_html(tmp_path: Path) -> None:
    result = run(tmp_path / "run", pipelines=("retrieve", "llm", "mirage"))
    report = json.loads((tmp_path / "run" / "report.json").read_text(encoding="utf-8"))
    assert report == json.loads(json.dumps(result.report))
    assert {"report_version", "dataset", "examples", "pipelines", "settings", "config_hash", "scoring_model",
            "results", "judge", "seconds_latency_per_example", "seconds_wall"} <= set(report)
    assert "all-MiniLM-L6-v2" in report["scoring_model"]["bertscore"]
    for row in report["results"].values():
        assert set(METRICS) <= set(row)
        assert {"tokens_by_stage", "seconds_by_stage", "seconds_latency_p50", "errors"} <= set(row)
    assert report["settings"]["reasoner"]["n_r"] == 2
    assert len(report["seconds_latency_per_example"]["llm"]) == 4
    table = render_table(report)
    assert [c.header for c in table.columns][:3] == ["pipeline", "n", "accuracy"]
    html_path = tmp_path / "report.html"
    write_html(report, html_path, {"llm": result.records[:2]})
    page = html_path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64,") == 2
    assert "Sample answers" in page and "<script" not in page
    assert "&lt;script&gt;" in render_html({**report, "dataset": "<script>"})  # everything is escaped


def test_parse_overrides() -> None:
    assert parse_overrides(["n_r=2", "samples=1", "temperature=0", "seed_evidence=false", "seed=none"]) == {
        "n_r": 2, "samples": 1, "temperature": 0.0, "seed_evidence": False, "seed": None}
    from mirage_kg import InputError

    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_overrides(["nope=1"])
    with pytest.raises(InputError, match="not a valid int"):
        parse_overrides(["n_r=two"])


@pytest.mark.parametrize(("reply", "verdict"), [("1", "1"), ("Answer 2 is better.", "2"), ("Tie.", "tie"),
                                                ("2\n", "2"), ("neither", None)])
def test_parse_verdict(reply: str, verdict: str | None) -> None:
    assert parse_verdict(reply) == verdict


def test_pairwise_judge_is_cached_and_unbiased_by_position(tmp_path: Path) -> None:
    judge_model = ScriptedBackend(lambda prompt: "1")  # always prefers whichever answer is shown first
    result = evaluate(request(tmp_path / "run", pipelines=("retrieve", "llm", "mirage")), kg=FakeKG(),
                      backend=model(), judge_backend=judge_model)
    judge = result.report["judge"]
    assert judge["comparisons"] == 3 * 4 and judge["unparsed"] == 0
    assert sum(judge_model.batch_sizes) == 12
    wins = {p: v["wins"] for p, v in judge["pipelines"].items()}
    assert sum(wins.values()) == 12
    assert all(0 < w for w in wins.values())  # the order swap spreads a position-biased judge's wins
    assert all(1.0 <= v["mean_rank"] <= 3.0 for v in judge["pipelines"].values())
    again = ScriptedBackend(lambda prompt: "2")
    cached = evaluate(request(tmp_path / "run", pipelines=("retrieve", "llm", "mirage")), kg=FakeKG(),
                      backend=model(), judge_backend=again).report["judge"]
    assert again.calls == [] and cached == judge


def test_summarise_verdicts_ranks() -> None:
    verdicts = [{"a": "x", "b": "y", "example_id": "1", "winner": "x"},
                {"a": "x", "b": "z", "example_id": "1", "winner": "tie"},
                {"a": "y", "b": "z", "example_id": "1", "winner": "z"}]
    summary = summarise_verdicts(verdicts, ["x", "y", "z"], "judge")
    # x and z tie on 1.5 points each, so they share ranks 1 and 2
    assert summary["pipelines"]["x"] == {"wins": 1, "ties": 1, "losses": 0, "win_rate": 0.5, "mean_rank": 1.5}
    assert summary["pipelines"]["y"]["mean_rank"] == 3.0
    assert summary["pairs"]["x vs y"] == {"win": 1, "tie": 0, "lose": 0}


def test_scripted_backend_from_a_file(tmp_path: Path) -> None:
    script = TINY.parent / "script.json"
    result = evaluate(request(tmp_path / "run", pipelines=("llm",), backend="scripted", model=str(script)),
                      kg=FakeKG())
    answers = {r["example_id"]: r["answer"] for r in result.records}
    assert answers["flu-1"] == "It may be influenza; rest and drink fluids."
    assert answers["asthma-1"].endswith("Answer: A")
    assert result.report["results"]["llm"]["accuracy"] == 0.5  # right for asthma-1 (A), wrong for line-3 (B)
    assert result.report["settings"]["backend"] == "scripted"


def test_open_kg_loads_a_file_once_and_opens_a_store(tmp_path: Path) -> None:
    from mirage_kg import InputError
    from mirage_reason.evaluation.session import open_kg

    triples = TINY.parents[1] / "core" / "small.tsv"
    first = open_kg(str(triples), tmp_path)
    count = first.store.triple_count()
    assert count > 0 and len(list((tmp_path / "kg-store").glob("*.loaded"))) == 1
    first.store.close()
    again = open_kg(str(triples), tmp_path)  # reused, not loaded twice
    assert again.store.triple_count() == count
    folder = next(p for p in (tmp_path / "kg-store").iterdir() if p.is_dir())
    again.store.close()
    assert open_kg(str(folder), tmp_path / "other").store.triple_count() == count  # a store folder as it is
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="cannot tell the format"):
        open_kg(str(empty), tmp_path)
