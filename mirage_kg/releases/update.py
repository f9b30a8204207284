"""``load --update``: a new release of a source over the graph that holds its previous release, by applying the
difference in one transaction. Until that transaction the previous release is what every reader sees; a process
killed before it leaves the previous release as it was (nothing is written before it).

The new release runs through its own loader into a ``CapturingStore`` (sorted lines, nothing written), is merged
against the graph's sorted lines, and the triples removed and added go in with the new release record in one
SPARQL update. SNOMED CT Delta files are read over the previous release's files (see ``loaders.snomed``)."""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox

from mirage_kg.index.caching import store_fingerprint
from mirage_kg.errors import InputError, UpdateInterrupted
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, RowsNeedWholeRelease
from mirage_kg.model.namespaces import XSD, compress
from mirage_kg.releases.diff import (
    CapturingStore,
    GraphDump,
    ReleaseDiff,
    graph_contains,
    graph_lines,
    triple_difference,
)
from mirage_kg.releases.line_scope import previous_file, row_difference, supports_rows
from mirage_kg.releases.sorting import SortedLines
from mirage_kg.releases.provenance import (
    ReleaseInfo,
    hashes_remembered,
    new_release_info,
    options_record,
    release_record_update,
    releases,
)
from mirage_kg.store.base import LOADED_AT, LOADED_FROM, MANIFEST_GRAPH, Store
from mirage_kg.model.terms import iri_ref, literal

#: triples per INSERT/DELETE DATA block (one transaction holds them all; blocks keep each statement small)
_BLOCK = 20_000
#: a new release that keeps less than this share of a graph's triples is no release of what the graph holds
#: (an unrelated file, another ontology) unless ``--force`` says so; graphs of fewer triples are not judged
MIN_SHARED = 0.05
MIN_JUDGED_TRIPLES = 100


@dataclass(frozen=True)
class UpdateResult:
    """What ``update_release`` did: the difference it applied and the release the graph now holds."""

    graph: str
    diff: ReleaseDiff
    release: ReleaseInfo
    #: label rows the carried label index re-read for the changed entities; None: no index to carry (the index
    #: step builds one)
    labels_updated: int | None = None


def target_graph(store: Store, loader: Loader, explicit: str | None) -> str:
    """The graph a new release of this source goes over: ``--graph``, else the one graph holding a release
    loaded with the same loader."""
    if explicit:
        if store.triple_count(explicit) == 0:
            raise InputError(f"graph {compress(explicit)} holds nothing to update; load the release without --update")
        return explicit
    candidates = sorted(g for g, info in releases(store).items() if info.source == loader.name)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise InputError(f"no graph of {store.location} holds a {loader.name} release recorded in its manifest; "
                         "load the first release without --update, or name the graph with --graph")
    raise InputError(f"several graphs hold {loader.name} releases ({', '.join(compress(g) for g in candidates)}); "
                     "say which with --graph")


def delta_base(previous: ReleaseInfo) -> list[str]:
    """The releases a SNOMED CT Delta applies over: the graph's base release and the Deltas applied since."""
    return list(previous.options.get("snomed_base_chain") or [previous.path])


def release_lines(loader: Loader, path: Path, options: LoadOptions, report: LoadReport, graph: str,
                  reads: Store | None, workdir: str | Path | None = None) -> CapturingStore:
    """A release on disk as the sorted lines a load into ``graph`` would write (nothing is written)."""
    capture = CapturingStore(reads, workdir)
    graph_options = LoadOptions(graph=graph, namespace=options.namespace,
                                relation_namespace=options.relation_namespace, lang=options.lang,
                                lenient=options.lenient, extra=options.extra)  # the loader may note what it applied
    loader.load(capture, path, graph_options, report)
    return capture


