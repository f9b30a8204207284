"""Rollback checkpoints of an on-disk embedded store: how a load into it is all-or-nothing at no extra cost.

Before a load, RocksDB makes a checkpoint of the store in a folder inside it (hard links to its immutable files:
milliseconds, whatever the size), and a marker file names the graph being loaded. The load then goes straight into
its graph with the native bulk loader, so a merge into a filled graph costs what a fresh load does. A load that
commits drops the checkpoint; one that fails, is interrupted or is killed is undone by putting the checkpoint's
files back in place of the store's (milliseconds again, however much was loaded). Whether a killed load had
committed is read from the store's own manifest (its pending mark is gone), so the store stays the one truth.

A restore runs with the store closed and the writer's lock (``WriterLock``) held, and is idempotent: the marker is
renamed to ``.restoring`` first, and a restore found in that state is simply done again."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

PREFIX = "rollback-"
READY = ".json"
RESTORING = ".restoring"
LOCK_FILE = "mirage-kg-writer.lock"
#: the files RocksDB keeps at the top of its folder (what a restore replaces); anything else (caches, markers,
#: info logs, folders) is left alone
_ROCKSDB_FILE = re.compile(r"(\d+\.(sst|log|blob)|bulk-.*\.sst|CURRENT|IDENTITY|LOCK|(MANIFEST|OPTIONS)-\d+|"
                           r".*\.dbtmp)")


@dataclass(frozen=True)
class Checkpoint:
    """A rollback checkpoint: its folder, its marker file and the graph the load it guards writes."""

    folder: Path
    marker: Path
    graph: str

    @property
    def restoring(self) -> bool:
        return self.marker.suffix == RESTORING


class WriterLock:
    """An exclusive lock among the processes that write to one store (readers never take it). RocksDB's own
    lock ends when the store closes, and a restore needs the store closed, so this one spans the restore."""

    def __init__(self, store_folder: Path) -> None:
        self.path = store_folder / LOCK_FILE
        self._handle: int | None = None

    def acquire(self) -> bool:
        """Take the lock if it is free; whether it was."""
        handle = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(handle)
            return False
        self._handle = handle
        return True

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # closing the descriptor drops the lock
            self._handle = None


def writer_active(store_folder: Path) -> bool:
    """Whether a process holds the store's ``WriterLock`` now, read from the kernel's lock table
    (``/proc/locks``) without touching the lock (a probe by locking it could make a writer starting that instant
    fail). False where that table cannot be read."""
    try:
        info = os.stat(store_folder / LOCK_FILE)
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            rows = table.read().splitlines()
    except OSError:
        return False
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    return any(device in row.split() and "FLOCK" in row for row in rows)


def make_marker(store_folder: Path) -> tuple[Path, Path]:
    """A new checkpoint's folder (to be made by RocksDB) and marker path."""
    name = f"{PREFIX}{uuid.uuid4().hex}"
    return store_folder / name, store_folder / f"{name}{READY}"


def write_marker(marker: Path, graph: str) -> Checkpoint:
    """Record a complete checkpoint (written after RocksDB made its folder: a folder without a marker is an
    unfinished checkpoint, and only removed)."""
    temporary = marker.with_suffix(".tmp")  # a marker is written whole or not at all
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"graph": graph}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, marker)
    _sync_folder(marker.parent)
    return Checkpoint(marker.with_suffix(""), marker, graph)


def found(store_folder: Path) -> list[Checkpoint]:
    """The checkpoints a store folder holds (a killed load's, or one being restored), oldest first."""
    checkpoints = []
    for marker in sorted(store_folder.glob(f"{PREFIX}*"), key=lambda p: p.stat().st_mtime if p.exists() else 0):
        if marker.suffix not in (READY, RESTORING) or not marker.is_file():
            continue
        try:
            graph = json.loads(marker.read_text(encoding="utf-8")).get("graph", "")
        except (OSError, ValueError):
            graph = ""  # a torn marker: never written whole, so its load never began
        checkpoints.append(Checkpoint(marker.with_suffix(""), marker, graph))
    return checkpoints


def any_found(store_folder: Path) -> bool:
    return any(p.suffix in (READY, RESTORING) for p in store_folder.glob(f"{PREFIX}*"))


def restore_under_way(store_folder: Path) -> bool:
    return any(store_folder.glob(f"{PREFIX}*{RESTORING}"))


def drop(checkpoint: Checkpoint) -> None:
    """Forget a checkpoint (its load committed, or never began): the marker first, so that a process killed
    midway leaves only an unmarked folder, which ``remove_unmarked`` deletes."""
    with contextlib.suppress(FileNotFoundError):
        checkpoint.marker.unlink()
    shutil.rmtree(checkpoint.folder, ignore_errors=True)


def mark_for_restore(checkpoint: Checkpoint) -> Checkpoint:
    """Make the next open put this checkpoint back, whatever its load did since (an abandoned transaction)."""
    if checkpoint.restoring:
        return checkpoint
    restoring = checkpoint.marker.with_suffix(RESTORING)
    os.replace(checkpoint.marker, restoring)
    _sync_folder(checkpoint.marker.parent)
    return Checkpoint(checkpoint.folder, restoring, checkpoint.graph)


def restore(store_folder: Path, checkpoint: Checkpoint) -> None:
    """Put the checkpoint's files in place of the store's. The store must be closed and the writer lock held."""
    marker = checkpoint.marker
    if not checkpoint.restoring:
        restoring = marker.with_suffix(RESTORING)
        os.replace(marker, restoring)
        _sync_folder(store_folder)
        marker = restoring
    for entry in os.listdir(store_folder):
        path = store_folder / entry
        if _ROCKSDB_FILE.fullmatch(entry) and path.is_file():
            path.unlink()
    for entry in os.listdir(checkpoint.folder):
        if _ROCKSDB_FILE.fullmatch(entry) and entry != "LOCK":  # not its info log or lock (a rebuilt store's)
            os.link(checkpoint.folder / entry, store_folder / entry)
    _sync_folder(store_folder)
    marker.unlink()  # the restore is done: from here a kill leaves only a folder to delete
    _sync_folder(store_folder)
    shutil.rmtree(checkpoint.folder, ignore_errors=True)


def remove_unmarked(store_folder: Path) -> None:
    """Delete checkpoint folders no marker names (a checkpoint killed while being made, or already dropped)."""
    for folder in store_folder.glob(f"{PREFIX}*"):
        if folder.is_dir() and not folder.with_suffix(READY).exists() and \
                not folder.with_suffix(RESTORING).exists():
            shutil.rmtree(folder, ignore_errors=True)
    for temporary in store_folder.glob(f"{PREFIX}*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def wait_for_restore(store_folder: Path, seconds: float = 30.0) -> None:
    """Let another process's restore finish (it takes milliseconds) before reading the store's files."""
    deadline = time.monotonic() + seconds
    while restore_under_way(store_folder) and time.monotonic() < deadline:
        time.sleep(0.05)


def _sync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
