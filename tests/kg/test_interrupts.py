"""Ctrl-C tells the truth: a real SIGINT to a real ``mirage-kg`` process. ``load --update`` stops at once with the
old state kept while its transaction runs (before the commit point), says the update was applied once it has
committed, and ``index`` stops keeping the store and what it finished; ``export -o`` removes the part files of
killed writers on its next run."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "mirage_kg.cli"]
ROWS = 120_000


def _as_typed_at_a_terminal() -> None:
    """A child's Ctrl-C as at a terminal: a runner started in the background (``cmd &`` in a script) hands its
    children SIGINT ignored, and Python then never raises KeyboardInterrupt; the product's own behaviour is what
    these tests check."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "MIRAGE_KG_PROGRESS": "0", "MIRAGE_KG_INDEX": "0", **extra}


def _release(folder: Path, shift: bool) -> Path:
    """A triple file; the second release renames half of the heads (a difference of ~200k triples)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "triples.tsv"
    with open(path, "w") as handle:
        for j in range(ROWS):
            head = j + 1_000_000 if shift and j % 2 == 0 else j
            handle.write(f"E{head}\tr{j % 7}\tE{(j * 7919) % 90_000}\n")
    return path


def _entities(store: Path) -> int:
    done = subprocess.run([*CLI, "stats", "--store", str(store), "--json"], env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["entities"]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A store holding release 1 (with its label index), and the folder of release 2."""
    root = tmp_path_factory.mktemp("releases")
    first, second = _release(root / "v1", False), _release(root / "v2", True)
    store = root / "kg"
    subprocess.run([*CLI, "load", str(first), "--store", str(store), "--index", "--no-embeddings"], env=_env(),
                   check=True, capture_output=True, timeout=600)
    return store, first, second


def _update(store: Path, second: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "load", str(second), "--store", str(store), "--update", *extra],
                            preexec_fn=_as_typed_at_a_terminal,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen[str], condition: "callable", what: str) -> None:  # type: ignore[valid-type]
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended before {what}: rc {proc.returncode}\n{err}")
        time.sleep(0.01)


@pytest.mark.slow
def test_ctrl_c_while_the_update_commits_stops_and_keeps_the_old_release(releases: tuple[Path, Path, Path],
                                                                         tmp_path: Path) -> None:
    """Used to wait for the native transaction (a minute at EMCKG scale), then say "nothing was half-written"
    over a store that held the new release."""
    source, _, second = releases
    store = tmp_path / "kg"
    shutil.copytree(source, store)
    before = _entities(store)
    proc = _update(store, second)
    # the transaction starts once the difference is known: its rollback checkpoint appears in the store
    _wait(proc, lambda: bool(glob.glob(str(store / "rollback-*.json"))), "its transaction began")
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=600)
    stopped = time.monotonic() - sent
    assert proc.returncode == 1, err
    assert "stopped before it committed" in err and "nothing was applied" in err, err
    assert _entities(store) == before  # the next open put the old state back
    assert not list(store.glob("rollback-*"))
    print(f"stopped {stopped:.2f} s after SIGINT")
    # and the update still applies afterwards
    again = _update(store, second)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert _entities(store) > before


@pytest.mark.slow
def test_ctrl_c_past_the_commit_point_says_the_update_was_applied(releases: tuple[Path, Path, Path],
                                                                  tmp_path: Path) -> None:
    source, _, second = releases
    store = tmp_path / "kg"
    shutil.copytree(source, store)
    before = _entities(store)
    proc = _update(store, second, "--index", "--no-embeddings")  # the index step after the commit takes seconds
    _wait(proc, lambda: bool(glob.glob(str(store / "rollback-*.json"))), "its transaction began")
    _wait(proc, lambda: not glob.glob(str(store / "rollback-*")), "its transaction committed")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "applied" in err and "nothing was half-written" not in err, err
    assert _entities(store) > before


def _store_with_rows(folder: Path) -> Path:
    source = _release(folder / "src", False)
    store = folder / "kg"
    subprocess.run([*CLI, "load", str(source), "--store", str(store)], env=_env(), check=True, capture_output=True,
                   timeout=600)
    return store


@pytest.mark.slow
def test_ctrl_c_stops_index_and_the_next_run_goes_on(tmp_path: Path) -> None:
    store = _store_with_rows(tmp_path)
    proc = subprocess.Popen([*CLI, "index", "--store", str(store), "--no-embeddings"], env=_env(),
                            preexec_fn=_as_typed_at_a_terminal,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(iter(proc.stderr.readline, ""))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _wait(proc, lambda: any(line.startswith("index degrees") for line in lines), "its first index was built")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=300)
    reader.join(timeout=30)
    err = "".join(lines)
    assert proc.returncode == 1, err
    assert "interrupted" in err and "store is unchanged" in err and "loads are atomic" not in err, err
    again = subprocess.run([*CLI, "index", "--store", str(store), "--no-embeddings", "--json"], env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    status = {step["name"]: step["status"] for step in json.loads(again.stdout)}
    assert status["labels"] in ("built", "cached") and status["degrees"] in ("built", "cached"), status
    assert (store / ".mirage-cache" / "degrees.sqlite").is_file()  # what the interrupted run finished is kept


def test_export_removes_the_part_files_of_killed_writers(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mirage_kg.cli import main

    store = tmp_path / "kg"
    small = Path(__file__).resolve().parent.parent / "fixtures" / "core" / "small.tsv"
    assert CliRunner().invoke(main, ["load", str(small), "--store", str(store)]).exit_code == 0
    target = tmp_path / "out.nt"
    # a real export killed while writing: its part file stays behind
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys\nfrom pathlib import Path\nfrom mirage_kg.cli.kg_commands import write_atomically\n"
        "def write(handle):\n    handle.write(b'<a> <b> <c> .\\n'); handle.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        f"write_atomically(Path({str(target)!r}), write)\n")], env=_env(), capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    stale = list(tmp_path.glob(".out.nt.*.part"))
    assert len(stale) == 1
    # a live writer's part is not touched
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".out.nt.{live.pid}.part"
        busy.write_bytes(b"")
        other = tmp_path / ".other.nt.1.part"  # another file's part: not this target's
        other.write_bytes(b"")
        result = CliRunner().invoke(main, ["export", "--store", str(store), "--format", "nt", "-o", str(target)])
        assert result.exit_code == 0, result.output
        assert not stale[0].exists() and busy.exists() and other.exists()
        assert "Flu" in target.read_text()
    finally:
        live.kill()
        live.wait()