def diff_release(store: Store, graph: str, loader: Loader, path: Path, options: LoadOptions,
                 report: LoadReport, examples: int = 10, previous: ReleaseInfo | None = None) -> ReleaseDiff:
    """The difference between what ``graph`` holds and the release at ``path``. With the previous release's file
    at hand (``previous``, a line-based source), only the rows that changed are parsed (``line_scope``); a loader
    that can tell which subjects a release may change (``update_scope``: a SNOMED CT Delta) has only those
    compared; a UMLS release over its previous one on disk, only the rows that changed (``umls_scope``);
    otherwise the whole release is regenerated and compared with the whole graph."""
    fallback = ""
    if previous is not None and supports_rows(loader, path, options):
        old, fallback = previous_file(previous, path, options, options_record(options), loader)
        if old is not None:
            triples, scope = row_difference(loader, old, path, options, report)
            if triples is not None:
                return ReleaseDiff.of(compress(graph), str(path), triples, examples, method=str(scope))
            fallback = scope.detail
    if hasattr(loader, "scoped_rows"):  # UMLS: the changed rows (``umls_scope``)
        from mirage_kg.releases.umls_scope import umls_difference

        try:
            triples, method = umls_difference(store, graph, loader, path, options, report, previous)
            return ReleaseDiff.of(compress(graph), str(path), triples, examples, method=method)
        except RowsNeedWholeRelease as exc:
            fallback = str(exc)
    scope_of = getattr(loader, "update_scope", None)
    subjects = scope_of(path, options, report) if scope_of is not None else None
    with tempfile.TemporaryDirectory(prefix="mirage-kg-diff-") as workdir:
        dump = GraphDump(store, graph, workdir) if subjects is None else None
        try:
            new = release_lines(loader, path, options, report, graph, store, workdir)
        finally:
            if dump is not None:
                dump.wait()
        old_lines = subject_lines(store, graph, sorted(subjects | {graph}), workdir) if subjects is not None else \
            graph_lines(store, graph, workdir=workdir, dump=dump)
        triples = triple_difference(old_lines, new.lines, graph_contains(store, graph))
    if subjects is not None:
        method = f"the {len(subjects):,} concepts the Delta touches"
    else:
        method = "whole release regenerated and compared with the graph" + (f" ({fallback})" if fallback else "")
    return ReleaseDiff.of(compress(graph), str(path), triples, examples, method=method)


def subject_lines(store: Store, graph: str, subjects: list[str], workdir: str | Path | None = None) -> SortedLines:
    """The triples of ``graph`` about ``subjects`` (index lookups), as sorted lines."""
    lines = SortedLines(workdir)
    for subject in subjects:
        for line in store.triple_lines(graph, subject):
            lines.add_line(line)
    return lines


def update_release(store: Store, path: Path, loader: Loader, options: LoadOptions, report: LoadReport,
                   examples: int = 10) -> UpdateResult:
    """Bring the graph holding this source's previous release to the release at ``path``, atomically."""
    with hashes_remembered():  # a file the difference read whole is not read again for the release record
        return _update_release(store, path, loader, options, report, examples)


def _update_release(store: Store, path: Path, loader: Loader, options: LoadOptions, report: LoadReport,
                    examples: int) -> UpdateResult:
    graph = target_graph(store, loader, options.graph)
    previous = releases(store).get(graph)
    if previous is not None and loader.name == "snomed":
        options.extra.setdefault("snomed_base", delta_base(previous))
    if previous is not None and previous.source != loader.name and not options.extra.get("force"):
        raise InputError(f"graph {compress(graph)} holds a {previous.source} release ({previous.citation()}), and "
                         f"this is a {loader.name} source: an update replaces a release with another of the same "
                         "source; give --force to replace it anyway", path)
    diff = diff_release(store, graph, loader, path, options, report, examples, previous)
    if not options.extra.get("force"):
        check_shared(store, graph, diff, path, previous)
    history = (*previous.history, previous.release) if previous is not None else ()
    recorded = options_record(options)
    if loader.name == "snomed" and options.extra.get("snomed_delta_applied"):
        recorded["snomed_base_chain"] = [*options.extra["snomed_base"], str(path)]
    for private in ("snomed_base", "snomed_delta_applied", "snomed_only"):
        recorded.pop(private, None)
    options.extra.pop("snomed_only", None)  # the next path of the same command is scoped afresh
    info = new_release_info(loader.name, path, graph, recorded, history)
    before = store_fingerprint(store) if _may_hold_label_index(store) else None
    was = previous.citation() if previous is not None else "its previous content"
    try:
        apply_difference(store, graph, diff, info)
    except UpdateInterrupted as exc:
        raise UpdateInterrupted(f"interrupted: the update of {compress(graph)} was stopped before it committed; "
                                f"the graph still holds {was} (nothing was applied)", exc.applied,
                                exc.abandoned) from None
    except KeyboardInterrupt:
        if store.knows_commit_on_interrupt:  # its update commits or not as the update returns (``update_atomically``)
            raise UpdateInterrupted(f"interrupted past the commit point: the update was applied, {compress(graph)} "
                                    f"now holds {info.citation()}", True) from None
        raise UpdateInterrupted(f"interrupted while {store.location} applied the update of {compress(graph)}: it "
                                f"may have committed it or not; `mirage-kg stats` shows which release the graph "
                                "holds (the update is one request: never half of it)", None) from None
    try:
        subjects = {t.subject.value for t in (*diff.triples.removed, *diff.triples.added)
                    if isinstance(t.subject, ox.NamedNode)}
        return UpdateResult(graph, diff, info, carry_label_index(store, before, subjects) if before else None)
    except KeyboardInterrupt:
        raise UpdateInterrupted(f"interrupted past the commit point: the update was applied, {compress(graph)} now "
                                f"holds {info.citation()}", True) from None


