"""Release provenance: which release of which source each graph holds, recorded in the store's manifest graph.

One JSON record per source graph (``MKG:release`` in the manifest): the source format, the release's name and the
versions the source itself states (MRSAB versions, SNOMED CT effectiveTime and modules, ontology version IRI or
data-version), a SHA-256 of every input file, when it was loaded and with which options, and the releases the
graph held before (an update appends to ``history``). Citations name the release through ``release_of``."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirage_kg.model.namespaces import MKG
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import iri_ref, literal
from mirage_kg.threads import in_daemon_thread

RELEASE = MKG + "release"


@dataclass(frozen=True)
class ReleaseInfo:
    """The release a source graph holds."""

    graph: str
    source: str  #: loader name: umls, snomed, obo, owl, rdf, triples, hpoa
    release: str  #: the release's own name: 2024AA, INT_20240131, 2025-01-16, a file name
    path: str = ""
    details: dict[str, Any] = field(default_factory=dict)  #: versions the source states
    files: dict[str, str] = field(default_factory=dict)  #: file (relative to path) -> sha256
    loaded_at: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    history: tuple[str, ...] = ()  #: earlier releases of this graph, oldest first

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"] = list(self.history)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleaseInfo:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["history"] = tuple(known.get("history") or ())
        return cls(**known)

    def citation(self) -> str:
        """How a citation names the release: ``UMLS 2024AA``, ``SNOMED CT INT_20240131``, ``hp 2025-01-16``."""
        names = {"umls": "UMLS", "snomed": "SNOMED CT"}
        name = names.get(self.source) or self.details.get("ontology") or self.source
        return f"{name} {self.release}".strip()


#: within ``hashes_remembered``: file -> (size, mtime in ns, SHA-256) of files already read whole
_REMEMBERED: ContextVar[dict[Path, tuple[int, int, str]] | None] = ContextVar("mirage_kg_hashes", default=None)


@contextmanager
def hashes_remembered() -> Iterator[None]:
    """Within one ``load --update``, a release file read whole to be diffed (``line_scope.line_digests`` hashes it
    on the way) is not read again to be recorded: the record names the bytes the update compared. A file whose
    size or modification time moved since is hashed again."""
    token = _REMEMBERED.set({})
    try:
        yield
    finally:
        _REMEMBERED.reset(token)


def remember_hash(path: Path, sha256: str) -> None:
    """Keep ``path``'s SHA-256 for ``file_hashes`` while ``hashes_remembered`` is in force (else nothing)."""
    remembered = _REMEMBERED.get()
    if remembered is not None:
        stat = path.stat()
        remembered[path.resolve()] = (stat.st_size, stat.st_mtime_ns, sha256)


def file_hashes(path: Path, stop: threading.Event | None = None) -> dict[str, str]:
    """SHA-256 of a file, or of every file under a release folder (relative names), read in 1 MiB blocks.
    ``stop``: set by another thread to give up (``HashesAhead``), which then raises ``_HashingStopped``."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    remembered = _REMEMBERED.get() or {}
    out = {}
    for item in files:
        known = remembered.get(item.resolve())
        stat = item.stat() if known else None
        if known and stat is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
            hexdigest = known[2]
        else:
            digest = hashlib.sha256()
            with open(item, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    if stop is not None and stop.is_set():
                        raise _HashingStopped(item)
                    digest.update(block)
            hexdigest = digest.hexdigest()
        out[item.name if item == path else str(item.relative_to(path))] = hexdigest
    return out


def describe_release(source: str, path: Path) -> tuple[str, dict[str, Any]]:
    """(release name, versions the source states) read from a release's own files, cheaply."""
    if source == "umls":
        from mirage_kg.loaders.base import LoadOptions, LoadReport, Problem
        from mirage_kg.loaders.umls import locate_release, read_sources, release_name

        files = locate_release(path)
        versions = read_sources(files, Problem(LoadOptions(lenient=True), LoadReport()))
        return release_name(path), {"sources": dict(sorted(versions.items()))}
    if source == "snomed":
        return _describe_rf2(path)
    if source == "obo":
        return _describe_obo(path)
    if source in ("owl", "rdf"):
        head = path.read_bytes()[:1 << 16].decode("utf-8", "replace") if path.is_file() else ""
        match = re.search(r"versionIRI[^\"<]*[\"<]([^\">]+)[\">]", head)
        details = {"version_iri": match.group(1)} if match else {}
        return (match.group(1).rstrip("/").rsplit("/", 2)[-2] if match and "/" in match.group(1) else path.name,
                details)
    return path.name, {}


def _describe_rf2(path: Path) -> tuple[str, dict[str, Any]]:
    from mirage_kg.loaders.snomed import locate_release

    release = locate_release(path)
    times: set[str] = set()
    modules: set[str] = set()
    for concept_file in release.files.get("concepts", []):
        with open(concept_file, encoding="utf-8", errors="replace") as handle:
            next(handle, None)
            for line in handle:
                fields = line.split("\t", 4)
                if len(fields) >= 4:
                    times.add(fields[1])
                    modules.add(fields[3])
    stems = [re.sub(r"^sct2_Concept_(Snapshot|Full|Delta)_", "", Path(n).stem) for n in release.names()]
    dates = [m.group(0) for s in stems if (m := re.search(r"\d{8}", s))]
    return "+".join(stems), {"kind": release.kind, "effective_time": max(dates or times or {""}),
                             "modules": sorted(modules)}


