"""The reasoner's benchmarks run (tiny settings): the GPU script's dry run on the CPU and bench_chains on the tiny
model. They measure speed, so only what they count is checked here, never a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> object:
    done = subprocess.run([sys.executable, *args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=400,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_gpu_script_dry_run_measures_every_engine_or_says_why_not() -> None:
    pytest.importorskip("transformers", reason="the [llm] extra is not installed")
    report = _run("benchmarks/gpu/bench_engines.py", "--dry-run", "--chains", "1,3")
    assert isinstance(report, dict) and report["chains"] == [1, 3]
    engines = {info["engine"]: info for info in report["engines"]}
    assert set(engines) == {"cb", "generate", "vllm"}
    for name in ("cb", "generate"):  # transformers' continuous batching and generate both run on the CPU
        info = engines[name]
        assert "failed" not in info, info.get("failed")
        assert [r["chains"] for r in info["rows"]] == [1, 3]
        for row in info["rows"]:
            assert row["tokens"] == row["chains"] * report["new_tokens"]  # EOS ignored: exact counts
            assert row["ratio_to_one_chain"] > 0 and row["kv_bytes_needed"] > 0
    assert "skipped" in engines["vllm"] or engines["vllm"]["rows"]  # no GPU here: skipped, saying why


@pytest.mark.llm
@pytest.mark.slow
def test_bench_chains_runs_one_chain_samples_and_distinct_questions() -> None:
    rows = _run("benchmarks/bench_chains.py", "--engines", "tiny", "--chains", "3", "--tokens", "8")
    assert isinstance(rows, list) and len(rows) == 1
    row = rows[0]
    assert row["engine"] == "tiny" and row["one"]["chains"] == 1
    assert row["samples"]["chains"] == row["distinct"]["chains"] == 3
    for run in ("one", "samples", "distinct"):
        assert 0 < row[run]["max_chain_tokens"] <= 8  # the budget holds in the benchmark too
    assert row["ratio_samples_to_one"] > 0 and row["ratio_distinct_to_one"] > 0


@pytest.mark.slow
@pytest.mark.server
def test_bench_serve_quick_run_counts_requests_and_errors() -> None:
    pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")
    info = _run("benchmarks/bench_serve.py", "--quick")
    assert isinstance(info, dict) and info["clients"] == 4
    assert [r["endpoint"] for r in info["rows"]] == ["anchor", "bridge", "link"]
    for row in info["rows"]:
        assert row["requests"] > 0 and row["errors"] == 0, row
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
