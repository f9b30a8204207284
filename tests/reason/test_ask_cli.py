"""``mirage-kg ask``: the exact --json shape and the HTML page with a scripted model on the demo KG, usage errors,
help, and one real run with SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_reason.pipeline.prompts import QUERY_BEGIN as QB
from mirage_reason.pipeline.prompts import QUERY_END as QE
from mirage_reason.pipeline.prompts import RESULT_END

QUESTION = "What medication treats asthma?"
TOP_KEYS = ["question", "answer", "abstained", "support", "flags", "unsupported_text", "sentences", "sub_questions",
            "claims", "conflicts", "dropped_claims", "chains", "notes", "timings", "tokens"]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({
        "Write at most": "1. What medication treats asthma?",
        "Facts:\n[1]": "Salbutamol can treat asthma [1]. Please see a doctor.",
        f"{RESULT_END}\n\n": "Salbutamol is a medication for asthma.",
        "": f"Let me check the graph. {QB}Asthma{QE}",
    }))
    return path


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
def test_ask_json_shape_with_a_scripted_model(script: Path, tmp_path: Path) -> None:
    page = tmp_path / "answer.html"
    result = CliRunner().invoke(main, ["ask", QUESTION, "--script", str(script), "--embedding-model", "none",
                                       "--json", "--html", str(page), "--n-r", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [k for k in data if k in TOP_KEYS] == TOP_KEYS  # the record's own keys, in order (others may follow)
    assert data["support"] == {"verdict": "grounded",
                               "reason": "every sentence rests on claims the knowledge graph supports, cited"}
    assert data["flags"] == [] and data["unsupported_text"] == "" and data["conflicts"] == []
    assert [(s["text"], s["supported"]) for s in data["sentences"]] == [
        ("Salbutamol can treat asthma [1].", True), ("Please see a doctor.", True)]
    assert data["sentences"][0]["claims"] == [0] and data["sentences"][1]["claims"] == []
    assert data["question"] == QUESTION and data["abstained"] is False
    assert data["answer"] == "Salbutamol can treat asthma [1]. Please see a doctor."
    assert data["sub_questions"] == [QUESTION]
    [chain] = data["chains"]
    assert {"sub_question", "searches", "answer", "trace"} <= set(chain) and chain["kept"] is True
    [search] = chain["searches"]
    assert search["query"] == "Asthma" and search["mode"] == "anchor" and search["results"]
    assert chain["answer"] == "Salbutamol is a medication for asthma."
    labels = [c["text"] for c in data["claims"]]
    assert any("Salbutamol" in t for t in labels)
    for claim in data["claims"]:
        assert list(claim) == ["text", "citations"]
        for citation in claim["citations"]:
            assert list(citation) == ["nodes", "steps", "text", "sources"]
            assert all(list(s) == ["subject", "relation", "object", "direction"] for s in citation["steps"])
            assert all(n.startswith("KG:") for n in citation["nodes"])
    assert data["timings"]["total"] > 0 and data["tokens"]["chains"] > 0
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Salbutamol" in html


def test_ask_text_output(script: Path) -> None:
    result = CliRunner().invoke(main, ["ask", QUESTION, "--script", str(script), "--embedding-model", "none"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("[GROUNDED] every sentence rests on claims the knowledge graph supports, cited\n\n"
                                    "Salbutamol can treat asthma [1].")
    assert "Claims and the knowledge-graph paths they rest on:" in result.stdout
    assert "chain(s)" in result.stderr


def test_ask_usage_errors(script: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["ask", "  "])
    assert result.exit_code == 2 and "QUESTION is empty" in result.output
    result = runner.invoke(main, ["ask", QUESTION, "--backend", "openai"])
    assert result.exit_code == 2 and "--base-url" in result.output
    result = runner.invoke(main, ["ask", QUESTION, "--n-q", "0"])
    assert result.exit_code == 2
    result = runner.invoke(main, ["ask", QUESTION, "--script", str(script), "--store", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "no store at" in result.output


def test_help() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["ask", "--help"])
    assert result.exit_code == 0
    for option in ("--store", "--endpoint", "--backend", "--model", "--base-url", "--n-q", "--n-r", "-k",
                   "--max-hops", "--samples", "--max-new-tokens", "--seed", "--set", "--max-in-flight", "--json",
                   "--html", "llamacpp", "vllm"):
        assert option in result.output
    assert "--script" not in result.output  # test-only
    assert "serve-llm" not in runner.invoke(main, ["--help"]).output  # llama.cpp's or vLLM's server instead


def test_set_overrides_reach_the_config_and_bad_ones_are_usage_errors(script: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["ask", QUESTION, "--script", str(script), "--embedding-model", "none", "--json",
                                  "--set", "samples=2", "--set", "n_r=1"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["chains"]) == 2
    for bad, why in (("samples=lots", "not a valid int"), ("nope=1", "expected KEY=VALUE"), ("samples=0", "at least 1")):
        result = runner.invoke(main, ["ask", QUESTION, "--script", str(script), "--set", bad])
        assert result.exit_code == 2 and why in result.output, result.output


def _chain_texts(record: dict[str, object]) -> list[str]:
    chains = record["chains"]
    assert isinstance(chains, list)
    return ["".join(e["text"] for e in c["trace"] if e["event"] == "generate") for c in chains]


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["llamacpp", pytest.param("llamacpp-server", marks=pytest.mark.server)])
def test_samples_on_llamacpp_differ_and_the_seed_repeats_them(engine: str) -> None:
    """Must show (issue 18): three samples at temperature 0.7 are three different chains, and the same --seed gives
    the same three again: in process, and on llama.cpp's server, where the three decode together in its slots."""
    if engine == "llamacpp":
        pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: pip install 'mirage-kg[llamacpp]'")
    else:
        from mirage_reason.backends.local_models import LLAMA_SERVER_HINT, find_llama_server

        if find_llama_server() is None:
            pytest.skip(LLAMA_SERVER_HINT)
    args = ["ask", QUESTION, "--backend", engine, "--model", "smollm2", "--json", "--set", "samples=3",
            "--set", "temperature=0.7", "--seed", "7", "--n-q", "1", "--n-r", "1", "--max-new-tokens", "24"]
    runs = []
    for _ in range(2):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout)
        runs.append(_chain_texts(record))
        # --json says which thread count llama.cpp ran on and why, and what the engine itself timed
        engine_record = record["engine"]
        assert engine_record["threads"] >= 1 and engine_record["threads_reason"], engine_record
        assert engine_record["generated_tokens"] == record["tokens"]["total"] > 0
        assert engine_record["generation_s"] > 0 and engine_record["generated_tokens_per_s"] > 0
    assert len(runs[0]) == 3 and len(set(runs[0])) == 3, runs[0]
    assert runs[1] == runs[0]


