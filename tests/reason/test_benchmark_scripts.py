"""The chain benchmarks run (tiny settings): the GPU script's dry run on both engines, and bench_chains on the tiny
model. They measure speed, so only their bookkeeping is checked here, never a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> object:
    done = subprocess.run([sys.executable, *args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("engine", ["loop", "generate"])
def test_gpu_script_dry_run_makes_every_token_on_both_engines(engine: str) -> None:
    pytest.importorskip("transformers", reason="the [llm] extra is not installed")
    info = _run("benchmarks/gpu/bench_qwq_batched.py", "--dry-run", "--engine", engine, "--chains", "2,3")
    assert isinstance(info, dict) and info["engine"] == engine and info["device"] == "cpu"
    assert [r["chains"] for r in info["results"]] == [2, 3]
    for row in info["results"]:
        assert row["batched"]["tokens"] == row["chains"] * info["new_tokens"]  # EOS suppressed: exact counts
        assert row["sequential"]["tokens"] == row["chains"] * info["new_tokens"]
        assert row["ratio_batched_to_one_chain"] > 0


@pytest.mark.llm
def test_bench_chains_batched_and_sequential_make_the_same_tokens() -> None:
    rows = _run("benchmarks/bench_chains.py", "--backends", "tiny", "--chains", "3", "--tokens", "8")
    assert isinstance(rows, list) and len(rows) == 1
    row = rows[0]
    assert row["engine"] == "loop" and row["chains"] == 3
    assert row["batched"]["tokens"] == row["sequential"]["tokens"] > 0  # greedy: the same text either way


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
