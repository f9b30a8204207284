"""SNOMED CT RF2 releases (Snapshot or Full): concepts, descriptions, relationships and the language refset.

Order of reading, so nothing but ids is held: concepts (the known and the inactive ids), relationships (edges, and
which concepts serve as attribute types), the language refset (the preferred description ids), descriptions
(labels; an attribute type's preferred term also labels its relation). In a Full release each file is read twice:
first the latest effectiveTime of every id, then only the rows that carry it.

- active concepts are ``MKG:Concept``; inactive ones are left out with their edges and labels, or with
  ``--keep-inactive`` kept and marked ``MKG:active false``;
- the preferred synonym in the language refset (acceptability 900000000000548007) is the ``skos:prefLabel``, other
  synonyms ``skos:altLabel``, the FSN ``MKG:fullySpecifiedName`` (its text minus the semantic tag is the prefLabel
  of a concept with no preferred synonym); text definitions ``skos:definition``;
- active inferred relationships (``--stated``: stated ones): IS-A 116680003 is ``rdfs:subClassOf``, any other type
  a typed edge ``SNOMEDCT:<typeId>``, declared a ``MKG:Relation`` labelled with the type's preferred term.
  Relationship groups are not kept (each attribute is one edge)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, repeat
from operator import itemgetter
from dataclasses import dataclass, field
from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, Problem, literal_nt, row_line, read_lines
from mirage_kg.loaders.rows.hygiene import open_input, read_picked_lines
from mirage_kg.loaders.rows.row_pick import Criteria
from mirage_kg.loaders.nt_terms import (
    ACTIVE,
    ALT,
    CONCEPT,
    LABEL,
    OBJECT_PROPERTY,
    PREF,
    RELATION,
    SOURCE_VERSION,
    SUBCLASS,
    TYPE,
)
from mirage_kg.loaders.nt_terms import DEFINITION as DEFINITION_TERM
from mirage_kg.model.namespaces import FULLY_SPECIFIED_NAME, GRAPH, mint, prefixes
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

IS_A = "116680003"
FSN = "900000000000003001"
SYNONYM = "900000000000013009"
DEFINITION = "900000000000550004"
PREFERRED = "900000000000548007"
INFERRED = "900000000000011006"
STATED = "900000000000010007"
ADDITIONAL = "900000000000227009"
US_ENGLISH = "900000000000509007"
GB_ENGLISH = "900000000000508004"

HEADERS = {
    "concept": ("id", "effectiveTime", "active", "moduleId", "definitionStatusId"),
    "description": ("id", "effectiveTime", "active", "moduleId", "conceptId", "languageCode", "typeId", "term",
                    "caseSignificanceId"),
    "relationship": ("id", "effectiveTime", "active", "moduleId", "sourceId", "destinationId", "relationshipGroup",
                     "typeId", "characteristicTypeId", "modifierId"),
    "language": ("id", "effectiveTime", "active", "moduleId", "refsetId", "referencedComponentId", "acceptabilityId"),
}
HEADER_ONLY_MEANS = {
    HEADERS["description"]: "no terms from it (labels, synonyms or definitions)",
    HEADERS["relationship"]: "no relationships from it",
    HEADERS["language"]: "no preferred terms, so every prefLabel comes from the FSN minus its semantic tag",
}
# file kind -> (glob pattern with {kind}, header, required)
PATTERNS = {
    "concepts": ("sct2_Concept_{kind}*.txt", "concept", True),
    "descriptions": ("sct2_Description_{kind}*.txt", "description", True),
    "definitions": ("sct2_TextDefinition_{kind}*.txt", "description", False),
    "relationships": ("sct2_Relationship_{kind}*.txt", "relationship", True),
    "stated": ("sct2_StatedRelationship_{kind}*.txt", "relationship", False),
    "language": ("der2_cRefset_Language{kind}*.txt", "language", True),
}

_FSN = iri_ref(FULLY_SPECIFIED_NAME)
_FALSE = '"false"^^<http://www.w3.org/2001/XMLSchema#boolean>'
_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"})
# Per-concept flags
_ACTIVE_CONCEPT, _INACTIVE_CONCEPT, _HAS_PREF, _ATTRIBUTE = 1, 2, 4, 8
_SEMANTIC_TAG = re.compile(r"\s*\([^()]*\)\s*$")


@dataclass
class Rf2Release:
    """The files of one release: ``kind`` is Snapshot, Full or Delta. ``deltas`` holds, per file kind, the rows
    of Delta releases read over this one (id -> latest row), when a Delta is applied."""

    kind: str
    files: dict[str, list[Path]] = field(default_factory=dict)
    deltas: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    version_names: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return [p.name for p in self.files.get("concepts", [])]


def locate_release(path: Path, kind: str | None = None) -> Rf2Release:
    """The RF2 files under ``path``: the Snapshot when there is one (or ``kind``), else the Full release."""
    if not path.is_dir():
        raise InputError("a SNOMED CT release is a folder of RF2 files (Snapshot/ or Full/)", path)
    kinds = [kind.capitalize()] if kind else ["Snapshot", "Full", "Delta"]
    for candidate in kinds:
        concepts = sorted(path.rglob(PATTERNS["concepts"][0].format(kind=candidate)))
        if concepts:
            release = Rf2Release(candidate)
            for key, (pattern, _, required) in PATTERNS.items():
                found = sorted(path.rglob(pattern.format(kind=candidate)))
                if required and not found and candidate != "Delta":  # a Delta holds only what changed
                    expected = pattern.format(kind=candidate)
                    raise InputError(f"missing required file {expected} (the {candidate} release has no {key} file)",
                                     path / expected)
                release.files[key] = found
            return release
    expected = PATTERNS["concepts"][0].format(kind=kinds[0])
    raise InputError(f"missing required file {expected}: no RF2 concept file in this folder", path / expected)


def rf2_rows(path: Path, header: tuple[str, ...], problem: Problem,
             advance: Callable[[float], None] | None = None, *, delta: bool = False,
             pick: Criteria | None = None) -> Iterator[list[str]]:
    """Fields of each well-formed row after the header; the line number rides along as the last item. With
    ``pick`` only the rows it names (``row_pick``), the others skipped unread (an update's scope: the file was
    checked whole when it was loaded).

    The header is checked whatever the leniency: a file without it would have its first row taken for column
    names, and a file with its columns in another order would load every field as the wrong one."""
    if pick is not None:
        yield from _picked_rf2_rows(path, header, problem, pick)
        return
    width = len(header)
    done = 0
    lines = read_lines(path, problem)
    number, first = next(lines, (0, ""))
    _check_header(path, header, number, first)
    rows = 0
    for number, text in lines:
        rows += 1
        done += len(text) + 1
        if number & 0x3FFF == 0 and advance is not None:
            advance(done)
            done = 0
        fields = _row_fields(text, width, path, number, problem)
        if fields is not None:
            yield fields
    if advance is not None:
        advance(done)
    if not rows and not delta:  # a Delta file with no rows only says nothing of that kind changed
        if header is HEADERS["concept"]:
            raise InputError("the concept file holds only its header: no concepts to load", path, 1)
        problem.report.warn(f"the file holds only its header: {HEADER_ONLY_MEANS[header]}", path)


def _row_fields(text: str, width: int, path: Path, number: int, problem: Problem) -> list[str] | None:
    """A row's tab-separated fields with its line number appended, or None (reported) when their count is wrong."""
    fields = text.split("\t")
    if len(fields) != width:
        problem("wrong column count", path, number, f"expected {width} tab-separated columns, found {len(fields)}")
        return None
    fields.append(number)  # type: ignore[arg-type]  # the line number rides as the last item (row_line)
    return fields


