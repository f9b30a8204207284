"""``load --update`` of a UMLS release over the previous one, when that one's RRF files are still where they were
loaded from, unchanged: the rows that differ between the two releases (line digests, as ``line_scope``) are what
the update costs, not the concepts they touch.

- A changed MRCONSO or MRSTY row names a concept whose labels, codes or semantic types may change: that concept's
  rows of both files are parsed (its atoms together choose its prefLabel) and its own triples, edges aside,
  compared with the graph's.
- A changed MRREL row goes on its own: a removed row's edge goes unless another row still makes it (an edge and its
  mirror row land on one triple, so only the rows naming both ends are read, by CUI on the raw bytes); an added
  row's edge comes unless the graph holds it already. Its ends keep the status the graph gives them.
- A concept that comes, goes or is no longer kept (by --sab, --lang, suppression) takes every edge of the MRREL
  rows naming it with it: those rows are parsed and its edges, either way, compared with the graph's.

A relation or semantic type is declared while some edge or concept uses it: those declarations follow the uses
added and removed. Whatever would make this view wrong (other options, edited files, MRDOC's inverses changed,
most rows changed) sends the update to the whole-release compare, and says why."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyoxigraph as ox

from mirage_kg.loaders.base import LoadOptions, LoadReport, Problem, RowsNeedWholeRelease
from mirage_kg.loaders.nt_terms import ALT, PREF, TYPE
from mirage_kg.loaders.umls import UmlsRows, locate_release, read_inverses
from mirage_kg.model.namespaces import MKG, OWL, RDF, SKOS, SKOS_NOTATION, prefixes
from mirage_kg.releases.diff import TripleDifference, parse_lines, triple_difference
from mirage_kg.releases.line_scope import (
    MAX_CHANGED_IN_MEMORY,
    MAX_CHANGED_SHARE,
    RowChanges,
    line_digests,
    row_changes,
)
from mirage_kg.releases.provenance import ReleaseInfo, file_hashes, options_record
from mirage_kg.store.base import Store
from mirage_kg.model.terms import iri_ref

#: the RRF files whose rows name CUIs, and the columns that do (MRREL: CUI1 and CUI2)
CUI_COLUMNS = {"MRCONSO.RRF": (0,), "MRSTY.RRF": (0,), "MRREL.RRF": (0, 4)}
_TYPE, _CONCEPT, _RELATION, _CLASS = RDF + "type", MKG + "Concept", MKG + "Relation", OWL + "Class"
#: the predicates of a concept's own triples (MRCONSO and MRSTY make them); any other one is an MRREL edge
_OWN_PREDICATES = frozenset({TYPE, PREF, ALT, iri_ref(SKOS + "exactMatch"), iri_ref(SKOS_NOTATION)})


@dataclass(frozen=True)
class ReleaseChanges:
    """The rows that differ between the previous release's RRF files and the new release's."""

    old_files: dict[str, Path]
    new_files: dict[str, Path]
    rows: dict[str, RowChanges]  #: by file name; a file whose bytes did not change has none
    summary: str  #: ``N of M rows changed``


def release_changes(previous: ReleaseInfo | None, path: Path, options: LoadOptions) -> ReleaseChanges:
    """The changed rows of MRCONSO, MRSTY and MRREL; ``RowsNeedWholeRelease`` (why) when the previous release's
    files cannot stand for the graph (moved, edited, other options, other files, other inverses, most rows)."""
    if previous is None:
        raise RowsNeedWholeRelease("the graph has no release record")
    old_root = Path(previous.path)
    if not old_root.is_dir():
        raise RowsNeedWholeRelease(f"the previous release's folder {old_root} is not there any more")
    if previous.options != options_record(options):
        raise RowsNeedWholeRelease("the previous release was loaded with other options")
    old_files, new_files = locate_release(old_root), locate_release(path)
    if set(old_files) != set(new_files):
        raise RowsNeedWholeRelease(f"the releases hold different RRF files ({', '.join(sorted(old_files))} and "
                                   f"{', '.join(sorted(new_files))})")
    recorded = {name: previous.files.get(str(file.relative_to(old_root)), "") for name, file in old_files.items()}

    def check(name: str, sha256: str) -> None:
        if sha256 != recorded[name]:
            relative = old_files[name].relative_to(old_root)
            raise RowsNeedWholeRelease(f"the previous release's {relative} changed since it was loaded (SHA-256)")

    for name, file in old_files.items():
        if name not in CUI_COLUMNS:  # the diffed files are checked as they are read (one read each)
            check(name, file_hashes(file)[file.name])
    quiet = Problem(LoadOptions(lenient=True), LoadReport())
    if "MRDOC.RRF" in old_files and read_inverses(old_files, quiet) != read_inverses(new_files, quiet):
        raise RowsNeedWholeRelease("MRDOC's relation inverses changed (every edge's direction may)")
    rows: dict[str, RowChanges] = {}
    changed = lines = 0
    for name in CUI_COLUMNS:
        if name not in new_files:
            continue
        new = line_digests(new_files[name])  # its SHA-256 goes to the new release record
        if new.sha256 == recorded[name]:  # the same bytes as the previous file: no row changed
            check(name, file_hashes(old_files[name])[name])
            lines += len(new.digests)
            continue
        old = line_digests(old_files[name])
        check(name, old.sha256)
        rows[name] = row_changes(old, new)
        changed += len(rows[name].removed) + len(rows[name].added)
        lines += rows[name].lines
        if changed > max(MAX_CHANGED_SHARE * lines, MAX_CHANGED_IN_MEMORY):
            raise RowsNeedWholeRelease(f"more than {changed:,} rows of {name} and the files before it changed")
    return ReleaseChanges(old_files, new_files, rows, f"{changed:,} of {lines:,} rows changed")


class _Graph:
    """What the update asks the graph: whether it holds a concept (memoised: an end named by many changed rows),
    an edge, and a concept's own triples or edges, as N-Triples lines."""

    def __init__(self, store: Store, graph: str) -> None:
        self.store, self.graph = store, graph
        self.namespace = prefixes()["UMLS"]
        self._held: dict[str, bool] = {}

    def holds_concept(self, cui: str) -> bool:
        held = self._held.get(cui)
        if held is None:
            self.resolve((cui,))
            held = self._held[cui]
        return held

    def resolve(self, cuis: Iterable[str]) -> None:
        """Look up, once each and in one sorted batch, whether the graph holds these concepts (``Store.holds``: a
        point lookup of the quad on the embedded store)."""
        holds, namespace, graph, held = self.store.holds, self.namespace, self.graph, self._held
        for cui in sorted(set(cuis).difference(held)):
            held[cui] = holds(namespace + cui, _TYPE, _CONCEPT, graph)

    def holds_edge(self, line: str) -> bool:
        subject, predicate, obj = line[1:-3].split("> <")  # ``<s> <p> <o> .``: an edge names three IRIs
        return self.store.holds(subject, predicate, obj, self.graph)

    def lines(self, cui: str, *, own_only: bool) -> Iterator[str]:
        """The concept's triples as subject (``own_only``: its labels, codes and types, no edge) and, without
        ``own_only``, the edges into it as well."""
        iri = self.namespace + cui
        for line in self.store.triple_lines(self.graph, iri):
            if not own_only or line.split(" ", 2)[1] in _OWN_PREDICATES:  # ``<s> <p> ...``: IRIs hold no space
                yield line
        if not own_only:
            yield from self.store.triple_lines(self.graph, obj=iri)


