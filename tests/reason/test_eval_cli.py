"""``mirage-kg eval`` through click, and a real run killed with SIGKILL midway then resumed: its final report
equals an uninterrupted run's (timings aside)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from eval_support import TINY, shared_file

from mirage_kg.cli import main
from mirage_reason.evaluation.report import without_timings

DISEASES = ["Diabetes mellitus", "Hypertension", "Asthma", "Migraine", "Panic disorder", "Influenza"]
TEMPLATES = ["I was told I have {d}. What medicine helps?", "What are the symptoms of {d}?",
             "Which test confirms {d}?", "My father has {d}. What should he avoid?"]


def test_help_lists_every_option() -> None:
    result = CliRunner().invoke(main, ["eval", "--help"])
    assert result.exit_code == 0
    for option in ("--data", "--kg", "--pipelines", "--limit", "--seed", "--backend", "--model", "--base-url",
                   "--max-new-tokens", "--batch-size", "--output", "--json", "--html", "--judge-url", "--set"):
        assert option in result.output
    assert "eval" in CliRunner().invoke(main, ["--help"]).output


def test_usage_errors() -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["eval", "jsonl", "--data", str(TINY), "--pipelines", "retrieve,mindmap"])
    assert bad.exit_code == 2 and "unknown pipeline(s) mindmap" in bad.output
    missing = runner.invoke(main, ["eval", "jsonl", "--pipelines", "retrieve"])
    assert missing.exit_code == 1 and "needs --data" in missing.output
    wrong = runner.invoke(main, ["eval", "jsonl", "--data", str(TINY), "--set", "n_r=lots"])
    assert wrong.exit_code == 1 and "not a valid int" in wrong.output


@pytest.mark.slow
def test_cli_run_json_and_html(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    result = CliRunner().invoke(main, [
        "eval", "jsonl", "--data", str(TINY), "--kg", "demo", "--pipelines", "retrieve,llm", "--backend", "scripted",
        "--no-bertscore", "--json", "--output", str(tmp_path / "run"), "--html", str(html)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pipelines"] == ["retrieve", "llm"] and report["examples"] == 4
    assert report["settings"]["kg"] == "demo" and report["settings"]["backend"] == "scripted"
    assert report["results"]["retrieve"]["linking_recall"] > 0  # the demo KG knows fever, cough, asthma
    assert report["results"]["llm"]["accuracy"] == 0.5  # the scripted model always answers "A"
    assert html.read_text(encoding="utf-8").count("data:image/png;base64,") == 2
    again = CliRunner().invoke(main, ["eval", "jsonl", "--data", str(TINY), "--kg", "demo", "--pipelines",
                                      "retrieve,llm", "--backend", "scripted", "--no-bertscore", "--output",
                                      str(tmp_path / "run")])
    assert again.exit_code == 0 and "retrieve" in again.output and "report:" in again.output


def _arguments(data: Path, output: Path) -> list[str]:
    return ["eval", "jsonl", "--data", str(data), "--kg", "demo", "--pipelines", "retrieve,llm", "--backend",
            "scripted", "--batch-size", "2", "--output", str(output), "--json"]


def _command(data: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "mirage_kg.cli", *_arguments(data, output)]


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_same_report(tmp_path: Path) -> None:
    data = tmp_path / "questions.jsonl"
    rows = [{"id": f"q{i}", "question": t.format(d=d), "reference": f"This is about {d}; see your doctor.",
             "question_entities": [d]} for i, (t, d) in enumerate((t, d) for d in DISEASES for t in TEMPLATES)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    total = 2 * len(rows)
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0", "HF_HUB_OFFLINE": "1"}

    results = tmp_path / "killed" / "results.jsonl"
    proc = subprocess.Popen(_command(data, tmp_path / "killed"), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    lines = 0
    while time.monotonic() < deadline and proc.poll() is None:
        lines = len(results.read_bytes().splitlines()) if results.exists() else 0
        if lines >= 8:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = len(results.read_bytes().splitlines())
    assert 8 <= killed_at < total

    resumed = subprocess.run(_command(data, tmp_path / "killed"), env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    whole = CliRunner().invoke(main, _arguments(data, tmp_path / "whole"))  # uninterrupted, in this process
    assert whole.exit_code == 0, whole.output
    assert without_timings(json.loads(resumed.stdout)) == without_timings(json.loads(whole.stdout))
    keys = [json.loads(line)["key"] for line in results.read_text(encoding="utf-8").splitlines()]
    assert len(keys) == len(set(keys)) == total  # every result once: nothing done before the kill was redone
    report = json.loads(resumed.stdout)
    assert report["results"]["retrieve"]["bertscore_f1"] is not None and report["examples"] == len(rows)


def test_importing_the_command_is_light() -> None:
    code = ("import sys, mirage_reason.evaluation, mirage_reason.evaluation.cli; "
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'matplotlib', 'bert_score') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def _retrieve_report(args: list[str], out: Path) -> dict:
    result = CliRunner().invoke(main, ["eval", "genmedgpt5k-linked", *args, "--pipelines", "retrieve", "--limit",
                                       "5", "--no-bertscore", "--json", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_eval_on_a_store_folder_and_on_an_endpoint(tmp_path: Path, oxigraph_server: object) -> None:
    triples = shared_file("emckg", "triples.tsv")
    shared_file("genmedgpt5k")
    store = tmp_path / "store"
    loaded = CliRunner().invoke(main, ["load", str(triples), "--store", str(store)])
    assert loaded.exit_code == 0, loaded.output
    on_store = _retrieve_report(["--store", str(store)], tmp_path / "run-store")
    assert on_store["settings"]["kg"] == f"store:{store.resolve()}"
    server = oxigraph_server
    server.clear()  # type: ignore[attr-defined]
    url = server.query_url  # type: ignore[attr-defined]
    loaded = CliRunner().invoke(main, ["load", str(triples), "--endpoint", url])
    assert loaded.exit_code == 0, loaded.output
    on_endpoint = _retrieve_report(["--endpoint", url], tmp_path / "run-endpoint")
    assert on_endpoint["settings"]["kg"] == f"endpoint:{url}"
    # the same KG behind either: the same retrieval figures
    keys = ("linking_recall", "evidence_recall", "evidence_size", "abstention_rate")
    assert on_store["results"]["retrieve"]["evidence_recall"] > 0
    assert {k: on_store["results"]["retrieve"][k] for k in keys} == \
        {k: on_endpoint["results"]["retrieve"][k] for k in keys}


def test_eval_kg_choices_are_exclusive_and_checked(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(main, ["eval", "jsonl", "--data", str(TINY), "--kg", "demo", "--store", str(tmp_path),
                                "--pipelines", "retrieve", "--no-bertscore"])
    assert both.exit_code == 1 and "give one of --kg, --store" in both.output
    empty = runner.invoke(main, ["eval", "jsonl", "--data", str(TINY), "--store", str(tmp_path), "--pipelines",
                                 "retrieve", "--no-bertscore"])
    assert empty.exit_code == 1 and "not a store folder" in empty.output and str(tmp_path) in empty.output