def _check_header(path: Path, header: tuple[str, ...], number: int, first: str) -> None:
    found = tuple(first.split("\t"))
    if number != 1 or found != header:
        if number == 0:
            raise InputError(f"empty file: an RF2 file starts with the header {' '.join(header)}", path, 1)
        hint = " (the header row is missing?)" if found and found[0].isdigit() else ""
        raise InputError(f"unexpected header{hint}: expected {' '.join(header)}, found {' '.join(found)[:200]}",
                         path, number)


def _picked_rf2_rows(path: Path, header: tuple[str, ...], problem: Problem, pick: Criteria) -> Iterator[list[str]]:
    """``rf2_rows`` of the rows ``pick`` names; each of those is checked as ``read_lines`` checks a line."""
    width = len(header)
    for number, text in read_picked_lines(path, problem, pick,
                                          header=lambda number, first: _check_header(path, header, number, first),
                                          numeric_ids=True):
        fields = _row_fields(text, width, path, number, problem)
        if fields is not None:
            yield fields


def with_deltas(base: Rf2Release, deltas: list[Rf2Release], problem: Problem) -> Rf2Release:
    """``base`` with Delta releases read over it, in order: per id the row with the latest effectiveTime wins
    (a later Delta's on a tie). Only the Deltas' rows are held."""
    for delta in deltas:
        for key, (_, header_kind, _) in PATTERNS.items():
            for path in delta.files.get(key, []):
                rows = base.deltas.setdefault(key, {})
                for fields in rf2_rows(path, HEADERS[header_kind], problem, delta=True):
                    held = rows.get(fields[0])
                    if held is None or fields[1] >= held[1]:
                        rows[fields[0]] = fields
        # the version the release now stands at, named as the base kind's file of that date would be
        base.version_names = [name.replace("_Delta_", f"_{base.kind}_") for name in delta.names()] or \
            base.version_names
    return base


