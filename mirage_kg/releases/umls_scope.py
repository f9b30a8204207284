"""``load --update`` of a UMLS release over the previous one, when that one's RRF files are still where they were
loaded from, unchanged: the rows that differ between the two releases (line digests, as ``line_scope``) name the
CUIs whose triples may change; only the rows naming those CUIs are parsed (picked at byte level) and the triples
about them, as subject or as the object of an edge, are compared with the graph's.

Why per CUI and not per row: a CUI's MRCONSO rows together choose its prefLabel, and whether a concept is kept
(by --sab, --lang, suppression) decides the edges of every MRREL row naming it. A triple naming no changed CUI
comes from unchanged rows of unchanged concepts, so it stays. A relation or semantic type is declared while some
edge or concept uses it: those declarations follow the uses added and removed. Whatever would make this view
wrong (other options, edited files, MRDOC's inverses changed, most rows changed) sends the update to the
whole-release compare, and says why."""

from __future__ import annotations

from pathlib import Path

import pyoxigraph as ox

from mirage_kg.loaders.base import LoadOptions, LoadReport, Problem, RowsNeedWholeRelease
from mirage_kg.loaders.umls import locate_release, read_inverses
from mirage_kg.namespaces import MKG, OWL, RDF, prefixes
from mirage_kg.releases.diff import TripleDifference, parse_lines, pattern_lines, triple_difference
from mirage_kg.releases.line_scope import MAX_CHANGED_IN_MEMORY, MAX_CHANGED_SHARE, row_changes
from mirage_kg.releases.provenance import ReleaseInfo, file_hashes, options_record
from mirage_kg.store.base import Store

#: the RRF files whose rows name CUIs, and the columns that do (MRREL: CUI1 and CUI2)
CUI_COLUMNS = {"MRCONSO.RRF": (0,), "MRSTY.RRF": (0,), "MRREL.RRF": (0, 4)}
_TYPE, _CONCEPT, _RELATION, _CLASS = RDF + "type", MKG + "Concept", MKG + "Relation", OWL + "Class"


def changed_cuis(previous: ReleaseInfo | None, path: Path, options: LoadOptions) -> tuple[set[bytes], str]:
    """The CUIs named by a row that differs between the previous release's files and those under ``path``, and
    how many rows that is; ``RowsNeedWholeRelease`` (why) when the per-CUI view cannot stand for the graph's."""
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
    for file in old_files.values():
        relative = str(file.relative_to(old_root))
        if previous.files.get(relative) != file_hashes(file)[file.name]:
            raise RowsNeedWholeRelease(f"the previous release's {relative} changed since it was loaded (SHA-256)")
    quiet = Problem(LoadOptions(lenient=True), LoadReport())
    if "MRDOC.RRF" in old_files and read_inverses(old_files, quiet) != read_inverses(new_files, quiet):
        raise RowsNeedWholeRelease("MRDOC's relation inverses changed (every edge's direction may)")
    cuis: set[bytes] = set()
    changed = lines = 0
    for name, columns in CUI_COLUMNS.items():
        if name not in new_files:
            continue
        changes = row_changes(old_files[name], new_files[name])
        for _, raw in (*changes.removed, *changes.added):
            fields = raw.split(b"|")
            cuis.update(fields[column] for column in columns if column < len(fields))
        changed += len(changes.removed) + len(changes.added)
        lines += changes.lines
        if changed > max(MAX_CHANGED_SHARE * lines, MAX_CHANGED_IN_MEMORY):
            raise RowsNeedWholeRelease(f"more than {changed:,} rows of {name} and the files before it changed")
    return cuis, f"{changed:,} of {lines:,} rows changed"


def umls_difference(store: Store, graph: str, loader: object, path: Path, options: LoadOptions, report: LoadReport,
                    previous: ReleaseInfo | None) -> tuple[TripleDifference, str]:
    """The triples removed and added from the graph to the release at ``path``, from the changed CUIs' rows only;
    and how the difference was found (for the ``compared:`` line)."""
    cuis, rows = changed_cuis(previous, path, options)
    ns = prefixes()["UMLS"]
    cui_prefix = f"<{ns}"

    def kept_outside(outside: list[str]) -> set[str]:  # a concept the graph holds is one the previous load kept
        return {cui for cui in outside if _has(store, graph, ns + cui, _TYPE, _CONCEPT)}

    new_lines: set[str] = set()
    declared: dict[str, set[str]] = {}  # relation or semantic type -> its declaration, as the new release makes it
    graph_ref = f"<{graph}>"
    for chunk in loader.scoped_lines(locate_release(path), options, report, graph, cuis, kept_outside):  # type: ignore[attr-defined]
        for line in chunk.split("\n")[:-1]:
            subject = line[:line.index(" ")]
            if subject.startswith(cui_prefix) or subject == graph_ref:
                new_lines.add(line)
            else:
                declared.setdefault(subject[1:-1], set()).add(line)
    old_lines: set[str] = set()
    for cui in cuis:
        iri = ns + cui.decode("utf-8", "replace")
        old_lines.update(pattern_lines(store, graph, iri))
        old_lines.update(pattern_lines(store, graph, obj=iri))  # edges into it
    old_lines.update(pattern_lines(store, graph, graph))
    facts = triple_difference(sorted(old_lines), sorted(new_lines))
    declarations = _declarations(store, graph, facts, declared)
    difference = TripleDifference(removed=facts.removed + declarations.removed, added=facts.added + declarations.added)
    return difference, f"the {len(cuis):,} concepts whose rows changed ({rows}; only the rows naming them parsed)"


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
        old = set(pattern_lines(store, graph, thing))
        new = declared.get(thing)
        if new is not None and old and new != old:
            removed_lines.extend(old - new)
            added_lines.extend(new - old)
        elif new is not None and not old:
            added_lines.extend(new)
    for thing in sorted(unused - used):
        if not _has(store, graph, thing, _TYPE, _RELATION) and not _has(store, graph, thing, _TYPE, _CLASS):
            continue
        uses = pattern_lines(store, graph, obj=thing) if _has(store, graph, thing, _TYPE, _CLASS) else \
            pattern_lines(store, graph, predicate=thing)
        if all(_triple(line) in removed_facts for line in uses):
            removed_lines.extend(pattern_lines(store, graph, thing))
    return TripleDifference(removed=parse_lines(sorted(set(removed_lines))), added=parse_lines(sorted(set(added_lines))))


def _declaring(triple: ox.Triple) -> str:
    """The IRI a triple uses that a declaration names: a semantic type (``a STY:T047``), else its predicate."""
    if triple.predicate.value == _TYPE and isinstance(triple.object, ox.NamedNode):
        return triple.object.value
    return triple.predicate.value


def _has(store: Store, graph: str, subject: str, predicate: str, obj: str) -> bool:
    return next(pattern_lines(store, graph, subject, predicate, obj), None) is not None


def _triple(line: str) -> ox.Triple:
    (triple,) = parse_lines([line])
    return triple

