"""Crash guards of the CLI, one regression test per reported crash: labels are data, never rich markup; ``<38>``
in free text is not an IRI; ``--graph a/b`` names the graph stats shows; a lone surrogate from a model still makes
valid UTF-8; a broken ``--script`` or scripted eval model is one error, not a traceback or error records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main

FIX = Path(__file__).resolve().parent.parent / "fixtures"
NO_EMBEDDINGS = ["--embedding-model", "none"]


def run(*args: str) -> "object":
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})  # wide enough that tables do not fold


@pytest.fixture()
def markup_store(tmp_path: Path) -> Path:
    source = tmp_path / "markup.tsv"
    source.write_text("Bad[/bold]markup\thas[/b]symptom\tPain_[finding]\n", encoding="utf-8")
    folder = tmp_path / "kg"
    result = run("load", str(source), "--store", str(folder))
    assert result.exit_code == 0, result.output
    return folder


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
def test_labels_with_brackets_print_as_they_are(markup_store: Path) -> None:
    anchor = run("query", "anchor", "Bad[/bold]markup", "--store", str(markup_store), *NO_EMBEDDINGS)
    assert anchor.exit_code == 0, anchor.output
    assert "Bad[/bold]markup" in anchor.output and "Pain [finding]" in anchor.output
    linked = run("link", "Bad[/bold]markup and Pain [finding]", "--store", str(markup_store), *NO_EMBEDDINGS)
    assert linked.exit_code == 0, linked.output
    assert "Bad[/bold]markup" in linked.output and "Pain [finding]" in linked.output
    stats = run("stats", "--store", str(markup_store))
    assert stats.exit_code == 0, stats.output
    assert "has[/b]symptom" in stats.output


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
@pytest.mark.parametrize("command", ["retrieve", "link"])
def test_angle_brackets_in_free_text_are_not_an_iri(command: str) -> None:
    result = run(command, "My temperature was <38> and I cough", *NO_EMBEDDINGS)
    assert result.exit_code == 0, result.output
    assert "Cough" in result.output and "not a valid absolute IRI" not in result.output


def test_a_graph_name_with_a_slash_is_the_graph_stats_shows(tmp_path: Path) -> None:
    folder = tmp_path / "kg"
    result = run("load", str(FIX / "core" / "small.tsv"), "--store", str(folder), "--graph", "triples/triples.tsv")
    assert result.exit_code == 0, result.output
    loaded = next(line for line in result.output.splitlines() if line.startswith("loaded "))
    assert "%2F" not in loaded and loaded.endswith("/graph/triples/triples.tsv>"), loaded
    stats = json.loads(run("stats", "--store", str(folder), "--json").output)
    assert "GRAPH:triples/triples.tsv" in {g["name"] for g in stats["graphs"]}


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
def test_a_lone_surrogate_from_the_model_still_makes_valid_utf8(tmp_path: Path) -> None:
    from mirage_reason.pipeline.prompts import QUERY_BEGIN, QUERY_END, RESULT_END

    script = tmp_path / "script.json"
    script.write_text(json.dumps({
        "Write at most": "1. What medication treats asthma?",
        "Facts:\n[1]": "Salbutamol \udcff can treat asthma [1].",
        f"{RESULT_END}\n\n": "Salbutamol is a medication for asthma.",
        "": f"Let me check the graph. {QUERY_BEGIN}Asthma{QUERY_END}",
    }), encoding="utf-8")
    page = tmp_path / "answer.html"
    result = CliRunner().invoke(main, ["ask", "What medication treats asthma?", "--script", str(script), "--json",
                                       "--html", str(page), "--n-r", "1", *NO_EMBEDDINGS])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout_bytes.decode("utf-8"))  # strict: invalid UTF-8 raises here
    assert "\ufffd" in data["answer"]
    page.read_text(encoding="utf-8")


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"not json", b'{"a": {"nested": 1}}', b'[["x"]]'])
def test_a_broken_script_file_is_one_usage_error(tmp_path: Path, content: bytes) -> None:
    script = tmp_path / "script.json"
    script.write_bytes(content)
    result = run("ask", "What treats asthma?", "--script", str(script), *NO_EMBEDDINGS)
    assert result.exit_code == 2 and "--script" in result.output and "Traceback" not in result.output, result.output


def test_an_eval_whose_scripted_model_is_not_json_fails_at_once(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text("not json", encoding="utf-8")
    result = run("eval", "jsonl", "--data", str(FIX / "eval" / "tiny.jsonl"), "--kg", "demo", "--pipelines", "llm",
                 "--backend", "scripted", "--model", str(model), "--no-bertscore", "--output", str(tmp_path / "run"))
    assert result.exit_code == 1 and "must be a JSON file" in result.output, result.output
    assert not (tmp_path / "run").exists()