def release_rows(release: Rf2Release, key: str, path: Path | None, header: tuple[str, ...], problem: Problem,
                 advance: Callable[[float], None] | None = None, pick: Criteria | None = None) -> Iterator[list[str]]:
    """The rows of one file of ``release``, with its Deltas' rows in place of the rows they supersede, and
    their new rows after the kind's last file. With ``pick``: of the base file only the rows it names and those
    a Delta row may supersede (the caller tests the rows it gets: a Delta row comes whatever it names)."""
    delta = release.deltas.get(key)
    if pick is not None and delta:
        pick = [*pick, (0, {ident.encode() for ident in delta})]
    rows = latest_rows(path, header, problem, release.kind == "Full", advance, pick) if path is not None else iter(())
    if not delta:
        yield from rows
        return
    for fields in rows:
        newer = delta.get(fields[0])
        if newer is not None and newer[1] >= fields[1]:
            del delta[fields[0]]
            yield newer
        else:
            yield fields
    if path is None or path == release.files[key][-1]:
        yield from list(delta.values())
        delta.clear()


def _release_files(release: Rf2Release, key: str) -> list[Path | None]:
    """The files the loader reads for ``key``; a None stands for "no base file, only Delta rows"."""
    files: list[Path | None] = list(release.files.get(key, []))
    return files or ([None] if release.deltas.get(key) else [])


def latest_rows(path: Path, header: tuple[str, ...], problem: Problem, full: bool,
                advance: Callable[[float], None] | None = None, pick: Criteria | None = None) -> Iterator[list[str]]:
    """Snapshot: every row (``pick``: the rows it names). Full: for each id only the row with the latest
    effectiveTime (the first of equals); ``pick`` is not applied (the latest row of an id may name other ids
    than an earlier one), the caller tests the rows it gets."""
    if not full:
        yield from rf2_rows(path, header, problem, advance, pick=pick)
        return
    quiet = Problem(LoadOptions(lenient=True), LoadReport())  # the second pass reports bad rows
    latest: dict[str, str] = {}
    times: dict[str, str] = {}
    for fields in rf2_rows(path, header, quiet, advance):
        ident, when = fields[0], fields[1]
        held = latest.get(ident)
        if held is None or when > held:
            latest[ident] = times.setdefault(when, when)  # one string object per distinct effectiveTime
    for fields in rf2_rows(path, header, problem, advance):
        ident = fields[0]
        if latest.get(ident) == fields[1]:
            del latest[ident]
            yield fields


