"""``mirage-kg load|stats|export|query sparql|version`` through click, and loads killed midway."""

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

from mirage_kg.cli import main
from mirage_kg.store import OxigraphStore

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "core"


def run(*args: str, env: dict[str, str] | None = None) -> "object":
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_emckg_stats_exact(tmp_path: Path, emckg_path: Path) -> None:
    store = tmp_path / "kg"
    result = run("load", str(emckg_path), "--store", str(store))
    assert result.exit_code == 0, result.output
    stats = json.loads(run("stats", "--store", str(store), "--json").output)
    assert stats["facts"] == 5798  # 5,802 lines, 4 repeats
    assert stats["entities"] == 1123
    assert len(stats["relations"]) == 6
    assert {r["id"] for r in stats["relations"]} == {
        "MKG:has_symptom", "MKG:possible_disease", "MKG:need_medical_test", "MKG:can_check_disease",
        "MKG:need_medication", "MKG:possible_cure_disease"}
    # label and type triples are reported apart from the facts
    assert stats["labels"] == 1123 + 6 and stats["types"] == 1123 + 2 * 6
    assert stats["other"] == 0


def test_malformed_line_fails_cleanly_and_store_is_unchanged(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    assert run("load", str(FIX / "small.tsv"), "--store", str(store)).exit_code == 0
    before = run("export", "--store", str(store), "--format", "nq").output
    result = CliRunner().invoke(main, ["load", str(FIX / "malformed.tsv"), "--store", str(store)])
    assert result.exit_code == 1
    assert "malformed.tsv:3" in result.output and "Traceback" not in result.output
    after = run("export", "--store", str(store), "--format", "nq").output
    assert sorted(after.splitlines()) == sorted(before.splitlines())


def test_lenient_load_reports_skips(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["load", str(FIX / "malformed.tsv"), "--store", str(tmp_path / "kg"),
                                       "--lenient", "--report", str(report)])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["skipped"] == 1
    assert data["reasons"][0]["reason"] == "wrong column count"
    assert data["reasons"][0]["examples"][0]["line"] == 3


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["load"]).exit_code == 2
    assert CliRunner().invoke(main, ["export", "--format", "xml"]).exit_code == 2
    missing = CliRunner().invoke(main, ["stats", "--store", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "no store at" in missing.output


def test_missing_file_names_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["load", str(tmp_path / "absent.tsv"), "--store", str(tmp_path / "kg")])
    assert result.exit_code != 0 and "absent.tsv" in result.output


def test_query_sparql_is_read_only_and_json(tmp_path: Path) -> None:
    refused = CliRunner().invoke(main, ["query", "sparql", "DELETE WHERE { ?s ?p ?o }"])
    assert refused.exit_code == 1 and "read-only" in refused.output
    out = run("query", "sparql", "SELECT (COUNT(*) AS ?n) WHERE { ?s a <https://w3id.org/mirage-kg/schema#Disease> }",
              "--json")
    data = json.loads(out.output)
    assert int(data["results"]["bindings"][0]["n"]["value"]) >= 30  # the built-in demo KG
    assert run("query", "sparql", "ASK { ?s ?p ?o }").output.strip() == "true"


def test_export_formats(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    run("load", str(FIX / "small.tsv"), "--store", str(store))
    for fmt in ("nt", "ttl", "nq"):
        target = tmp_path / f"out.{fmt}"
        assert run("export", "--store", str(store), "--format", fmt, "--output", str(target)).exit_code == 0
        assert target.stat().st_size > 0
    reloaded = OxigraphStore(tmp_path / "copy")
    with open(tmp_path / "out.nt", "rb") as handle:
        reloaded.load(handle, media_type="application/n-triples", graph="urn:x:copy")
    assert reloaded.triple_count("urn:x:copy") > 0


@pytest.mark.parametrize("command", [[], ["load"], ["stats"], ["export"], ["query"], ["query", "sparql"], ["version"]])
def test_help(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_every_listed_command_has_help() -> None:
    ctx_names = main.list_commands(None)  # type: ignore[arg-type]
    for name in ctx_names:
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0, name


@pytest.mark.slow
def test_killed_load_leaves_store_as_before(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    assert run("load", str(FIX / "small.tsv"), "--store", str(store)).exit_code == 0
    before = sorted(run("export", "--store", str(store), "--format", "nq").output.splitlines())
    big = tmp_path / "big.tsv"
    with open(big, "w") as handle:
        for i in range(0, 3_000_000, 1000):
            handle.write("".join(f"E{j}\tr{j % 7}\tE{(j * 7919) % 400_000}\n" for j in range(i, i + 1000)))
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "mirage_kg.cli", "load", str(big), "--store", str(store)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(2.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the load finished before it could be killed; use a bigger file"
    after = sorted(run("export", "--store", str(store), "--format", "nq").output.splitlines())
    assert after == before
    stats = json.loads(run("stats", "--store", str(store), "--json").output)
    assert stats["facts"] == 3