class ScopedRows(Protocol):
    """A loader whose passes run over the rows an update hands it (the UMLS loader)."""

    def scoped_rows(self, files: dict[str, Path], options: LoadOptions, report: LoadReport) -> UmlsRows: ...


def umls_difference(store: Store, graph: str, loader: ScopedRows, path: Path, options: LoadOptions, report: LoadReport,
                    previous: ReleaseInfo | None) -> tuple[TripleDifference, str]:
    """The triples removed and added from the graph to the release at ``path``, from the changed rows only; and
    how the difference was found (for the ``compared:`` line)."""
    changes = release_changes(previous, path, options)
    rows = loader.scoped_rows(changes.new_files, options, report)
    held = _Graph(store, graph)
    quiet = Problem(LoadOptions(lenient=True), LoadReport())  # the previous release's rows: read by its load already
    relation_changes = changes.rows.get("MRREL.RRF")
    old_relations = changes.old_files.get("MRREL.RRF")
    removed_rows = rows.lines(old_relations, relation_changes.removed, quiet) \
        if relation_changes and old_relations is not None else []
    added_rows = rows.lines(changes.new_files["MRREL.RRF"], relation_changes.added) if relation_changes else []

    named, concepts = _changed_concepts(changes, held, added_rows, removed_rows)
    compared = _Lines(graph)
    if concepts:
        pick = [(0, named)]
        compared.take(rows.concept_lines(rows.picked("MRCONSO.RRF", pick)))
        if "MRSTY.RRF" in changes.new_files:
            compared.take(rows.type_lines(rows.picked("MRSTY.RRF", pick)))
    compared.take(rows.source_lines(graph))
    # a concept that came, went or is kept no longer (or never was in MRCONSO): every edge naming it may change
    restated = {cui for cui in concepts if rows.kept(cui) != held.holds_concept(cui) or not rows.seen(cui)}
    _mark_ends(rows, held, concepts, removed_rows)
    _mark_ends(rows, held, concepts, added_rows)
    before = _edges(rows.edge_lines(_naming_none(restated, removed_rows), path=old_relations, quiet=True))
    after = _Lines(graph)
    after.take(rows.edge_lines(_naming_none(restated, added_rows)))
    compared.declared.update(after.declared)
    gone = before - after.lines
    still = _still_made(rows, changes, held, concepts, restated, gone, compared)

    old_lines = set(store.triple_lines(graph, graph))
    for cui in concepts:
        old_lines.update(held.lines(cui, own_only=cui not in restated))
    facts = triple_difference(sorted(old_lines), sorted(compared.lines))
    edges_added = sorted(line for line in after.lines - before if not held.holds_edge(line))
    facts = TripleDifference(removed=facts.removed + parse_lines(sorted(gone - still)),
                             added=facts.added + parse_lines(edges_added))
    declarations = _declarations(store, graph, facts, compared.declared)
    difference = TripleDifference(removed=facts.removed + declarations.removed, added=facts.added + declarations.added)
    return difference, (f"the rows that changed ({changes.summary}; the {len(concepts):,} concepts of changed "
                        f"MRCONSO/MRSTY rows re-read, {len(removed_rows) + len(added_rows):,} MRREL rows applied "
                        f"one by one, {len(restated):,} concepts kept or dropped re-read with their edges)")