class SnomedLoader(Loader):
    name = "snomed"
    description = "SNOMED CT RF2 release folder (Snapshot or Full)"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if not path.is_dir():
            return False
        return any(path.rglob("sct2_Concept_*.txt"))

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        release = locate_release(path, options.extra.get("snomed_release"))
        if release.kind == "Delta":
            release = self._over_base(release, path, options, report)
        graph = options.graph or self.graph_name(release, bool(options.extra.get("stated")))
        total = sum(p.stat().st_size for paths in release.files.values() for p in paths)
        if release.kind == "Full":
            total *= 2
        with progress_bar(f"loading SNOMED CT {release.kind}", total=total, unit="bytes") as advance:
            receipt = store.load(self.lines(release, options, report, graph, advance),
                                 media_type="application/n-triples", graph=graph, source=str(path))
        return [receipt]

    @staticmethod
    def _over_base(delta: Rf2Release, path: Path, options: LoadOptions, report: LoadReport) -> Rf2Release:
        """A Delta applies over the release it follows: the base release (and Deltas already applied to it)
        that ``load --update`` names in ``snomed_base``, from the paths the manifest recorded."""
        chain = [Path(p) for p in options.extra.get("snomed_base") or ()]
        if not chain:
            raise InputError("this is a SNOMED CT Delta: it applies over the release it follows; run "
                             "`mirage-kg load --update` over the graph that holds that release", path)
        for earlier in chain:
            if not earlier.exists():
                raise InputError(f"the Delta applies over the release loaded from {earlier}, which is no longer "
                                 "there; put it back, or load the new Snapshot with --update instead", earlier)
        problem = Problem(options, report)
        base = locate_release(chain[0], options.extra.get("snomed_release"))
        if base.kind == "Delta":
            raise InputError("the first release of a Delta chain must be a Snapshot or Full release", chain[0])
        options.extra["snomed_delta_applied"] = True
        return with_deltas(base, [locate_release(p, "Delta") for p in chain[1:]] + [delta], problem)

    @staticmethod
    def graph_name(release: Rf2Release, stated: bool) -> str:
        """``GRAPH:snomedct/INT_20240101`` (edition and date from the concept file names), ``/stated`` if so."""
        parts = []
        for name in release.names():
            match = re.match(r"sct2_Concept_(?:Snapshot|Full|Delta)_(.+)\.txt$", name)
            parts.append(match.group(1) if match else Path(name).stem)
        segments = ["+".join(parts)] + ([] if release.kind == "Snapshot" else ["full"]) + (["stated"] if stated else [])
        return GRAPH + "snomedct/" + "/".join(mint("", s) for s in segments)

    def lines(self, release: Rf2Release, options: LoadOptions, report: LoadReport, graph: str,
              advance: Callable[[float], None]) -> Iterator[str]:
        """The release as N-Triples; with ``snomed_only`` (the concepts a Delta touches, see ``update_scope``)
        only the triples of those concepts, and the rows of other concepts are skipped unread."""
        only = options.extra.get("snomed_only")
        if only is None:
            return self._lines(release, options, report, graph, advance, None)
        return _of_subjects(self._lines(release, options, report, graph, advance, only), prefixes()["SNOMEDCT"], only)

    def update_scope(self, path: Path, options: LoadOptions, report: LoadReport) -> set[str] | None:
        """For a Delta: the IRIs of the concepts whose triples it may change (and limit the next load to them);
        None for a Snapshot or Full release, which is compared whole."""
        release = locate_release(path, options.extra.get("snomed_release"))
        if release.kind != "Delta":
            return None
        combined = self._over_base(release, path, options, report)
        concepts = delta_scope(combined)
        options.extra["snomed_only"] = frozenset(concepts)
        ns = prefixes()["SNOMEDCT"]
        return {ns + concept for concept in concepts}

    def _lines(self, release: Rf2Release, options: LoadOptions, report: LoadReport, graph: str,
               advance: Callable[[float], None], only: frozenset[str] | None) -> Iterator[str]:
        """The release's N-Triples: concepts, then relationships, then descriptions and definitions (``only``: the
        triples of these concepts, for a Delta's update).

        Kept whole: one generator over millions of concept, relationship and description rows that share the
        per-concept flags it builds and updates (``state``); split into chained generators per phase, every line
        would pass one more frame (measured 15 ns a line through ``itertools.chain``, 60 through ``yield from``)."""
        problem = Problem(options, report)
        full = release.kind == "Full"
        keep = bool(options.extra.get("keep_inactive"))
        ns = prefixes()["SNOMEDCT"]
        for name in release.version_names or release.names():
            yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(Path(name).stem)} .\n"

        # Scoped to a Delta's concepts over a Snapshot: base rows are picked by id at byte level (``row_pick``),
        # and only the picked ones are parsed. (A Full base is read whole: its latest row of an id decides.)
        scoped = only is not None and not full
        only_ids = frozenset(c.encode() for c in only) if scoped and only is not None else frozenset()

        # 1. concepts. One id -> flags entry per concept is all the state. Scoped: every base concept's flags at
        # C speed (edges into any concept need its activity), then the scope's and the Deltas' rows parsed
        state, concept_pick = _scoped_state(release, only, only_ids) if scoped else ({}, None)
        for path in _release_files(release, "concepts"):
            for fields in release_rows(release, "concepts", path, HEADERS["concept"], problem, advance, concept_pick):
                ident, active = fields[0], fields[2]
                if not ident.isdigit():
                    problem("malformed SCTID", path, row_line(fields), f"concept id {ident!r}")
                    continue
                if active not in ("0", "1"):
                    problem("bad active flag", path, row_line(fields), f"{active!r} is neither 0 nor 1")
                    continue
                key = ident
                if key in state:
                    problem("duplicate id", path, row_line(fields),
                            f"concept {ident} has several rows; a Snapshot holds one per id")
                    continue
                if active == "1":
                    state[key] = _ACTIVE_CONCEPT
                    yield f"<{ns}{ident}> {TYPE} {CONCEPT} .\n"
                else:
                    state[key] = _INACTIVE_CONCEPT
                    if keep:
                        yield f"<{ns}{ident}> {TYPE} {CONCEPT} .\n<{ns}{ident}> {ACTIVE} {_FALSE} .\n"
        usable = _ACTIVE_CONCEPT | _INACTIVE_CONCEPT if keep else _ACTIVE_CONCEPT

        # 2. relationships
        stated = bool(options.extra.get("stated"))
        wanted = {STATED} if stated else {INFERRED, ADDITIONAL}
        paths = [(key, path) for key in ("relationships", "stated")[:1 + stated]
                 for path in _release_files(release, key)]
        get = state.get
        # scoped: the rows from a scope concept, and those of a type in scope until the type is known to be one
        types_open = set(only_ids) - {IS_A.encode()}
        relationship_pick: Criteria | None = [(4, only_ids), (7, types_open)] if scoped else None
        for key, path in paths:
            for fields in release_rows(release, key, path, HEADERS["relationship"], problem, advance,
                                       relationship_pick):
                if only is not None and fields[4] not in only and fields[7] not in only:
                    continue  # neither the source's edges nor the type's declaration can change
                if fields[2] != "1" or fields[8] not in wanted:
                    continue  # inactive rows and the other characteristic type are not this load's edges
                source, target, kind = fields[4], fields[5], fields[7]
                source_flags, target_flags, kind_flags = get(source, 0), get(target, 0), get(kind, 0)
                if not (source_flags and target_flags and kind_flags):
                    bad = source if not source_flags else target if not target_flags else kind
                    problem("unknown id", path, row_line(fields), f"{bad} is not a concept of the release")
                    continue
                if not (source_flags & usable and target_flags & usable and kind_flags & usable):
                    continue  # an inactive end or type
                if kind == IS_A:
                    yield f"<{ns}{source}> {SUBCLASS} <{ns}{target}> .\n"
                else:
                    if not kind_flags & _ATTRIBUTE:
                        state[kind] = kind_flags | _ATTRIBUTE
                        types_open.discard(kind.encode())
                        yield f"<{ns}{kind}> {TYPE} {RELATION} .\n<{ns}{kind}> {TYPE} {OBJECT_PROPERTY} .\n"
                    yield f"<{ns}{source}> <{ns}{kind}> <{ns}{target}> .\n"

        # 3. the language refset: which descriptions are preferred. Scoped: the scope's descriptions are picked
        # first, and only the refset rows naming them are parsed
        preferred, described = self._descriptions(release, options, problem, full, advance,
                                                  only_ids if scoped else None)

        # 4. descriptions and text definitions (the hot loop: plain concatenation, one ending per language)
        langs = _langs(options.lang)
        endings: dict[str, str] = {}  # languageCode -> '"@en .\n', for the codes seen valid
        fallback: dict[str, str] = {}  # concept -> FSN, until a preferred synonym turns up
        for key, path, rows in described:
            for fields in rows:
                if fields[2] != "1" or only is not None and fields[4] not in only:
                    continue
                concept, lang, kind, term = fields[4], fields[5], fields[6], fields[7]
                if langs is not None and lang not in langs:
                    continue
                ending = endings.get(lang)
                if ending is None:
                    if not lang.isalpha() or not lang.isascii():
                        problem("bad language code", path, row_line(fields), f"{lang!r}")
                        continue
                    ending = endings[lang] = f'"@{lang} .\n'
                flags = state.get(concept, 0)
                if not flags:
                    problem("unknown id", path, row_line(fields), f"{concept} is not a concept of the release")
                    continue
                if not flags & usable:
                    continue
                text = term.translate(_ESCAPE)
                if kind == FSN:
                    if not flags & _HAS_PREF:
                        fallback[concept] = term
                    yield f"<{ns}{concept}> {_FSN} \"{text}{ending}"
                elif kind == DEFINITION or key == "definitions":
                    yield f"<{ns}{concept}> {DEFINITION_TERM} \"{text}{ending}"
                elif not flags & _HAS_PREF and fields[0].isdigit() and int(fields[0]) in preferred:
                    state[concept] = flags | _HAS_PREF
                    fallback.pop(concept, None)
                    out = f"<{ns}{concept}> {PREF} \"{text}{ending}"
                    if flags & _ATTRIBUTE:
                        out += f"<{ns}{concept}> {LABEL} \"{text}\" .\n"
                    yield out
                else:
                    yield f"<{ns}{concept}> {ALT} \"{text}{ending}"
        for number, fsn in fallback.items():
            term = _SEMANTIC_TAG.sub("", fsn) or fsn
            out = f"<{ns}{number}> {PREF} {literal_nt(term, 'en')} .\n"
            if state[number] & _ATTRIBUTE:
                out += f"<{ns}{number}> {LABEL} {literal_nt(term)} .\n"
            yield out

    def _descriptions(self, release: Rf2Release, options: LoadOptions, problem: Problem, full: bool,
                      advance: Callable[[float], None], only_ids: frozenset[bytes] | None
                      ) -> tuple[set[int], Iterable[tuple[str, Path | None, Iterable[list[str]]]]]:
        """The preferred description ids, and the description and definition rows to read, per file. Scoped
        (``only_ids``): the scope's descriptions are picked first, and only the refset rows naming them parsed."""
        description_files = [(key, path) for key in ("descriptions", "definitions")
                             for path in _release_files(release, key)]
        if only_ids is not None:
            picked = [(key, path, list(release_rows(release, key, path, HEADERS["description"], problem, advance,
                                                    [(4, only_ids)])))
                      for key, path in description_files]
            described_ids = {fields[0].encode() for _, _, rows in picked for fields in rows}
            return self._preferred(release, options, problem, full, advance, described_ids), picked
        preferred = self._preferred(release, options, problem, full, advance)
        return preferred, ((key, path, release_rows(release, key, path, HEADERS["description"], problem, advance))
                           for key, path in description_files)

    @staticmethod
    def _preferred(release: Rf2Release, options: LoadOptions, problem: Problem, full: bool,
                   advance: Callable[[float], None], wanted: set[bytes] | None = None) -> set[int]:
        """Description ids the chosen language refset marks preferred: ``language_refset`` if given, else US
        English, else GB English, else the largest refset present. With ``wanted`` (a Snapshot's description ids
        an update needs) only those, when the refset the whole file chooses is plain from a C-speed count."""
        chosen = options.extra.get("language_refset")
        if wanted is not None and not full:
            refset = _refset_of(release, chosen)
            if refset is not None:
                out: set[int] = set()
                for path in _release_files(release, "language"):
                    for fields in release_rows(release, "language", path, HEADERS["language"], problem, advance,
                                               [(5, wanted)]):
                        if fields[2] == "1" and fields[6] == PREFERRED and fields[4] == refset:
                            if not fields[5].isdigit():
                                problem("malformed SCTID", path, row_line(fields), f"description id {fields[5]!r}")
                                continue
                            out.add(int(fields[5]))
                return out
        by_refset: dict[str, set[int]] = {}
        seen: set[str] = set()
        for path in _release_files(release, "language"):
            for fields in release_rows(release, "language", path, HEADERS["language"], problem, advance):
                if fields[2] == "1" and fields[6] == PREFERRED:
                    refset = fields[4]
                    seen.add(refset)
                    # hold only the refset that can still win (a release carries US and GB: half the memory)
                    if chosen and refset != chosen or not chosen and refset != US_ENGLISH and US_ENGLISH in seen:
                        continue
                    if not fields[5].isdigit():
                        problem("malformed SCTID", path, row_line(fields), f"description id {fields[5]!r}")
                        continue
                    if refset == US_ENGLISH and not chosen and US_ENGLISH not in by_refset:
                        by_refset = {}  # US English wins: the others collected so far are no longer needed
                    by_refset.setdefault(refset, set()).add(int(fields[5]))
        chosen = options.extra.get("language_refset")
        if chosen:
            if chosen not in by_refset:
                raise InputError(f"language refset {chosen} has no preferred rows in this release "
                                 f"(present: {', '.join(sorted(seen)) or 'none'})")
            return by_refset[chosen]
        for refset in (US_ENGLISH, GB_ENGLISH):
            if refset in by_refset:
                return by_refset[refset]
        return max(by_refset.values(), key=len) if by_refset else set()


