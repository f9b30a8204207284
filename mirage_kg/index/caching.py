"""Store identity and the on-disk cache folders derived from it: the manifest's load records, a fingerprint that
changes whenever the store's content may have, and where caches built from a store (degree index, label index,
embeddings) live."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path

from mirage_kg.errors import StoreStateWarning

from mirage_kg.store.base import LOADED_AT, LOADED_FROM, MANIFEST_GRAPH, Store

_USER_CACHE_KEEP = 24  # fingerprint folders kept under ~/.cache/mirage-kg (memory stores make a new one each run)


def load_records(store: Store) -> tuple[tuple[str, ...], ...]:
    """The manifest's committed loads (graph, source, loadedAt), sorted: changes whenever a load commits."""
    found: dict[str, list[str]] = {}
    for quad in store.quads(predicate=None, graph=MANIFEST_GRAPH):
        if quad.predicate.value in (LOADED_FROM, LOADED_AT):
            found.setdefault(quad.subject.value, []).append(f"{quad.predicate.value}={quad.object.value}")
    return tuple(sorted((g, *sorted(v)) for g, v in found.items()))


def store_fingerprint(store: Store, triple_count: int | None = None) -> str:
    """The key that caches built from the store (degree index, label index, embeddings) are filed under: the
    store's own content key where it has one (an on-disk embedded store: a listing of its files, no quad read;
    see ``mirage_kg.store.content_key``), else a short hash of its load records and triple count
    (``triple_count`` when the caller has just counted: a count reads every quad). What the store says about its
    key (why its caches are rebuilt, or why it had to be counted) is told once, as a ``StoreStateWarning``."""
    cheap = store.content_key()
    if cheap.note and (store.location, cheap.note) not in _told:
        _told.add((store.location, cheap.note))
        warnings.warn(cheap.note, StoreStateWarning, stacklevel=2)
    if cheap.key is not None:
        return cheap.key
    payload = json.dumps([store.location if store.location != "memory" else "", load_records(store),
                          store.triple_count() if triple_count is None else triple_count])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]


_told: set[tuple[str, str]] = set()


def cache_folder(store: Store, fingerprint: str, cache_dir: Path | None = None) -> Path:
    """Where caches for this store live: ``<store>/.mirage-cache/`` for an on-disk store, else a fingerprint folder
    under ``cache_dir`` or ``$MIRAGE_KG_CACHE`` or ``~/.cache/mirage-kg``. Stale entries inside are the caller's to
    judge by fingerprint; old fingerprint folders are pruned."""
    if cache_dir is None and store.path is not None:
        folder = store.path / ".mirage-cache"
        try:
            folder.mkdir(exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            pass
    root = Path(cache_dir or os.environ.get("MIRAGE_KG_CACHE") or Path.home() / ".cache" / "mirage-kg")
    folder = root / fingerprint
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)
    if cache_dir is None:
        _prune(root)
    return folder


def _prune(root: Path) -> None:
    try:
        entries = sorted((p for p in root.iterdir() if p.is_dir() and len(p.name) == 20),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in entries[_USER_CACHE_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def write_sqlite_in_place(path: Path, fill: Callable[[sqlite3.Connection], None]) -> bool:
    """Build the SQLite file ``path`` under a temporary name beside it (``fill`` creates and fills its tables,
    with a one-shot build's settings: no journal, no syncs, one writer, a large page cache) and move it into place
    in one rename, so a killed build leaves no file and a reader never sees half of one; False, nothing left
    behind, when the folder cannot be written or the build fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        db = sqlite3.connect(tmp)
    except (OSError, sqlite3.Error):
        return False
    try:
        db.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; "
                         "PRAGMA cache_size = -131072;")
        fill(db)
        db.commit()
        db.close()
        os.replace(tmp, path)
    except (OSError, sqlite3.Error):
        db.close()
        tmp.unlink(missing_ok=True)
        return False
    return True