def _changed_concepts(changes: ReleaseChanges, held: _Graph, added_rows: list[tuple[int, str]],
                      removed_rows: list[tuple[int, str]]) -> tuple[set[bytes], set[str]]:
    """The concepts to re-read, as picked bytes and as CUIs: those whose own rows (MRCONSO, MRSTY) changed, and the
    ends of added edges the graph lacks (do their rows exist?)."""
    named = {raw.split(b"|", 1)[0] for name in ("MRCONSO.RRF", "MRSTY.RRF") if name in changes.rows
             for _, raw in (*changes.rows[name].removed, *changes.rows[name].added)}  # picked as the bytes were
    concepts = {cui.decode("utf-8", "replace") for cui in named}
    # every concept the row checks ask about, looked up in one batch
    held.resolve(chain(concepts, _ends_of(added_rows), _ends_of(removed_rows)))
    for cui in _ends_of(added_rows):
        if cui not in concepts and not held.holds_concept(cui):
            concepts.add(cui)
            named.add(cui.encode())
    return named, concepts


def _mark_ends(rows: UmlsRows, held: _Graph, concepts: set[str], lines: list[tuple[int, str]]) -> None:
    """Tell the scoped pass whether the graph keeps each end of these rows that is not re-read."""
    for cui in _ends_of(lines):
        if cui not in concepts:
            rows.mark(cui, held.holds_concept(cui))