def _describe_obo(path: Path) -> tuple[str, dict[str, Any]]:
    details: dict[str, Any] = {}
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.startswith(b"["):
                break
            text = raw.decode("utf-8", "replace").strip()
            for key, name in (("data-version:", "data_version"), ("ontology:", "ontology"),
                              ("format-version:", "format_version")):
                if text.startswith(key):
                    details[name] = text.split(":", 1)[1].strip()
    return details.get("data_version") or path.stem, details


def new_release_info(source: str, path: Path, graph: str, options: dict[str, Any],
                     history: tuple[str, ...] = (), files: dict[str, str] | None = None) -> ReleaseInfo:
    """The record of a release about to be loaded into ``graph`` (hashes its files, unless ``files`` gives their
    hashes already)."""
    name, details = describe_release(source, path)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    return ReleaseInfo(graph=graph, source=source, release=name, path=str(path), details=details,
                       files=file_hashes(path) if files is None else files, loaded_at=now, options=options,
                       history=history)


def release_record_update(info: ReleaseInfo) -> str:
    """The SPARQL update that replaces the graph's release record (to run alone, or inside a larger update)."""
    manifest, graph = iri_ref(MANIFEST_GRAPH), iri_ref(info.graph)
    text = json.dumps(info.to_json(), sort_keys=True, ensure_ascii=False)
    return (f"DELETE WHERE {{ GRAPH {manifest} {{ {graph} {iri_ref(RELEASE)} ?old }} }} ;\n"
            f"INSERT DATA {{ GRAPH {manifest} {{ {graph} {iri_ref(RELEASE)} {literal(text)} }} }}")


def load_recorded(store: Store, loader: Any, path: Path, options: Any, report: Any) -> list[Any]:
    """``loader.load`` with each graph's release record committed in the same update as its data (``Store.
    recording``): a load killed at any point leaves either no graph or a graph with its record. The release's
    files are hashed beside the load (``HashesAhead``), not after it."""
    with HashesAhead(path) as ahead:
        def record(graph: str) -> str:
            return release_record_update(new_release_info(loader.name, path, graph, options_record(options),
                                                           files=ahead.result()))

        with store.recording(record):
            return loader.load(store, path, options, report)


class _HashingStopped(Exception):
    """``file_hashes`` gave up on ``stop`` (internal to ``HashesAhead``; never reaches a caller)."""


class HashesAhead:
    """The release's file hashes, computed in a thread of their own while the load runs: hashlib and file reads
    release the GIL, so the hash (a 4.7 GB UMLS release: ~25 s of one core, more when its pages left the cache)
    overlaps the load instead of adding to its wall after the native loader ends. ``result`` waits for it and
    raises what hashing raised (an unreadable file), as hashing in the caller's thread would; leaving the block
    stops a hash not asked for (the load failed first)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stop = threading.Event()
        self._future: Future[dict[str, str] | None] | None = None

    def _run(self, path: Path) -> dict[str, str] | None:
        try:
            return file_hashes(path, self._stop)
        except _HashingStopped:
            return None

    def __enter__(self) -> HashesAhead:
        context = copy_context()  # the thread sees the caller's ``hashes_remembered``
        self._future = in_daemon_thread(context.run, self._run, self._path, name="mirage-kg-hash")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._future is not None:
            wait([self._future])

    def result(self) -> dict[str, str]:
        assert self._future is not None, "HashesAhead.result outside its with block"
        hashes = self._future.result()  # what hashing raised (an unreadable file), raised here
        assert hashes is not None
        return dict(hashes)


def record_release(store: Store, info: ReleaseInfo) -> None:
    """Write (or replace) the release record of ``info.graph``."""
    store.update(release_record_update(info))


def releases(store: Store) -> dict[str, ReleaseInfo]:
    """Every recorded release: graph IRI -> its record."""
    rows = store.select(f"SELECT ?g ?r WHERE {{ GRAPH {iri_ref(MANIFEST_GRAPH)} {{ ?g {iri_ref(RELEASE)} ?r }} }}")
    out = {}
    for row in rows:
        try:
            out[row["g"].value] = ReleaseInfo.from_json(json.loads(row["r"].value))
        except (ValueError, TypeError):
            continue  # a record written by a newer version: the graph is still there, its provenance unread
    return out


def release_of(store: Store, graph: str) -> ReleaseInfo | None:
    """The release ``graph`` holds, or None when it was loaded without a record (or is not a source graph)."""
    return releases(store).get(graph)


def citations(store: Store) -> dict[str, str]:
    """How each recorded source graph is cited (``UMLS 2024AA``), graph IRI -> text, in one query: what an
    answer's cited paths name next to their graph (``Evidence.sources``)."""
    return {graph: info.citation() for graph, info in releases(store).items()}


def options_record(options: Any) -> dict[str, Any]:
    """The load options worth recording (what was asked, not the defaults left empty)."""
    data = {"lang": options.lang, "lenient": options.lenient, "namespace": options.namespace,
            "relation_namespace": options.relation_namespace}
    data.update({k: v for k, v in sorted(options.extra.items())
                 if v not in (None, False, [], "", ()) and k != "force"})  # --force: how, not what, was loaded
    return data
