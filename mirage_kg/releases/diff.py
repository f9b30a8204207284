"""The difference between two releases of a source: triples removed and added, and what they mean (concepts
added, retired and relabelled, facts by relation, synonyms), with examples; as JSON, text and HTML.

Each side is a stream of N-Triples lines in sorted order (``SortedLines``): a graph of a store, or a release on
disk run through its loader without touching any store. One merge pass finds the lines that differ; only those
are parsed, so two spellings of one triple (the loader's escapes, the store's) cancel out. Memory is one sorted run
per side plus the difference itself."""

from __future__ import annotations

import html
import io
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyoxigraph as ox

from mirage_kg.errors import StoreError
from mirage_kg.model.namespaces import MKG, MKG_CONCEPT, MKG_RELATION, OWL, RDF, RDF_TYPE, SKOS_ALT, SKOS_PREF, compress
from mirage_kg.releases.sorting import SortedLines, merge_difference
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.threads import in_daemon_thread

_SOURCE_VERSION = MKG + "sourceVersion"
_ACTIVE = MKG + "active"
_REIFICATION = {RDF + name for name in ("subject", "predicate", "object")}


# --- the two sides ------------------------------------------------------------------------------------------------
class GraphDump:
    """``Store.export_graph`` into a temporary file, in a thread of its own: the embedded store writes the graph
    in Rust (without the GIL) while Python generates the other side."""

    def __init__(self, store: Store, graph: str, workdir: str | Path | None = None) -> None:
        self.spool = tempfile.TemporaryFile(dir=workdir)
        self.future = in_daemon_thread(store.export_graph, self.spool, graph, name="mirage-kg-dump")

    def wait(self) -> None:
        """Until the dump ends, whether it failed or not (``result`` says which)."""
        wait([self.future])

    def result(self) -> IO[bytes]:
        """The dump, read from its start; what the export raised, raised here."""
        self.future.result()
        self.spool.seek(0)
        return self.spool


def graph_lines(store: Store, graph: str, *, rename_to: str | None = None,
                workdir: str | Path | None = None, dump: GraphDump | None = None) -> SortedLines:
    """The triples of ``graph`` as sorted N-Triples lines; ``rename_to`` rewrites the graph's own IRI (its
    ``MKG:sourceVersion`` triples) so that two graphs of one source compare; ``dump``: one already under way."""
    lines = SortedLines(workdir)
    old_ref, new_ref = iri_ref(graph) + " ", iri_ref(rename_to) + " " if rename_to else None
    dump = dump or GraphDump(store, graph, workdir)
    with dump.spool:
        add = lines.add_line
        for line in io.TextIOWrapper(dump.result(), encoding="utf-8", newline="\n"):
            if new_ref is not None and line.startswith(old_ref):
                line = new_ref + line[len(old_ref):]
            add(line[:-1])
    return lines


class CapturingStore(Store):
    """A store that turns a loader's ``load`` into sorted lines instead of a write; reads go to ``reads`` (the
    HPO annotation loader asks which concepts exist)."""

    def __init__(self, reads: Store | None, workdir: str | Path | None = None) -> None:
        self.location = "capture"
        self._reads = reads
        self.lines = SortedLines(workdir)
        self.graph: str | None = None
        self.source = ""

    def _reader(self) -> Store:
        if self._reads is None:
            raise StoreError("this loader reads the store it loads into; give the store the release goes into")
        return self._reads

    def select(self, query: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return self._reader().select(query, timeout=timeout)

    def ask(self, query: str, *, timeout: float | None = None) -> bool:
        return self._reader().ask(query, timeout=timeout)

    def construct(self, query: str, *, timeout: float | None = None) -> list[Any]:
        return self._reader().construct(query, timeout=timeout)

    def graphs(self) -> list[str]:
        return self._reader().graphs() if self._reads is not None else []

    def triple_count(self, graph: str | None = None) -> int:
        return 0

    def update(self, update: str) -> None:
        raise StoreError("a release being compared is never written")

    def _bulk_load(self, data: IO[bytes], media_type: str, graph: str, base_iri: str | None) -> None:
        raise StoreError("a release being compared is never written")

    def load(self, data: IO[bytes] | Iterable[str], *, media_type: str, graph: str, source: str = "",
             base_iri: str | None = None, progress: Callable[[int], None] | None = None) -> LoadReceipt:
        if self.graph is not None and graph != self.graph:
            raise StoreError(f"this release fills several graphs ({self.graph}, {graph}); compare them one by one")
        self.graph, self.source = graph, source
        if isinstance(data, (bytes, bytearray)) or hasattr(data, "read"):
            from mirage_kg.store.oxigraph_terms import OXIGRAPH_FORMATS

            for triple in ox.parse(data, format=OXIGRAPH_FORMATS[media_type], base_iri=base_iri):  # type: ignore[arg-type]  # bytes or a stream
                inner = triple.triple if isinstance(triple, ox.Quad) else triple
                self.lines.add(f"{inner} .\n")
        else:
            add = self.lines.add
            for text in data:
                add(text)
        return LoadReceipt(graph=graph, source=source, added=0)


# --- the difference -----------------------------------------------------------------------------------------------
@dataclass
class TripleDifference:
    """Triples only in the old side and only in the new side (parsed, canonical)."""

    removed: list[ox.Triple] = field(default_factory=list)
    added: list[ox.Triple] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.removed or self.added)