def _naming_none(restated: set[str], lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The rows naming no restated concept (those are re-read whole)."""
    return [line for line in lines if restated.isdisjoint(_ends(line[1]))] if restated else lines


def _still_made(rows: UmlsRows, changes: ReleaseChanges, held: _Graph, concepts: set[str], restated: set[str],
                gone: set[str], compared: _Lines) -> set[str]:
    """One pass over the new MRREL: every row naming a restated concept (its edges go to ``compared``), and the
    rows that may still make a ``gone`` edge; returns the gone edges that another row still makes."""
    pairs: set[tuple[bytes, bytes]] = set()
    cut = len(held.namespace)
    for line in gone:
        subject, _, obj = line[1:-3].split("> <")
        a, b = subject[cut:].encode(), obj[cut:].encode()
        pairs.update(((a, b), (b, a)))
    if "MRREL.RRF" not in changes.new_files or not (restated or pairs):
        return set()
    named_restated = {cui.encode() for cui in restated}

    def wanted(raw: bytes) -> bool:  # on the raw bytes: the rows a byte pick lets through, most not wanted
        fields = raw.split(b"|", 5)
        return len(fields) > 5 and ((fields[0], fields[4]) in pairs or fields[0] in named_restated or
                                    fields[4] in named_restated)

    picked = rows.picked_lines("MRREL.RRF", [(0, named_restated | {a for a, _ in pairs}), (4, named_restated)],
                               wanted)
    mine = _naming_none(restated, picked)
    if restated:
        theirs = [line for line in picked if not restated.isdisjoint(_ends(line[1]))]
        _mark_ends(rows, held, concepts, theirs)
        compared.take(rows.edge_lines(theirs))
    return _edges(rows.edge_lines(mine, quiet=True)) & gone


class _Lines:
    """Lines a scoped pass wrote: about a concept or the graph itself (compared with the graph's), or declaring a
    relation or semantic type (followed through ``_declarations``)."""

    def __init__(self, graph: str) -> None:
        self.graph_ref = f"<{graph}>"
        self.cui_prefix = f"<{prefixes()['UMLS']}"
        self.lines: set[str] = set()
        self.declared: dict[str, set[str]] = {}

    def take(self, chunks: Iterable[str]) -> None:
        for chunk in chunks:
            for line in chunk.split("\n")[:-1]:
                subject = line[:line.index(" ")]
                if subject.startswith(self.cui_prefix) or subject == self.graph_ref:
                    self.lines.add(line)
                else:
                    self.declared.setdefault(subject[1:-1], set()).add(line)


def _ends(text: str) -> tuple[str, str]:
    """An MRREL line's CUI1 and CUI2 (empty for a line too short: its reader reports it)."""
    fields = text.split("|", 5)
    return (fields[0], fields[4]) if len(fields) > 5 else ("", "")


def _ends_of(lines: list[tuple[int, str]]) -> Iterator[str]:
    for _, text in lines:
        yield from (cui for cui in _ends(text) if cui)


def _edges(chunks: Iterable[str]) -> set[str]:
    """The edge lines of ``edge_lines`` chunks (a first use's declarations left out)."""
    cui_prefix = f"<{prefixes()['UMLS']}"
    return {line for chunk in chunks for line in chunk.split("\n")[:-1] if line.startswith(cui_prefix)}


def _declarations(store: Store, graph: str, facts: TripleDifference, declared: dict[str, set[str]]) -> TripleDifference:
    """Declarations to add (a relation or semantic type the graph lacks, now used) and remove (one no longer used
    by any edge or concept once ``facts`` apply), or to replace when the new release words them otherwise."""
    removed_facts = set(facts.removed)
    used: set[str] = set()
    unused: set[str] = set()
    for triple in facts.added:
        used.add(_declaring(triple))
    for triple in facts.removed:
        unused.add(_declaring(triple))
    added_lines: list[str] = []
    removed_lines: list[str] = []
    for thing in sorted(used | set(declared)):
        old = set(store.triple_lines(graph, thing))
        new = declared.get(thing)
        if new is not None and old and new != old:
            removed_lines.extend(old - new)
            added_lines.extend(new - old)
        elif new is not None and not old:
            added_lines.extend(new)
    for thing in sorted(unused - used):
        if not store.holds(thing, _TYPE, _RELATION, graph) and not store.holds(thing, _TYPE, _CLASS, graph):
            continue
        uses = store.triple_lines(graph, obj=thing) if store.holds(thing, _TYPE, _CLASS, graph) else \
            store.triple_lines(graph, predicate=thing)
        if all(_triple(line) in removed_facts for line in uses):
            removed_lines.extend(store.triple_lines(graph, thing))
    return TripleDifference(removed=parse_lines(sorted(set(removed_lines))), added=parse_lines(sorted(set(added_lines))))


def _declaring(triple: ox.Triple) -> str:
    """The IRI a triple uses that a declaration names: a semantic type (``a STY:T047``), else its predicate."""
    if triple.predicate.value == _TYPE and isinstance(triple.object, ox.NamedNode):
        return triple.object.value
    return triple.predicate.value


def _triple(line: str) -> ox.Triple:
    (triple,) = parse_lines([line])
    return triple