def check_shared(store: Store, graph: str, diff: ReleaseDiff, path: Path, previous: ReleaseInfo | None) -> None:
    """Refuse a new release that shares almost nothing with the graph it would replace (less than
    ``MIN_SHARED`` of its triples), or that names another ontology: an unrelated file given by mistake."""
    before = store.triple_count(graph)
    kept = before - len(diff.triples.removed)
    if before >= MIN_JUDGED_TRIPLES and kept < MIN_SHARED * before:
        raise InputError(f"this release shares {kept:,} of the {before:,} triples of {compress(graph)} "
                         f"({100 * kept / before:.1f}%; it would remove {len(diff.triples.removed):,} and add "
                         f"{len(diff.triples.added):,}): it does not look like a new release of the same source. "
                         "Check the file; give --force to apply it anyway", path)
    old_name = (previous.details.get("ontology") if previous is not None else None) or None
    if old_name is not None and previous is not None:
        from mirage_kg.releases.provenance import describe_release

        new_name = describe_release(previous.source, path)[1].get("ontology")
        if new_name and new_name != old_name:
            raise InputError(f"{compress(graph)} holds the ontology {old_name!r} and this file is {new_name!r}: "
                             "give --force to replace one with the other", path)


def _may_hold_label_index(store: Store) -> bool:
    """Whether a label index may be cached for the store (an endpoint's or a memory store's fingerprint counts
    every quad: seconds at millions): False only for an on-disk store whose own cache folder holds none."""
    if store.path is None:
        return True
    folder = store.path / ".mirage-cache"  # ``caching.cache_folder``'s choice for an on-disk store
    if folder.is_dir():
        # not writable: the cache is under the user's cache folder, by fingerprint
        return not os.access(folder, os.W_OK) or any(folder.glob("labels-*.sqlite"))  # ``label_index_file``
    return not os.access(store.path, os.W_OK)  # writable: the cache folder would be made here, so none yet


def carry_label_index(store: Store, before: str, changed: set[str]) -> int | None:
    """The linker's label index of the store as it was (fingerprint ``before``), copied to the updated store's
    fingerprint with only the ``changed`` entities re-read (``LabelIndex.update``) instead of rebuilt by a scan;
    the number of label rows written, or None when there was no index to carry or it could not be (then the
    index step builds one, as after any load)."""
    import shutil
    import sqlite3

    from mirage_kg.index.caching import cache_folder
    from mirage_kg.graph.core import Graph
    from mirage_kg.linking.label_index import LabelIndex, label_index_file

    try:
        old = label_index_file(cache_folder(store, before), before)
        if not old.is_file():
            return None
        after = store_fingerprint(store)
        new = label_index_file(cache_folder(store, after), after)
        partial = new.with_name(f".{new.name}.{os.getpid()}.tmp")
        try:
            shutil.copyfile(old, partial)
            written = LabelIndex.open(partial).update(Graph(store), sorted(changed))
            os.replace(partial, new)
        finally:
            partial.unlink(missing_ok=True)
    except (OSError, sqlite3.Error, ValueError):
        return None  # a cache: the index step rebuilds it
    if old != new:
        old.unlink(missing_ok=True)
    return written


def apply_difference(store: Store, graph: str, diff: ReleaseDiff, info: ReleaseInfo) -> None:
    """The removed and added triples, the release record and the load record, as one SPARQL update."""
    target = iri_ref(graph)
    operations = []
    for verb, triples in (("DELETE", diff.triples.removed), ("INSERT", diff.triples.added)):
        for start in range(0, len(triples), _BLOCK):
            body = " .\n".join(str(t) for t in triples[start:start + _BLOCK])
            operations.append(f"{verb} DATA {{ GRAPH {target} {{\n{body} .\n}} }}")
    manifest = iri_ref(MANIFEST_GRAPH)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    operations.append(f"DELETE WHERE {{ GRAPH {manifest} {{ {target} {iri_ref(LOADED_FROM)} ?from }} }}")
    operations.append(f"DELETE WHERE {{ GRAPH {manifest} {{ {target} {iri_ref(LOADED_AT)} ?at }} }}")
    operations.append(f"INSERT DATA {{ GRAPH {manifest} {{ {target} {iri_ref(LOADED_FROM)} {literal(info.path)} ; "
                      f"{iri_ref(LOADED_AT)} {literal(now, datatype=XSD + 'dateTime')} }} }}")
    operations.append(release_record_update(info))
    atomically = getattr(store, "update_atomically", None)
    (atomically or store.update)(" ;\n".join(operations))