def parse_lines(lines: list[str]) -> list[ox.Triple]:
    """N-Triples lines (no newlines) as triples."""
    if not lines:
        return []
    return list(ox.parse("\n".join(lines).encode("utf-8") + b"\n", format=ox.RdfFormat.N_TRIPLES))


def triple_difference(old: Iterable[str], new: Iterable[str],
                      old_contains: Callable[[ox.Triple], bool] | None = None) -> TripleDifference:
    """The difference of two sorted distinct line streams, spelling differences cancelled; ``old_contains``
    (membership in the old graph) catches a new line that spells an old triple another way."""
    removed_lines: list[str] = []
    added_lines: list[str] = []
    for sign, line in merge_difference(old, new):
        (removed_lines if sign == "-" else added_lines).append(line)
    removed = parse_lines(removed_lines)
    added = parse_lines(added_lines)
    removed_set, added_set = set(removed), set(added)
    result = TripleDifference(
        removed=[t for t in removed if t not in added_set],
        added=[t for t in dict.fromkeys(added) if t not in removed_set and not (old_contains and old_contains(t))],
    )
    return result


# --- what the difference means ------------------------------------------------------------------------------------
def _show(node: object) -> str:
    if isinstance(node, ox.NamedNode):
        return compress(node.value)
    if isinstance(node, ox.Literal):
        return node.value
    return str(node)


@dataclass
class _Bucket:
    count: int = 0
    examples: list[Any] = field(default_factory=list)

    def add(self, example: Any, limit: int) -> None:
        self.count += 1
        if len(self.examples) < limit:
            self.examples.append(example)

    def add_made(self, make: Callable[[], Any], limit: int) -> None:
        """``add`` for an example that costs something to write (a compressed IRI): made only while wanted."""
        self.count += 1
        if len(self.examples) < limit:
            self.examples.append(make())

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "examples": self.examples}


