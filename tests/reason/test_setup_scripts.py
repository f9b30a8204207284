"""The install scripts' long steps say what they are doing: ``scripts/long_step.sh`` runs a command with its output
in a log and, while it runs, reports the time taken and the log's last line; a failure shows the log's end."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def _step(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    command = f'. "{ROOT}/scripts/long_step.sh"; long_step "compiling demo" "{tmp_path}/build.log" bash -c \'{script}\''
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "MIRAGE_KG_STEP_EVERY": "1"})


def test_long_step_reports_progress_and_success(tmp_path: Path) -> None:
    done = _step(tmp_path, 'for i in 10 55; do echo "[ $i%] Building CXX object ggml.c.o"; sleep 2; done')
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # the command's own output goes to the log, not the terminal
    assert "compiling demo (output:" in done.stderr and "compiling demo: done in" in done.stderr
    progress = [line for line in done.stderr.splitlines() if "s so far" in line]
    assert progress and any("[ 55%] Building CXX object" in line for line in progress)
    assert "[ 10%]" in (tmp_path / "build.log").read_text()


def test_long_step_failure_shows_the_log(tmp_path: Path) -> None:
    failed = _step(tmp_path, 'echo "error: no compiler"; exit 3')
    assert failed.returncode == 3
    assert "compiling demo: failed after" in failed.stderr and "error: no compiler" in failed.stderr


def test_setup_installs_what_the_tour_uses() -> None:
    import tomllib

    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert 'pip install -q -e ".[all]"' in setup
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    everything = extras["all"][0]
    # the tour: ask and link (embed, llm), build-default (sources), serve and its MCP tools, eval, validate --reason
    for extra in ("embed", "llm", "sources", "serve", "mcp", "eval", "owl"):
        assert extra in everything.split("[")[1], extra
    assert 'long_step "compiling llama.cpp' in setup  # the compile says what it is doing
