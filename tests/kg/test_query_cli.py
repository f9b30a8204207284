"""``mirage-kg query anchor|bridge``, ``mirage-kg link`` and ``retrieve``: the JSON contract other tools parse,
readable text, HTML pictures, names resolved by linking, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.cli.query_commands import retrieve
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.store import OxigraphStore, ensure_schema


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("MIRAGE_KG_EMBEDDING_MODEL", "none")  # fast: no model load
    monkeypatch.delenv("MIRAGE_KG_STORE", raising=False)
    monkeypatch.delenv("MIRAGE_KG_ENDPOINT", raising=False)
    return CliRunner()


def run_json(runner: CliRunner, args: list[str]) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_anchor_json_shape(runner: CliRunner) -> None:
    out = run_json(runner, ["query", "anchor", "KG:Asthma", "--json"])
    assert out["entity"] == {"id": "KG:Asthma", "label": "Asthma"}
    assert out["neighbours"]
    for n in out["neighbours"]:
        assert set(n) == {"relation", "relation_label", "direction", "id", "label", "text"}
        assert n["direction"] in ("forward", "backward")
        assert n["text"].startswith("Asthma")
    assert {"relation": "MKG:has_symptom", "relation_label": "has symptom", "direction": "forward",
            "id": "KG:Wheezing", "label": "Wheezing", "text": "Asthma has symptom Wheezing"} in out["neighbours"]


def test_anchor_options(runner: CliRunner) -> None:
    out = run_json(runner, ["query", "anchor", "Asthma", "-k", "1", "--direction", "out", "--relation",
                            "MKG:has_symptom", "--json"])
    assert [(n["relation"], n["direction"]) for n in out["neighbours"]] == [("MKG:has_symptom", "forward")]
    both = run_json(runner, ["query", "anchor", "KG:Asthma", "-k", "1", "--json"])
    groups = [(n["relation"], n["direction"]) for n in both["neighbours"]]
    assert len(groups) == len(set(groups)) and {d for _, d in groups} == {"forward", "backward"}


def test_bridge_json_shape(runner: CliRunner) -> None:
    out = run_json(runner, ["query", "bridge", "KG:Wheezing", "KG:Cough", "--max-hops", "2", "--max-paths", "3",
                            "--json"])
    assert out["source"] == {"id": "KG:Wheezing", "label": "Wheezing"}
    assert out["target"]["id"] == "KG:Cough"
    assert 1 <= len(out["paths"]) <= 3
    for path in out["paths"]:
        assert set(path) == {"length", "nodes", "steps", "text"}
        assert path["nodes"][0] == "KG:Wheezing" and path["nodes"][-1] == "KG:Cough"
        assert len(path["steps"]) == path["length"] == len(path["nodes"]) - 1
        for step in path["steps"]:
            assert set(step) == {"subject", "relation", "object", "direction"}
            assert step["direction"] in ("forward", "backward")
    lengths = [p["length"] for p in out["paths"]]
    assert lengths == sorted(lengths)


def test_link_json_shape(runner: CliRunner) -> None:
    out = run_json(runner, ["link", "I have high blood pressure and a headache", "--top", "2", "--json"])
    assert [m["text"] for m in out["mentions"]] == ["high blood pressure", "headache"]
    for m in out["mentions"]:
        assert set(m) == {"text", "start", "end", "candidates"}
        assert 1 <= len(m["candidates"]) <= 2
        for c in m["candidates"]:
            assert set(c) == {"id", "label", "score", "method"}
    assert out["mentions"][0]["candidates"][0] == {"id": "KG:Hypertension", "label": "Hypertension",
                                                   "score": 0.98, "method": "synonym"}
    whole = run_json(runner, ["link", "hypertensoin", "--whole", "--json"])
    assert whole["mentions"][0]["candidates"][0]["method"] == "fuzzy"


def test_readable_text_output(runner: CliRunner) -> None:
    anchor = runner.invoke(main, ["query", "anchor", "KG:Asthma", "-k", "2", "--rank", "degree"])
    assert anchor.exit_code == 0 and "Cough" in anchor.stdout and "has symptom" in anchor.stdout
    assert "resolved 'KG:Asthma' -> KG:Asthma (Asthma) by id" in anchor.stderr
    bridge = runner.invoke(main, ["query", "bridge", "KG:Wheezing", "KG:Cough", "--max-hops", "2"])
    assert bridge.exit_code == 0 and "path(s)" in bridge.stdout and "->" in bridge.stdout
    link = runner.invoke(main, ["link", "asthma"])
    assert link.exit_code == 0 and "KG:Asthma" in link.stdout


def test_names_are_linked_with_a_note_on_stderr(runner: CliRunner) -> None:
    result = runner.invoke(main, ["query", "anchor", "asthmas", "--json"])
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["entity"]["id"] == "KG:Asthma"
    assert out["resolved"] == {"text": "asthmas", "id": "KG:Asthma", "label": "Asthma", "method": "normalised",
                               "score": 0.96, "merged": False, "same_as": []}
    result = runner.invoke(main, ["query", "anchor", "asthmas"])
    assert "resolved 'asthmas' -> KG:Asthma (Asthma) by normalised match" in result.stderr
    result = runner.invoke(main, ["query", "bridge", "wheezing", "Asthma", "--json", "--max-hops", "1"])
    assert result.exit_code == 0 and json.loads(result.stdout)["paths"]


def test_errors_exit_1_with_one_line(runner: CliRunner) -> None:
    unknown = runner.invoke(main, ["query", "anchor", "KG:No_such_thing"])
    assert unknown.exit_code == 1 and "unknown entity" in unknown.stderr and "Traceback" not in unknown.output
    nothing = runner.invoke(main, ["query", "anchor", "qwxzzy plorf"])
    assert nothing.exit_code == 1
    bad = runner.invoke(main, ["query", "anchor", "KG:Asthma", "--direction", "up"])
    assert bad.exit_code == 2
    missing = runner.invoke(main, ["query", "anchor", "KG:Asthma", "--store", "/nonexistent/store"])
    assert missing.exit_code == 1 and "no store" in missing.stderr


def test_html_pictures_are_self_contained(runner: CliRunner, tmp_path: Path) -> None:
    page = tmp_path / "anchor.html"
    result = runner.invoke(main, ["query", "anchor", "KG:Asthma", "--html", str(page)])
    assert result.exit_code == 0
    text = page.read_text(encoding="utf-8")
    assert "<svg" in text and "Wheezing" in text and "<script" not in text and "src=" not in text
    page = tmp_path / "bridge.html"
    result = runner.invoke(main, ["query", "bridge", "KG:Wheezing", "KG:Cough", "--html", str(page), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["paths"]
    text = page.read_text(encoding="utf-8")
    assert "<svg" in text and "marker-end" in text and "<ol>" in text and "http-equiv" not in text


def test_on_disk_store(runner: CliRunner, tmp_path: Path, emckg_path: Path) -> None:
    folder = tmp_path / "store"
    store = OxigraphStore(folder)
    ensure_schema(store)
    get_loader("triples").load(store, emckg_path, LoadOptions(), LoadReport())
    store.close()
    out = run_json(runner, ["query", "anchor", "KG:Panic_disorder", "--store", str(folder), "-k", "2", "--json"])
    relations = [n["relation"] for n in out["neighbours"]]
    assert relations == sorted(relations) and len(relations) == 12  # 6 relation-directions, k=2 each
    texts = [n["text"] for n in out["neighbours"]]
    assert any(t.startswith("Panic disorder has symptom") for t in texts)
    assert any(t.startswith("Panic disorder is a possible disease for") for t in texts)
    out = run_json(runner, ["query", "bridge", "KG:Panic_disorder", "KG:Dizziness", "--store", str(folder),
                            "--max-hops", "1", "--json"])
    assert [p["steps"][0]["direction"] for p in out["paths"]] == ["forward", "backward"]


def test_retrieve_command(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(retrieve, ["I keep wheezing and coughing", "--budget", "20", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"question", "entities", "differential", "evidence"}
    batch = tmp_path / "q.jsonl"
    batch.write_text(json.dumps({"question": "wheezing"}) + "\n" + json.dumps({"input": "a bad cough"}) + "\n",
                     encoding="utf-8")
    result = runner.invoke(retrieve, ["--batch", str(batch)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["question"] for line in lines] == ["wheezing", "a bad cough"]
    assert runner.invoke(retrieve, []).exit_code == 2


@pytest.mark.parametrize("args", [["query", "anchor"], ["query", "bridge"], ["link"], ["query"]])
def test_help(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(main, [*args, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_ambiguous_name_lists_candidates_and_exits_1(tmp_path) -> None:
    from click.testing import CliRunner

    from mirage_kg.cli import main

    ttl = tmp_path / "cold.ttl"
    ttl.write_text(
        '@prefix KG: <https://w3id.org/mirage-kg/entity/> .\n'
        '@prefix MKG: <https://w3id.org/mirage-kg/schema#> .\n'
        '@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n'
        'KG:Common_cold skos:prefLabel "Cold"@en ; MKG:has_symptom KG:Sneezing .\n'
        'KG:Cold_sensation skos:prefLabel "Cold"@en ; MKG:possible_disease KG:Hypothermia .\n'
        'KG:Sneezing skos:prefLabel "Sneezing"@en .\nKG:Hypothermia skos:prefLabel "Hypothermia"@en .\n')
    store = str(tmp_path / "kg")
    assert CliRunner().invoke(main, ["load", str(ttl), "--store", store]).exit_code == 0
    result = CliRunner().invoke(main, ["query", "anchor", "Cold", "--store", store])
    assert result.exit_code == 1
    assert "ambiguous" in result.output and "KG:Common_cold" in result.output and "KG:Cold_sensation" in result.output
    by_id = CliRunner().invoke(main, ["query", "anchor", "KG:Common_cold", "--store", store, "--json"])
    assert by_id.exit_code == 0 and "KG:Sneezing" in by_id.output
