"""What names an on-disk embedded store's content for the caches built from it, without reading a quad.

RocksDB never rewrites a file in place: every write appends to the write-ahead log or makes new table files (new
numbers), so the names and sizes of its files (and its IDENTITY) change with any write, by any program. They also
change when nothing did (a writer opening, a compaction), so the last mirage-kg writer to close records which
files its content key belongs to (``store-state.json`` beside the caches); a store whose files are not the ones
recorded (written by another tool, an older mirage-kg, or a killed writer) is keyed by its files instead, which
can only cost a rebuild of its caches, never a stale one."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

#: the files that hold a RocksDB store's data and state (its lock and info logs hold none)
_DATA_FILE = re.compile(r"(\d+\.(sst|log|blob)|bulk-.*\.sst|CURRENT|IDENTITY|(MANIFEST|OPTIONS)-\d+)")
RECORD = "store-state.json"
_FORMAT = 1
#: read-only opens of a store that a writer keeps changing, before its content is keyed by a count instead
STEADY_ATTEMPTS = 3
T = TypeVar("T")


@dataclass(frozen=True)
class ContentKey:
    """A key naming a store's content (None: the store cannot give one cheaply, so the caller counts it), and
    what to tell the user about it ("" when nothing is unusual)."""

    key: str | None
    note: str = ""


def files_key(folder: Path) -> str:
    """A hash of the names and sizes of the store's RocksDB files and its IDENTITY: a listing, no data read."""
    digest = hashlib.sha256(b"rocksdb-files-1")
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not (_DATA_FILE.fullmatch(entry.name) and entry.is_file()):
                continue
            try:
                found.append((entry.name, entry.stat().st_size))
            except FileNotFoundError:
                # RocksDB deleted it between the listing and the stat (an open writer's compaction): no longer
                # one of the store's files; the listing then differs from the next, which costs a rebuild at most
                continue
    for name, size in sorted(found):
        digest.update(f"{name}\t{size}\n".encode())
    try:
        digest.update((folder / "IDENTITY").read_bytes())
    except OSError:
        pass  # no IDENTITY (never in a store RocksDB made): the listing alone
    return digest.hexdigest()


def steady_open(folder: Path, open_handle: Callable[[], T]) -> tuple[T, str | None]:
    """``open_handle()`` (a read-only open: it sees the store as it is at that moment) with the files key of what
    it sees: the listing before and after the open must agree, else a writer was changing the store meanwhile and
    the open is tried again; None after ``STEADY_ATTEMPTS``."""
    handle: T | None = None
    for _ in range(STEADY_ATTEMPTS):
        before = files_key(folder)
        handle = open_handle()
        if files_key(folder) == before:
            return handle, before
        del handle
    return open_handle(), None


def settled_files_key(folder: Path, pause: float = 0.03, attempts: int = 10) -> str:
    """The files key once a freshly opened writer's background work (RocksDB compacts and purges files right
    after an open) has stopped changing the listing: two listings ``pause`` apart agree, or the last one after
    ``attempts``. Only a best effort: a compaction still running later costs the next process a rebuild, never
    a stale cache."""
    key = files_key(folder)
    for _ in range(attempts):
        time.sleep(pause)
        again = files_key(folder)
        if again == key:
            break
        key = again
    return key


def record_file(folder: Path) -> Path:
    return folder / ".mirage-cache" / RECORD  # ``caching.cache_folder``'s folder for an on-disk store


def recorded(folder: Path) -> tuple[str, str] | None:
    """The (files key, content key) the last mirage-kg writer (or a reader that keyed the store by its files)
    recorded; None when there is no readable record."""
    try:
        data = json.loads(record_file(folder).read_text(encoding="utf-8"))
        if data.get("format") == _FORMAT and isinstance(data.get("files"), str) and isinstance(data.get("key"), str):
            return data["files"], data["key"]
    except (OSError, ValueError, AttributeError):
        pass
    return None


def record(folder: Path, files: str, key: str) -> None:
    """Record that the store whose files hash to ``files`` holds the content ``key`` names (atomically; a store
    folder that cannot be written keeps no record, and is then keyed by its files on every open)."""
    path = record_file(folder)
    temporary = path.with_name(f".{RECORD}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        temporary.write_text(json.dumps({"format": _FORMAT, "files": files, "key": key}), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)


def key_of(folder: Path, files: str | None, location: str) -> ContentKey:
    """The content key of a store whose files hash to ``files`` (None: they were changing while it opened)."""
    if files is None:
        return ContentKey(None, f"store {location} was being written while it opened: its caches are keyed by "
                                "a count of every quad instead (a minute at 45M quads)")
    found = recorded(folder)
    if found is not None and found[0] == files:
        return ContentKey(found[1])
    key = "f" + files[:19]
    from mirage_kg.store.checkpoints import writer_active

    if writer_active(folder):  # not recorded for others: the writer records its own key for what it leaves
        return ContentKey(key, f"store {location}: another mirage-kg process is writing to it (a load, build or "
                               "index under way); this reads what it had committed when this opened, and the indexes "
                               "the writer has not named for that yet are built here")
    why = "was last written by an older mirage-kg or another tool" if found is None else \
        "changed since mirage-kg last wrote it (a mirage-kg load was killed, or another tool wrote to it)"
    record(folder, files, key)
    return ContentKey(key, f"store {location} {why}: caches built from it before are not used (they are rebuilt)")