@dataclass
class ReleaseDiff:
    """A release difference, read as changes a curator understands. ``triples`` keeps the raw difference for
    ``load --update`` to apply."""

    old: str
    new: str
    triples: TripleDifference
    examples: int = 10
    concepts_added: _Bucket = field(default_factory=_Bucket)
    concepts_retired: _Bucket = field(default_factory=_Bucket)
    relabelled: _Bucket = field(default_factory=_Bucket)
    synonyms_added: _Bucket = field(default_factory=_Bucket)
    synonyms_removed: _Bucket = field(default_factory=_Bucket)
    facts_added: dict[str, _Bucket] = field(default_factory=lambda: defaultdict(_Bucket))
    facts_removed: dict[str, _Bucket] = field(default_factory=lambda: defaultdict(_Bucket))
    other_added: Counter[str] = field(default_factory=Counter)
    other_removed: Counter[str] = field(default_factory=Counter)
    declared: dict[str, _Bucket] = field(default_factory=lambda: defaultdict(_Bucket))  # "relations added"...
    with_concepts: Counter[str] = field(default_factory=Counter)  # triples of added/retired concepts, by sign
    versions: dict[str, list[str]] = field(default_factory=dict)
    method: str = ""  #: how the difference was found (``load --update``: changed source rows, or the whole release)

    @classmethod
    def of(cls, old: str, new: str, triples: TripleDifference, examples: int = 10, method: str = "") -> ReleaseDiff:
        diff = cls(old, new, triples, examples, method=method)
        diff._classify()
        return diff

    def _classify(self) -> None:
        limit = self.examples
        concept = ox.NamedNode(MKG_CONCEPT)
        rdf_type, pref, alt = ox.NamedNode(RDF_TYPE), ox.NamedNode(SKOS_PREF), ox.NamedNode(SKOS_ALT)
        version, active = ox.NamedNode(_SOURCE_VERSION), ox.NamedNode(_ACTIVE)
        typed_removed = {t.subject for t in self.triples.removed if t.predicate == rdf_type and t.object == concept}
        typed_added = {t.subject for t in self.triples.added if t.predicate == rdf_type and t.object == concept}
        inactivated = {t.subject for t in self.triples.added if t.predicate == active and
                       isinstance(t.object, ox.Literal) and t.object.value == "false"}
        retired = (typed_removed - typed_added) | inactivated
        new = typed_added - typed_removed
        for node in sorted(new, key=str):
            self.concepts_added.add(_show(node), limit)
        for node in sorted(retired, key=str):
            self.concepts_retired.add(_show(node), limit)
        changed = retired | new
        # relations and classes (semantic types) that come or go with the concepts that use them
        for title, kind in (("relations", MKG_RELATION), ("classes", OWL + "Class")):
            node = ox.NamedNode(kind)
            gone = {t.subject for t in self.triples.removed if t.predicate == rdf_type and t.object == node}
            came = {t.subject for t in self.triples.added if t.predicate == rdf_type and t.object == node}
            for sign, subjects in (("added", came - gone), ("removed", gone - came)):
                for subject in sorted(subjects, key=str):
                    self.declared[f"{title} {sign}"].add(_show(subject), limit)
                changed |= subjects
        prefs: dict[tuple[object, str], list[str | None]] = {}
        self.versions = {"old": sorted(t.object.value for t in self.triples.removed
                                       if t.predicate == version and not isinstance(t.object, ox.Triple)),
                         "new": sorted(t.object.value for t in self.triples.added
                                       if t.predicate == version and not isinstance(t.object, ox.Triple))}
        shown: dict[object, str] = {}

        def curie(predicate: object) -> str:  # a relation's CURIE, written once (thousands of triples share it)
            text = shown.get(predicate)
            if text is None:
                text = shown[predicate] = _show(predicate)
            return text

        for sign, triples in (("-", self.triples.removed), ("+", self.triples.added)):
            for t in sorted(triples, key=str):
                if t.predicate == version:
                    continue
                if t.subject in changed or t.object in changed:
                    self.with_concepts[sign] += 1
                    continue
                if t.predicate == pref and isinstance(t.object, ox.Literal):
                    slot = prefs.setdefault((t.subject, t.object.language or ""), [None, None])
                    slot[0 if sign == "-" else 1] = t.object.value
                elif t.predicate == alt and isinstance(t.object, ox.Literal):
                    bucket = self.synonyms_removed if sign == "-" else self.synonyms_added
                    synonym = t.object
                    bucket.add_made(lambda: [_show(t.subject), synonym.value], limit)  # noqa: B023 (called now)
                elif isinstance(t.object, ox.NamedNode) and t.predicate != rdf_type and \
                        t.predicate.value not in _REIFICATION:
                    facts = self.facts_removed if sign == "-" else self.facts_added
                    facts[curie(t.predicate)].add_made(lambda: [_show(t.subject), _show(t.object)], limit)  # noqa: B023
                else:
                    (self.other_removed if sign == "-" else self.other_added)[curie(t.predicate)] += 1
        for (labelled, lang), (before, after) in sorted(prefs.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            if before is not None and after is not None:
                self.relabelled.add({"id": _show(labelled), "lang": lang, "old": before, "new": after}, limit)
            else:
                (self.other_removed if after is None else self.other_added)[compress(SKOS_PREF)] += 1

    @property
    def empty(self) -> bool:
        return not self.triples

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "versions": self.versions,
            **({"compared": self.method} if self.method else {}),
            "triples": {"removed": len(self.triples.removed), "added": len(self.triples.added)},
            "concepts": {"added": self.concepts_added.to_json(), "retired": self.concepts_retired.to_json(),
                         "relabelled": self.relabelled.to_json(),
                         **{k.replace(" ", "_"): v.to_json() for k, v in sorted(self.declared.items())},
                         "their_triples": {"removed": self.with_concepts["-"], "added": self.with_concepts["+"]}},
            "facts": {"added": {k: v.to_json() for k, v in sorted(self.facts_added.items())},
                      "removed": {k: v.to_json() for k, v in sorted(self.facts_removed.items())}},
            "synonyms": {"added": self.synonyms_added.to_json(), "removed": self.synonyms_removed.to_json()},
            "other": {"added": dict(sorted(self.other_added.items())),
                      "removed": dict(sorted(self.other_removed.items()))},
        }

    # --- rendering ------------------------------------------------------------------------------------------
    def lines(self) -> Iterator[str]:
        """The diff as readable text, one change kind a line with its first examples."""
        yield f"diff {self.old} -> {self.new}"
        if self.versions["old"] or self.versions["new"]:
            yield f"  release: {', '.join(self.versions['old']) or '-'} -> {', '.join(self.versions['new']) or '-'}"
        yield f"  triples: -{len(self.triples.removed):,} +{len(self.triples.added):,}"
        if self.method:
            yield f"  compared: {self.method}"
        if self.empty:
            yield "  no changes"
            return
        for title, bucket in (("concepts added", self.concepts_added), ("concepts retired", self.concepts_retired)):
            if bucket.count:
                yield f"  {title}: {bucket.count:,} (e.g. {', '.join(bucket.examples)})"
        for title, bucket in sorted(self.declared.items()):
            yield f"  {title}: {bucket.count:,} (e.g. {', '.join(bucket.examples)})"
        if self.with_concepts:
            yield (f"    their own triples: -{self.with_concepts['-']:,} +{self.with_concepts['+']:,}")
        if self.relabelled.count:
            shown = "; ".join(f"{e['id']} {e['old']!r} -> {e['new']!r}" for e in self.relabelled.examples)
            yield f"  relabelled: {self.relabelled.count:,} ({shown})"
        for sign, facts in (("+", self.facts_added), ("-", self.facts_removed)):
            for relation, bucket in sorted(facts.items()):
                shown = "; ".join(f"{s} -> {o}" for s, o in bucket.examples[:3])
                yield f"  facts {sign} {relation}: {bucket.count:,} ({shown})"
        for sign, bucket in (("+", self.synonyms_added), ("-", self.synonyms_removed)):
            if bucket.count:
                shown = "; ".join(f"{s} {text!r}" for s, text in bucket.examples[:3])
                yield f"  synonyms {sign}: {bucket.count:,} ({shown})"
        for sign, counts in (("+", self.other_added), ("-", self.other_removed)):
            if counts:
                yield f"  other {sign}: " + ", ".join(f"{p} {n:,}" for p, n in sorted(counts.items()))

    def html(self) -> str:
        """A standalone HTML page of the diff (the JSON's content, as tables)."""
        data = self.to_json()
        esc = html.escape
        parts = [f"<!doctype html><meta charset='utf-8'><title>diff {esc(self.old)} -> {esc(self.new)}</title>",
                 "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
                 "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}</style>",
                 f"<h1>{esc(self.old)} &rarr; {esc(self.new)}</h1>",
                 f"<p>release {esc(', '.join(self.versions['old']) or '-')} &rarr; "
                 f"{esc(', '.join(self.versions['new']) or '-')}; triples removed {data['triples']['removed']:,}, "
                 f"added {data['triples']['added']:,}</p>"]

        def table(title: str, header: list[str], rows: list[list[Any]], count: int) -> None:
            if not count:
                return
            parts.append(f"<h2>{esc(title)} ({count:,})</h2><table><tr>"
                         + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
            for row in rows:
                parts.append("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
            parts.append("</table>")

        table("Concepts added", ["id"], [[e] for e in self.concepts_added.examples], self.concepts_added.count)
        table("Concepts retired", ["id"], [[e] for e in self.concepts_retired.examples], self.concepts_retired.count)
        for title, bucket in sorted(self.declared.items()):
            table(title.capitalize(), ["id"], [[e] for e in bucket.examples], bucket.count)
        table("Relabelled", ["id", "lang", "old", "new"],
              [[e["id"], e["lang"], e["old"], e["new"]] for e in self.relabelled.examples], self.relabelled.count)
        for sign, facts in (("added", self.facts_added), ("removed", self.facts_removed)):
            for relation, bucket in sorted(facts.items()):
                table(f"Facts {sign}: {relation}", ["subject", "object"], bucket.examples, bucket.count)
        table("Synonyms added", ["id", "synonym"], self.synonyms_added.examples, self.synonyms_added.count)
        table("Synonyms removed", ["id", "synonym"], self.synonyms_removed.examples, self.synonyms_removed.count)
        for sign, counts in (("added", self.other_added), ("removed", self.other_removed)):
            table(f"Other triples {sign}", ["predicate", "count"], [[p, n] for p, n in sorted(counts.items())],
                  sum(counts.values()))
        return "\n".join(parts) + "\n"


def _term(node: object) -> Term:
    if isinstance(node, ox.NamedNode):
        return Term("uri", node.value)
    if isinstance(node, ox.Literal):
        return Term("literal", node.value, node.language, None if node.language else node.datatype.value)
    return Term("bnode", getattr(node, "value", str(node)))


def graph_contains(store: Store, graph: str) -> Callable[[ox.Triple], bool]:
    """Membership of a triple in ``graph``, through the store's pattern primitive."""
    def contains(triple: ox.Triple) -> bool:
        found = store.quads(_term(triple.subject), triple.predicate.value, _term(triple.object), graph)
        return next(iter(found), None) is not None

    return contains