def _scoped_state(release: Rf2Release, only: frozenset[str] | None, only_ids: frozenset[bytes]
                  ) -> tuple[dict[str, int], Criteria | None]:
    """For a read scoped to a Delta's concepts: every base concept's flags at C speed (edges into any concept need
    its activity) less the scope's and the Deltas' concepts, whose rows are then picked and parsed; nothing when a
    base row is not plain (the whole concept files are parsed then)."""
    flags_of = _concept_flags(release.files.get("concepts", []))
    if flags_of is None:
        return {}, None
    for ident in (*(only or ()), *release.deltas.get("concepts", {})):
        flags_of.pop(ident, None)
    return flags_of, [(0, only_ids)]


def _concept_flags(paths: list[Path]) -> dict[str, int] | None:
    """Every concept's active/inactive flag from the base concept files at C speed (``bytes.split`` per block),
    for a scoped read; None when a row is not plain (a duplicate or malformed id, a bad active flag, a short
    row: the loader's own pass reports and decides those)."""
    idents: list[bytes] = []
    actives: list[bytes] = []
    for path in paths:
        with open_input(path) as handle:
            handle.readline()  # the header, checked by the pass over the picked rows
            for block in iter(lambda: handle.readlines(1 << 20), []):
                rows = list(map(bytes.split, block, repeat(b"\t"), repeat(3)))
                try:
                    idents.extend(map(itemgetter(0), rows))
                    actives.extend(map(itemgetter(2), rows))
                except IndexError:
                    return None
    if not set(actives) <= {b"0", b"1"} or not all(map(bytes.isdigit, idents)):
        return None
    flags = dict(zip(map(bytes.decode, idents), map({b"1": _ACTIVE_CONCEPT, b"0": _INACTIVE_CONCEPT}.__getitem__,
                                                    actives)))
    return flags if len(flags) == len(idents) else None


