"""How commands open an on-disk store and write their outputs: readers open read-only and share (with each other
and with a writer), a folder that is not a store is an error for them, orphan bulk files go on the next write,
``export -o`` follows symlinks and writes devices and pipes in place, and output paths are checked before work."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import StoreError
from mirage_kg.store import OxigraphStore, open_store
from mirage_kg.store.base import MANIFEST_GRAPH, PENDING

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "core"


def run(*args: str) -> "object":
    return CliRunner().invoke(main, list(args))


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture()
def kg(tmp_path: Path) -> Path:
    folder = tmp_path / "kg"
    assert run("load", str(FIX / "small.tsv"), "--store", str(folder)).exit_code == 0
    return folder


def test_a_read_command_on_a_folder_that_is_not_a_store_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "README").write_text("not a store\n")
    for command in (["stats"], ["export", "--format", "nt"], ["query", "anchor", "Flu"], ["validate"]):
        result = run(*command, "--store", str(folder))
        assert result.exit_code == 1 and "is not a mirage-kg store" in result.output, (command, result.output)
    assert sorted(p.name for p in folder.iterdir()) == ["README"]
    # and load will not turn it into a store either: a store is made in a new or empty folder
    result = run("load", str(FIX / "small.tsv"), "--store", str(folder))
    assert result.exit_code == 1 and "not a mirage-kg store" in result.output
    assert sorted(p.name for p in folder.iterdir()) == ["README"]


def test_readers_share_the_store_and_read_while_a_writer_holds_it(kg: Path) -> None:
    first, second = open_store(kg), open_store(kg)  # two readers at once
    assert first.triple_count() == second.triple_count() > 0
    writer = OxigraphStore(kg)  # holds the write lock, as `load` or `build-default` would
    try:
        result = run("stats", "--store", str(kg), "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["facts"] == 3
        with pytest.raises(StoreError, match="another mirage-kg process is writing"):
            OxigraphStore(kg)  # only writers exclude each other
    finally:
        writer.close()
        first.close()
        second.close()


def test_reading_leaves_the_store_files_untouched(kg: Path) -> None:
    """What makes a read-only (chmod a-w, read-only mount) store readable: a reader writes nothing."""
    before = folder_state(kg)
    assert run("stats", "--store", str(kg)).exit_code == 0
    assert run("export", "--store", str(kg), "--format", "nt").exit_code == 0
    assert folder_state(kg) == before


def test_a_chmod_read_only_store_can_be_read(kg: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: file modes do not stop writes (see the untouched-files test)")
    for path in [*kg.iterdir(), kg]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        result = run("stats", "--store", str(kg), "--json")
        assert result.exit_code == 0 and json.loads(result.output)["facts"] == 3, result.output
    finally:
        for path in [kg, *kg.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_reader_drops_a_killed_loads_leftovers_when_no_writer_is_there(kg: Path) -> None:
    store = OxigraphStore(kg)
    half = "https://example.org/graph/half-loaded"
    store.update(f"INSERT DATA {{ GRAPH <{half}> {{ <urn:a> <urn:b> <urn:c> }} "
                 f"GRAPH <{MANIFEST_GRAPH}> {{ <{half}> <{PENDING}> \"t\" }} }}")
    store.close()
    del store
    reader = open_store(kg)
    assert half not in reader.graphs()


def test_orphan_bulk_files_are_removed_on_the_next_write_open(kg: Path) -> None:
    orphan = kg / "bulk-1234567890.sst"
    orphan.write_bytes(b"\0" * 4096)
    open_store(kg).close()  # a reader leaves them: it holds no lock, a writer may be using them
    assert orphan.exists()
    assert run("load", str(FIX / "small.tsv"), "--store", str(kg)).exit_code == 0
    assert not orphan.exists()


def test_export_follows_a_symlink_and_keeps_it(kg: Path, tmp_path: Path) -> None:
    target = tmp_path / "real.nt"
    target.write_text("old\n")
    link = tmp_path / "link.nt"
    link.symlink_to(target)
    result = run("export", "--store", str(kg), "--format", "nt", "-o", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "Flu" in target.read_text()


def test_export_writes_a_pipe_in_place(kg: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = run("export", "--store", str(kg), "--format", "nt", "-o", str(fifo))
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert fifo.is_fifo(), "the pipe was replaced by a regular file"
    assert b"Flu" in received[0]


@pytest.mark.parametrize("option", ["export", "report"])
def test_an_unwritable_output_is_one_line_and_checked_first(kg: Path, tmp_path: Path, option: str) -> None:
    bad = tmp_path / "no" / "such" / "folder" / "out.json"
    before = run("export", "--store", str(kg), "--format", "nq").output
    if option == "export":
        result = run("export", "--store", str(kg), "--format", "nt", "-o", str(bad))
    else:
        result = run("load", str(FIX / "tiny.ttl"), "--store", str(kg), "--report", str(bad))
    assert result.exit_code == 1 and "cannot write" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert run("export", "--store", str(kg), "--format", "nq").output == before  # the load never ran


def test_disk_full_during_a_load_is_one_line_and_rolls_back(kg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = run("export", "--store", str(kg), "--format", "nq").output

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(OxigraphStore, "_bulk_load_into", full)
    result = run("load", str(FIX / "tiny.ttl"), "--store", str(kg))
    assert result.exit_code == 1 and "No space left on device" in result.output
    assert "free some disk space" in result.output and "Traceback" not in result.output
    monkeypatch.undo()
    assert run("export", "--store", str(kg), "--format", "nq").output == before


def test_format_triples_on_a_folder_and_a_bad_lang_are_one_line(kg: Path, tmp_path: Path) -> None:
    result = run("load", str(tmp_path), "--format", "triples", "--store", str(kg))
    assert result.exit_code == 1 and "is a folder" in result.output and "Traceback" not in result.output
    result = run("load", str(FIX / "small.tsv"), "--lang", "e n", "--store", str(kg))
    assert result.exit_code == 2 and "is not a language tag" in result.output