@pytest.mark.llm
def test_ask_with_smollm2(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    result = CliRunner().invoke(main, ["ask", QUESTION, "--model", "smollm2", "--json", "--max-new-tokens", "32",
                                       "--n-q", "2", "--n-r", "1", "--seed", "0"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # a llama.cpp engine adds what ran the model (threads and why, the engine's own timings)
    assert [k for k in data if k in TOP_KEYS] == TOP_KEYS and "engine" in data and data["answer"].strip()
    assert data["chains"] and data["chains"][0]["trace"]
    assert data["tokens"]["chains"] > 0


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
def test_ask_citations_name_the_source_release(script: Path, tmp_path: Path) -> None:
    """Every citation of ``ask --json`` names the release holding its facts, and the new one after an update."""
    rows = "Asthma\tpossible_drug\tSalbutamol\nAsthma\thas_symptom\tWheezing\nAsthma\thas_symptom\tCough\n"
    first, second = tmp_path / "kg-2025-01.tsv", tmp_path / "kg-2025-07.tsv"
    first.write_text(rows, encoding="utf-8")
    second.write_text(rows + "Asthma\tpossible_drug\tBudesonide\n", encoding="utf-8")
    store = tmp_path / "store"
    runner = CliRunner()

    def ask_sources() -> set[str]:
        result = runner.invoke(main, ["ask", QUESTION, "--store", str(store), "--script", str(script),
                                      "--embedding-model", "none", "--json", "--n-r", "2"])
        assert result.exit_code == 0, result.output
        citations = [c for claim in json.loads(result.stdout)["claims"] for c in claim["citations"]]
        assert citations
        return {name for c in citations for name in c["sources"]}

    for args in (["load", str(first)], ["load", "--update", str(second)]):
        assert runner.invoke(main, [*args, "--store", str(store), "--no-index"]).exit_code == 0
        assert ask_sources() == {f"triples {Path(args[-1]).name}"}