def _refset_of(release: Rf2Release, chosen: str | None) -> str | None:
    """The language refset ``_preferred`` chooses from the whole (Snapshot) release, told from a C-speed count of
    the base rows that are active, preferred and name a description id; None when the count cannot tell (the
    Deltas' rows could tip it, or the largest refset would win): the caller reads the whole file. The count
    stops once the refset that wins when present (``chosen``, else US English) is past the Deltas' reach."""
    usable: Counter[bytes] = Counter()
    seen: set[bytes] = set()
    tails = {PREFERRED.encode() + b"\n", PREFERRED.encode() + b"\r\n"}
    delta_rows = release.deltas.get("language", {})
    margin = len(delta_rows)  # each Delta row supersedes at most one counted row
    first = (chosen or US_ENGLISH).encode()
    for path in release.files.get("language", []):
        with open_input(path) as handle:
            handle.readline()
            for block in iter(lambda: handle.readlines(1 << 20), []):
                if usable[first] > margin:
                    break
                rows = list(map(bytes.split, block, repeat(b"\t")))
                rows = list(compress(rows, map(tails.__contains__, map(itemgetter(-1), rows))))
                rows = list(compress(rows, map((7).__eq__, map(len, rows))))
                rows = list(compress(rows, map(b"1".__eq__, map(itemgetter(2), rows))))
                seen.update(map(itemgetter(4), rows))
                usable.update(compress(map(itemgetter(4), rows), map(bytes.isdigit, map(itemgetter(5), rows))))
    delta_refsets = {fields[4].encode() for fields in delta_rows.values()}
    us, gb = US_ENGLISH.encode(), GB_ENGLISH.encode()
    if chosen:
        return chosen if usable[chosen.encode()] > margin else None
    if usable[us] > margin:
        return US_ENGLISH
    if us not in seen and us not in delta_refsets and usable[gb] > margin:
        return GB_ENGLISH
    return None


def delta_scope(release: Rf2Release) -> set[str]:
    """The concepts whose triples the Deltas read over ``release`` may change: each concept row's concept and
    the sources of edges into it or typed by it (its activity decides them), each relationship's source and
    type (the type's declaration), each description's concept, and the concept of each description whose
    acceptability changed (looked up in the base when the Delta does not carry the description)."""
    quiet = Problem(LoadOptions(lenient=True), LoadReport())
    full = release.kind == "Full"
    deltas = release.deltas
    concepts = set(deltas.get("concepts", {}))
    scope = set(concepts)
    for key in ("relationships", "stated"):
        for fields in deltas.get(key, {}).values():
            scope.update((fields[4], fields[7]))
    owner: dict[str, str] = {}
    for key in ("descriptions", "definitions"):
        for ident, fields in deltas.get(key, {}).items():
            scope.add(fields[4])
            owner[ident] = fields[4]
    # descriptions to find in the base: those whose acceptability changed, and those the Delta supersedes (a
    # component's concept should never change, but if it did the old concept loses the label)
    wanted = {fields[5] for fields in deltas.get("language", {}).values()}
    scope.update(owner[ident] for ident in wanted if ident in owner)
    wanted |= owner.keys()
    if wanted:
        wanted_ids = {ident.encode() for ident in wanted}
        for key in ("descriptions", "definitions"):
            for path in release.files.get(key, []):
                for fields in latest_rows(path, HEADERS["description"], quiet, full, pick=[(0, wanted_ids)]):
                    if fields[0] in wanted:
                        scope.add(fields[4])
    # edges into, or typed by, a concept whose activity may change; the base source of a superseded relationship
    superseded = {ident for key in ("relationships", "stated") for ident in deltas.get(key, {})}
    if concepts or superseded:
        concept_ids, superseded_ids = {c.encode() for c in concepts}, {i.encode() for i in superseded}
        pick = [(5, concept_ids), (7, concept_ids), (0, superseded_ids)]
        for key in ("relationships", "stated"):
            for path in release.files.get(key, []):
                for fields in latest_rows(path, HEADERS["relationship"], quiet, full, pick=pick):
                    if fields[5] in concepts or fields[7] in concepts or fields[0] in superseded:
                        scope.add(fields[4])
    return scope


def _of_subjects(lines: Iterator[str], namespace: str, only: frozenset[str]) -> Iterator[str]:
    """The lines whose subject is one of ``only`` (ids in ``namespace``), and those about the graph itself."""
    prefix = "<" + namespace
    start = len(prefix)
    for chunk in lines:
        for line in chunk.split("\n")[:-1]:
            if not line.startswith(prefix) or line[start:line.index(">")] in only:
                yield line + "\n"


def _langs(lang: str | None) -> frozenset[str] | None:
    """``en`` -> {en}; ``en,es`` -> both; ``all``/``*``/empty -> no filter."""
    if not lang or lang.strip().lower() in ("all", "*", "any"):
        return None
    return frozenset(p.split("-")[0].lower() for p in re.split(r"[,\s]+", lang.strip()) if p)
