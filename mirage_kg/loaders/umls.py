"""UMLS Metathesaurus releases (RRF): MRCONSO labels and source codes, MRREL typed edges and hierarchy, MRSTY
semantic types, MRSAB source versions. Streams each file once with a few bytes of state per CUI.

Modelling choices (docs/sources.md says why):
- one ``skos:prefLabel`` per concept and language: the atom ranked best by TS=P, then STT=PF, then ISPREF=Y; every
  other string is a ``skos:altLabel``; source codes are ``skos:exactMatch`` links for the sources with a
  conventional prefix (SNOMEDCT_US, MSH, ICD10CM, HPO, OMIM, NCI, ORPHANET) and ``skos:notation "SAB:CODE"`` else;
- MRREL reads **CUI2 -REL/RELA-> CUI1**; PAR/CHD (no RELA, or isa) become ``rdfs:subClassOf`` child -> parent, as
  does RELA isa under any other REL; RB/RN (no RELA) ``skos:broader`` narrower -> broader; everything else a typed
  edge named by RELA, else by REL;
  an edge and its mirror row (PAR/CHD, may_treat/may_be_treated_by...) land on the same triple, so no edge is
  stored twice, and symmetric relations (RO, SY, SIB...) are stored once, from the lower CUI."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, Problem, literal_nt, row_line
from mirage_kg.loaders.rows.hygiene import checked_rows, read_byte_blocks, read_picked_lines, readable_file
from mirage_kg.loaders.rows.row_pick import Criteria
from mirage_kg.loaders.nt_terms import (
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
from mirage_kg.model.namespaces import GRAPH, MKG, OWL, SKOS, SKOS_NOTATION, mint, prefixes
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

WIDTHS = {"MRCONSO.RRF": 18, "MRREL.RRF": 16, "MRSTY.RRF": 6, "MRSAB.RRF": 25, "MRDOC.RRF": 4}
REQUIRED = ("MRCONSO.RRF",)
OPTIONAL = ("MRREL.RRF", "MRSTY.RRF", "MRSAB.RRF", "MRDOC.RRF")
SUPPRESSED = frozenset("OEY")
EMPTY_MEANS = {"MRREL.RRF": "relations", "MRSTY.RRF": "semantic types", "MRSAB.RRF": "source versions",
               "MRDOC.RRF": "relation inverses from MRDOC"}

# UMLS LAT -> BCP 47 language tag (the rest: the LAT lower-cased, a valid 3-letter tag)
LAT_TO_LANG = {
    "ENG": "en", "FRE": "fr", "GER": "de", "SPA": "es", "ITA": "it", "DUT": "nl", "POR": "pt", "JPN": "ja",
    "RUS": "ru", "CZE": "cs", "SWE": "sv", "FIN": "fi", "DAN": "da", "NOR": "no", "HUN": "hu", "POL": "pl",
    "KOR": "ko", "CHI": "zh", "HEB": "he", "TUR": "tr", "GRE": "el", "LAV": "lv", "EST": "et", "HRV": "hr",
    "SCR": "hr", "BAQ": "eu", "ARA": "ar", "PER": "fa", "UKR": "uk", "ICE": "is", "LIT": "lt", "SLV": "sl",
}
_LANG_TO_LAT = {lang: lat for lat, lang in LAT_TO_LANG.items() if lat != "SCR"}

# SAB -> conventional prefix for exact-match links (codes that fit the prefix's shape only)
SAB_PREFIXES = {
    "SNOMEDCT_US": "SNOMEDCT", "SNOMEDCT_VET": "SNOMEDCT", "SCTSPA": "SNOMEDCT", "MSH": "MESH",
    "ICD10CM": "ICD10CM", "HPO": "HP", "OMIM": "OMIM", "NCI": "NCIT", "ORPHANET": "ORPHA",
}
_CODE_SHAPE = {
    "SNOMEDCT": re.compile(r"\d{6,18}"), "MESH": re.compile(r"[CDQ]\d{6,9}"),
    "ICD10CM": re.compile(r"[A-Z]\d[0-9A-Z](\.[0-9A-Z]{1,4})?"), "HP": re.compile(r"HP:\d{7}"),
    "OMIM": re.compile(r"\d{6}"), "NCIT": re.compile(r"C\d+"), "ORPHA": re.compile(r"(ORPHA:)?\d+"),
}

# REL values with no RELA: the relation name the edge gets (REL states what CUI2 is to CUI1).
REL_NAMES = {
    "RO": "related_to", "RL": "similar_to", "RQ": "possibly_synonymous_with", "SY": "source_asserted_synonym_of",
    "SIB": "sibling_of", "XR": "not_related_to", "AQ": "allowed_qualifier_for", "QB": "can_be_qualified_by",
    "DEL": "deleted_relation_to",
}
RELATION_LABELS = {"possibly_synonymous_with": "related and possibly synonymous with",
                   "source_asserted_synonym_of": "source-asserted synonym of"}
SYMMETRIC = {"related_to", "similar_to", "possibly_synonymous_with", "source_asserted_synonym_of", "sibling_of",
             "not_related_to"}
# Inverse pairs used when MRDOC.RRF is absent (MRDOC, when present, adds every pair it documents).
BUILTIN_INVERSES = [("allowed_qualifier_for", "can_be_qualified_by"), ("part_of", "has_part"),
                    ("may_treat", "may_be_treated_by"), ("may_prevent", "may_be_prevented_by"),
                    ("has_finding_site", "finding_site_of"), ("mapped_to", "mapped_from"),
                    ("has_manifestation", "manifestation_of"), ("has_member", "member_of"),
                    ("has_ingredient", "ingredient_of"), ("has_tradename", "tradename_of"),
                    ("has_associated_morphology", "associated_morphology_of"),
                    ("has_causative_agent", "causative_agent_of"), ("has_method", "method_of"),
                    ("isa", "inverse_isa")]

_CLASS = iri_ref(OWL + "Class")
_INVERSE_LABEL = iri_ref(MKG + "inverseLabel")
_NOTATION = iri_ref(SKOS_NOTATION)
_EXACT = iri_ref(SKOS + "exactMatch")
_BROADER = iri_ref(SKOS + "broader")
_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"})

# Per-CUI state, one byte: bit 0 seen in MRCONSO, bit 1 declared (kept by the filters), bits 2-7 prefLabel written
# for language slot 0-5 (slots go to languages in order of appearance; later languages use a small set).
_SEEN, _KEPT = 1, 2
_SLOTS = 6


@dataclass(frozen=True)
class UmlsFilters:
    """What ``--sab``, ``--lang``, ``--include-suppressed`` and ``--relations`` ask for (None: everything)."""

    sabs: frozenset[str] | None = None
    lats: frozenset[str] | None = frozenset({"ENG"})
    include_suppressed: bool = False
    relations: frozenset[str] | None = None

    @classmethod
    def from_options(cls, options: LoadOptions) -> UmlsFilters:
        extra = options.extra
        sabs = frozenset(s.strip() for s in extra.get("sab") or () if s.strip()) or None
        relations = frozenset(r.strip() for r in extra.get("relations") or () if r.strip()) or None
        return cls(sabs, lats_for(options.lang), bool(extra.get("include_suppressed")), relations)


def lats_for(lang: str | None) -> frozenset[str] | None:
    """``en`` -> {ENG}; ``en,fr`` or ``ENG,FRE`` -> both; ``all``, ``*`` or empty -> no language filter."""
    if not lang or lang.strip().lower() in ("all", "*", "any"):
        return None
    lats = set()
    for part in re.split(r"[,\s]+", lang.strip()):
        if not part:
            continue
        if len(part) == 3 and part.isalpha():
            lats.add(part.upper())
        else:
            base = part.split("-")[0].lower()
            if base not in _LANG_TO_LAT:
                raise InputError(f"--lang {part!r}: no UMLS LAT for this language; give the LAT itself (e.g. ENG) "
                                 f"or one of {', '.join(sorted(_LANG_TO_LAT))}")
            lats.add(_LANG_TO_LAT[base])
    return frozenset(lats)


def locate_release(path: Path) -> dict[str, Path]:
    """The RRF files of a release folder (``META/`` or the folder itself); a missing MRCONSO is an error, and so is
    a file that is there but cannot be read (an optional file is skipped only when it is truly absent)."""
    if not path.is_dir():
        raise InputError("a UMLS release is a folder holding MRCONSO.RRF (and MRREL, MRSTY, MRSAB)", path)
    try:
        meta = path / "META" if os.path.lexists(path / "META" / "MRCONSO.RRF") else path
        os.listdir(meta)
    except OSError as exc:
        raise InputError(f"cannot read the release folder: {exc.strerror or exc}", path / "META") from exc
    files = {}
    for name in REQUIRED + OPTIONAL:
        candidate = meta / name
        if readable_file(candidate):
            files[name] = candidate
    for name in REQUIRED:
        if name not in files:
            raise InputError(f"missing required file {name} (looked in {meta})", meta / name)
    return files


def release_name(path: Path) -> str:
    """``2024AA`` from ``release.dat`` (``umls.release.name=``), else the release folder's name."""
    for folder in (path, path.parent, path / ".."):
        dat = folder / "release.dat"
        if dat.is_file():
            for line in dat.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("umls.release.name="):
                    return line.split("=", 1)[1].strip()
    resolved = path.resolve()
    return resolved.parent.name if resolved.name.upper() == "META" else resolved.name


def rrf_blocks(path: Path, problem: Problem, advance: Callable[[float], None] | None = None,
               pick: Criteria | None = None) -> Iterator[tuple[int, bytes]]:
    """The clean lines of an RRF file a block at a time: (number of the first line, the lines as UTF-8 bytes, each
    ending with a line break), numbered on from the first (``read_byte_blocks``). With ``pick`` only the lines it
    names (``row_pick``), each its own block, the others skipped unread (an update's scope). Fields are checked by
    the reader (``rrf_rows``, ``bad_row``)."""
    if pick is not None:
        # id_pick's block test keys a field's bytes (up to 24: a CUI is 8), whatever they spell; RRF rows are regular
        for number, text in read_picked_lines(path, problem, pick, b"|", numeric_ids=True):
            yield number, text.encode("utf-8") + b"\n"
        return
    empty = True
    for first, data, size in read_byte_blocks(path, problem):
        empty = False
        if advance is not None:
            advance(size)
        yield first, data
    if empty and path.name != "MRCONSO.RRF":  # an empty MRCONSO is an error, raised by its reader
        problem.report.warn(f"the file is empty: no {EMPTY_MEANS.get(path.name, 'rows')}", path)


def block_lines(data: bytes) -> list[str]:
    """The texts of a block's lines (``rrf_blocks``)."""
    lines = data.decode("utf-8").split("\n")
    lines.pop()  # the empty text after the last line break
    return lines


def rrf_rows(path: Path, problem: Problem, advance: Callable[[float], None] | None = None,
             pick: Criteria | None = None) -> Iterator[list[str]]:
    """The fields of each well-formed line (the trailing ``|`` removed); the line number rides along as the last
    item. With ``pick`` only the lines it names (``row_pick``), the others skipped unread (an update's scope)."""
    expected = WIDTHS[path.name] + 1
    for first, data in rrf_blocks(path, problem, advance, pick):
        for offset, text in enumerate(block_lines(data)):
            fields = text.split("|")
            if len(fields) != expected or fields[-1]:
                bad_row(path, first + offset, text, len(fields), problem)
                continue
            fields[-1] = first + offset  # type: ignore[call-overload]  # the line number, in the empty last field's place (row_line)
            yield fields


def bad_row(path: Path, number: int, text: str, found: int, problem: Problem) -> None:
    """Report an RRF line with ``found - 1`` fields where its file has ``WIDTHS``, or one cut off before its ``|``."""
    width = WIDTHS[path.name]
    if not text.endswith("|"):
        problem("truncated line", path, number,
                f"every RRF line ends with '|' after {width} fields; this one ends {text[-20:]!r}")
    else:
        problem("wrong column count", path, number, f"expected {width} fields, found {found - 1}")


def read_sources(files: dict[str, Path], problem: Problem) -> dict[str, str]:
    """RSAB -> VSAB of the current source versions (MRSAB rows with CURVER=Y)."""
    path = files.get("MRSAB.RRF")
    if path is None:
        return {}
    versions = {}
    for fields in rrf_rows(path, problem):
        if fields[21] == "Y":
            versions[fields[3]] = fields[2]
    return versions


def read_inverses(files: dict[str, Path], problem: Problem,
                  advance: Callable[[float], None] | None = None) -> dict[str, str]:
    """RELA -> its inverse, from MRDOC (``DOCKEY=RELA, TYPE=rela_inverse``) and the built-in pairs."""
    inverse = {}
    for a, b in BUILTIN_INVERSES:
        inverse[a], inverse[b] = b, a
    path = files.get("MRDOC.RRF")
    if path is not None:
        for fields in rrf_rows(path, problem, advance):
            if fields[0] == "RELA" and fields[2] == "rela_inverse" and fields[1] and fields[3]:
                inverse[fields[1]] = fields[3]
    return inverse


class _Relations:
    """Relation names -> (IRI, whether to flip the edge, whether symmetric), each declared once with its labels."""

    def __init__(self, namespace: str, inverses: dict[str, str]) -> None:
        self.namespace = namespace
        self.inverses = inverses
        self.cache: dict[str, tuple[str, bool, bool]] = {}
        self.declared: set[str] = set()
        self.pending: list[str] = []

    def resolve(self, rel: str, rela: str) -> tuple[str, bool, bool]:
        key = rela or rel
        found = self.cache.get(key)
        if found is not None:
            return found
        name = rela or REL_NAMES.get(rel, rel.lower())
        other = self.inverses.get(name) or (name[len("inverse_"):] if name.startswith("inverse_") else None)
        symmetric = other == name or name in SYMMETRIC
        flip = False
        if other and not symmetric and _canonical(name, other) != name:
            flip = True
            name, other = other, name
        iri = iri_ref(mint(self.namespace, name))
        if iri not in self.declared:
            self.declared.add(iri)
            label = RELATION_LABELS.get(name, name.replace("_", " "))
            inverse = label if symmetric else RELATION_LABELS.get(other, other.replace("_", " ")) if other else None
            decl = f"{iri} {TYPE} {RELATION} .\n{iri} {TYPE} {OBJECT_PROPERTY} .\n{iri} {LABEL} {literal_nt(label)} .\n"
            if inverse:
                decl += f"{iri} {_INVERSE_LABEL} {literal_nt(inverse)} .\n"
            self.pending.append(decl)
        found = (iri, flip, symmetric)
        self.cache[key] = found
        return found


def _canonical(a: str, b: str) -> str:
    """Which of an inverse pair names the stored edge: not an ``inverse_`` name, not a passive ``..._by`` one,
    else the alphabetically first (``may_treat`` over ``may_be_treated_by``, ``isa`` over ``inverse_isa``)."""
    for marked in (lambda n: n.startswith("inverse_"), lambda n: n.endswith("_by")):
        if marked(a) != marked(b):
            return b if marked(a) else a
    return min(a, b)


class UmlsLoader(Loader):
    name = "umls"
    description = "UMLS Metathesaurus release folder (RRF: MRCONSO, MRREL, MRSTY, MRSAB)"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        return path.is_dir() and (os.path.lexists(path / "MRCONSO.RRF") or os.path.lexists(path / "META" / "MRCONSO.RRF"))

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        files = locate_release(path)
        filters = UmlsFilters.from_options(options)
        problem = Problem(options, report)
        sources = read_sources(files, problem)
        graph = options.graph or self.graph_name(path, sources, filters)
        total = sum(p.stat().st_size for name, p in files.items() if name != "MRSAB.RRF")  # MRSAB is read first
        with progress_bar(f"loading UMLS {path.name}", total=total, unit="bytes") as advance:
            receipt = store.load(self.lines(files, options, report, graph, sources, advance),
                                 media_type="application/n-triples", graph=graph, source=str(path))
        return [receipt]

    @staticmethod
    def graph_name(path: Path, sources: dict[str, str], filters: UmlsFilters) -> str:
        """``GRAPH:umls/2024AA``; with ``--sab``, the chosen sources' versions too (``.../MSH2024_2023_08_25``)."""
        segments = [release_name(path)]
        if filters.sabs:
            segments.append("+".join(sources.get(s, s) for s in sorted(filters.sabs)))
        return GRAPH + "umls/" + "/".join(mint("", s) for s in segments)

    def lines(self, files: dict[str, Path], options: LoadOptions, report: LoadReport, graph: str,
              sources: dict[str, str], advance: Callable[[float], None]) -> Iterator[str]:
        problem = Problem(options, report)
        filters = UmlsFilters.from_options(options)
        for rsab, vsab in sorted(sources.items()):
            if filters.sabs is None or rsab in filters.sabs:
                yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(vsab)} .\n"
        state = bytearray(1 << 16)
        yield from self._concepts(files["MRCONSO.RRF"], filters, problem, state, advance)
        if "MRSTY.RRF" in files:
            yield from self._semantic_types(files["MRSTY.RRF"], problem, state, advance)
        else:
            report.skip("optional file absent: no semantic types", files["MRCONSO.RRF"].with_name("MRSTY.RRF"), None)
        if "MRREL.RRF" in files:
            relations = _Relations(options.relation_namespace, read_inverses(files, problem, advance))
            yield from self._relations(files["MRREL.RRF"], filters, problem, report, state, relations,
                                       rrf_blocks(files["MRREL.RRF"], problem, advance))
        else:
            report.skip("optional file absent: no relations", files["MRCONSO.RRF"].with_name("MRREL.RRF"), None)

    def scoped_rows(self, files: dict[str, Path], options: LoadOptions, report: LoadReport) -> UmlsRows:
        """This loader's passes over rows an update hands it instead of whole files (``releases.umls_scope``)."""
        return UmlsRows(self, files, options, report)

    # --- MRCONSO ----------------------------------------------------------------------------------------------
    def _concepts(self, path: Path, filters: UmlsFilters, problem: Problem, state: bytearray,
                  advance: Callable[[float], None], picked: Iterable[list[str]] | None = None) -> Iterator[str]:
        """Labels and codes, one CUI group at a time (MRCONSO is sorted by CUI; an unsorted file still loads).
        ``picked``: these rows instead of the file's (an update's scope)."""
        ns = prefixes()["UMLS"]
        sabs, lats, keep_suppressed = filters.sabs, filters.lats, filters.include_suppressed
        slots: dict[str, int] = {}
        overflow: set[tuple[int, str]] = set()
        codes_by_sab = {sab: (prefixes()[prefix], _CODE_SHAPE[prefix], prefix in ("HP", "ORPHA"))
                        for sab, prefix in SAB_PREFIXES.items()}
        endings: dict[str, str] = {}
        group: list[list[str]] = []
        current = ""
        rows = 0
        for fields in picked if picked is not None else rrf_rows(path, problem, advance):
            rows += 1
            cui = fields[0]
            if cui != current:
                if group:
                    yield self._emit(current, group, ns, state, slots, overflow, codes_by_sab, endings)
                    group = []
                if len(cui) != 8 or cui[0] != "C" or not cui[1:].isdigit():
                    problem("malformed CUI", path, row_line(fields), f"{cui!r} is not C followed by 7 digits")
                    current = ""
                    continue
                current = cui
                number = int(cui[1:])
                if number >= len(state):
                    state.extend(bytes(max(number + 1 - len(state), len(state))))
                state[number] |= _SEEN
            if sabs is not None and fields[11] not in sabs:
                continue
            if lats is not None and fields[1] not in lats:
                continue
            if not keep_suppressed and fields[16] in SUPPRESSED:
                continue
            group.append(fields)
        if group:
            yield self._emit(current, group, ns, state, slots, overflow, codes_by_sab, endings)
        if not rows and picked is None:
            raise InputError("no concepts: MRCONSO.RRF holds no well-formed row", path)

    @staticmethod
    def _emit(cui: str, rows: list[list[str]], ns: str, state: bytearray, slots: dict[str, int],
              overflow: set[tuple[int, str]], codes_by_sab: dict[str, tuple[str, re.Pattern[str], bool]],
              endings: dict[str, str]) -> str:
        """The N-Triples of one CUI group (the hot path: string building kept to concatenation)."""
        number = int(cui[1:])
        flags = state[number]
        iri = f"<{ns}{cui}> "
        out = []
        if not flags & _KEPT:
            flags |= _KEPT
            out.append(f"{iri}{TYPE} {CONCEPT} .\n")
        best: dict[str, tuple[int, str]] = {}
        for fields in rows:  # CUI|LAT|TS|LUI|STT|SUI|ISPREF|AUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|SRL|SUPPRESS|CVF
            rank = (fields[2] == "P") * 4 + (fields[4] == "PF") * 2 + (fields[6] == "Y")
            held = best.get(fields[1])
            if held is None or rank > held[0]:
                best[fields[1]] = (rank, fields[14])
        written: set[tuple[str, str]] = set()
        pref = f"{iri}{PREF} \""
        for lat, (_, text) in best.items():
            slot = slots.get(lat)
            if slot is None and len(slots) < _SLOTS:
                slot = slots[lat] = len(slots)
            if slot is not None:
                bit = 4 << slot
                fresh = not flags & bit
                flags |= bit
            else:
                fresh = (number, lat) not in overflow
                overflow.add((number, lat))
            if fresh:
                ending = endings.get(lat) or endings.setdefault(lat, f'"@{_lang_tag(lat)} .\n')
                out.append(pref + text.translate(_ESCAPE) + ending)
                written.add((lat, text))
        alt = f"{iri}{ALT} \""
        codes: set[tuple[str, str]] = set()
        for fields in rows:
            key = (fields[1], fields[14])
            if key not in written:
                written.add(key)
                ending = endings.get(key[0]) or endings.setdefault(key[0], f'"@{_lang_tag(key[0])} .\n')
                out.append(alt + key[1].translate(_ESCAPE) + ending)
            code = fields[13]
            if code and code != "NOCODE":
                sab = fields[11]
                if (sab, code) in codes:
                    continue
                codes.add((sab, code))
                spec = codes_by_sab.get(sab)
                if spec is not None and spec[1].fullmatch(code):
                    local = code.split(":", 1)[1] if spec[2] and ":" in code else code
                    out.append(f"{iri}{_EXACT} <{spec[0]}{local}> .\n")
                else:
                    out.append(f"{iri}{_NOTATION} \"{(sab + ':' + code).translate(_ESCAPE)}\" .\n")
        state[number] = flags
        return "".join(out)

    # --- MRSTY ------------------------------------------------------------------------------------------------
    def _semantic_types(self, path: Path, problem: Problem, state: bytearray,
                        advance: Callable[[float], None], picked: Iterable[list[str]] | None = None) -> Iterator[str]:
        ns = prefixes()["UMLS"]
        sty_ns = prefixes()["STY"]
        declared: set[str] = set()
        size = len(state)
        for fields in picked if picked is not None else rrf_rows(path, problem, advance):  # CUI|TUI|STN|STY|ATUI|CVF
            cui, tui = fields[0], fields[1]
            flags = _flags(cui, state, size)
            if not flags & _SEEN:
                problem("unknown id", path, row_line(fields), f"{cui} is not a CUI of MRCONSO.RRF")
                continue
            if not flags & _KEPT:
                continue  # the concept was filtered out (--sab, --lang, suppressed)
            if not re.fullmatch(r"T\d{3}", tui):
                problem("malformed TUI", path, row_line(fields), f"{tui!r} is not T followed by 3 digits")
                continue
            out = f"<{ns}{cui}> {TYPE} <{sty_ns}{tui}> .\n"
            if tui not in declared:
                declared.add(tui)
                out += f"<{sty_ns}{tui}> {TYPE} {_CLASS} .\n<{sty_ns}{tui}> {LABEL} {literal_nt(fields[3])} .\n"
            yield out

    # --- MRREL ------------------------------------------------------------------------------------------------
    def _relations(self, path: Path, filters: UmlsFilters, problem: Problem, report: LoadReport, state: bytearray,
                   relations: _Relations, blocks: Iterable[tuple[int, bytes | list[str]]]) -> Iterator[str]:
        """The edges of MRREL's lines (``rrf_blocks``, or numbered texts), one string per block. The hot path of a load (a release
        has 45M+ rows): a block is taken whole by ``umls_edges.block_edges`` (numpy) when no SAB or relation
        filter applies; else, or when that finds a row it does not take, row by row (``_row_edges``)."""
        table = _EdgeTable(relations, "<" + prefixes()["UMLS"])
        whole = None
        if filters.sabs is None and filters.relations is None:
            try:
                import numpy  # noqa: F401  (a dependency; without it, a broken install, rows are read one by one)

                from mirage_kg.loaders.rows import umls_edges

                whole = umls_edges.block_edges
            except ImportError:
                whole = None
        for first, data in blocks:
            # a short block (one picked or damaged line) costs numpy more than the row-by-row reader
            taken = whole(data, state, filters.include_suppressed, table.edge_of, table.head) \
                if whole and isinstance(data, bytes) and len(data) >= 4096 else None
            if taken is not None:
                if table.declared:
                    yield "".join(table.declared)
                    table.declared.clear()
                if taken:
                    yield taken
                continue
            # the texts live on here until the next block is read: freed inside the call, that path measured ~5% slower
            lines = block_lines(data) if isinstance(data, bytes) else data
            out = _row_edges(path, first, lines, filters, problem, report, state, table)
            if out:
                yield out


class _EdgeTable:
    """What MRREL's rows of each ``(REL, RELA)`` become: (predicate, CUI1 is the subject, symmetric), the text
    between an edge's subject and object, and the declarations of relations met for the first time, to be written
    before their edges."""

    def __init__(self, relations: _Relations, head: str) -> None:
        self.relations = relations
        self.head = head  # "<" and the UMLS namespace
        self.edges: dict[tuple[str, str], tuple[str, bool, bool]] = {}
        self.middles: dict[str, str] = {}  # predicate -> "> <predicate> <namespace"
        self.declared: list[str] = []

    def edge_of(self, rel: str, rela: str) -> tuple[str, bool, bool]:
        edge = self.edges.get((rel, rela))
        if edge is None:
            edge = self.edges[(rel, rela)] = _edge(rel, rela, self.relations)
            self.middles.setdefault(edge[0], f"> {edge[0]} {self.head}")
            self.declared.extend(self.relations.pending)
            self.relations.pending.clear()
        return edge


def _row_edges(path: Path, first: int, lines: list[str], filters: UmlsFilters, problem: Problem,
               report: LoadReport, state: bytearray, table: _EdgeTable) -> str:
    """A block of MRREL lines read row by row, its edges (and first-use declarations) joined once: one split, two
    state lookups (``_flags``, inlined) and one cached ``(REL, RELA)`` -> edge lookup a row, with no call per row
    (a release has 45M+ rows)."""
    sabs, wanted, keep_suppressed = filters.sabs, filters.relations, filters.include_suppressed
    edges, middles, declared, edge_of, head = table.edges, table.middles, table.declared, table.edge_of, table.head
    out: list[str] = []
    for offset, text in enumerate(lines):
        # CUI1|AUI1|STYPE1|REL|CUI2|AUI2|STYPE2|RELA|RUI|SRUI|SAB|SL|RG|DIR|SUPPRESS|CVF
        fields = text.split("|")
        if len(fields) != 17 or fields[16]:
            bad_row(path, first + offset, text, len(fields), problem)
            continue
        cui1, rel, cui2, rela = fields[0], fields[3], fields[4], fields[7]
        if sabs is not None and fields[10] not in sabs:
            continue
        if not keep_suppressed and fields[14] in SUPPRESSED:
            continue
        if wanted is not None and rel not in wanted and rela not in wanted:
            continue
        try:  # _flags, inlined
            f1 = state[int(cui1[1:])] if len(cui1) == 8 and cui1[0] == "C" else 0
        except (ValueError, IndexError):
            f1 = 0
        try:
            f2 = state[int(cui2[1:])] if len(cui2) == 8 and cui2[0] == "C" else 0
        except (ValueError, IndexError):
            f2 = 0
        if not f1 & _SEEN or not f2 & _SEEN:
            bad = cui1 if not f1 & _SEEN else cui2
            problem("unknown id", path, first + offset, f"{bad} is not a CUI of MRCONSO.RRF")
            continue
        if not f1 & _KEPT or not f2 & _KEPT:
            continue  # an end was filtered out
        if cui1 == cui2:
            report.skip("relation of a concept to itself (atom-level, not a concept edge)", path,
                        first + offset, f"{rel}/{rela or '-'} {cui1}")
            continue
        edge = edges.get((rel, rela))
        if edge is None:
            edge = edge_of(rel, rela)
            out.extend(declared)
            declared.clear()
        predicate, forward, symmetric = edge
        subject, obj = (cui1, cui2) if forward else (cui2, cui1)
        if symmetric and subject > obj:
            subject, obj = obj, subject
        out.append(head + subject + middles[predicate] + obj + "> .\n")
    return "".join(out)


def _edge(rel: str, rela: str, relations: _Relations) -> tuple[str, bool, bool]:
    """What a row of ``(REL, RELA)`` stores: (predicate, whether CUI1 is the subject, whether symmetric). REL/RELA
    say what CUI2 is to CUI1. PAR/CHD (no RELA, or isa) are ``rdfs:subClassOf`` child -> parent, as is RELA isa
    under another REL (RELA alone says which way); RB/RN with no RELA ``skos:broader`` narrower -> broader;
    anything else the typed relation, its direction and symmetry from ``_Relations``."""
    if rel in ("PAR", "CHD") and rela in ("", "isa", "inverse_isa"):
        return SUBCLASS, rel == "PAR", False
    if rela in ("isa", "inverse_isa"):
        return SUBCLASS, rela == "inverse_isa", False
    if rel in ("RB", "RN") and not rela:
        return _BROADER, rel == "RB", False
    iri, flip, symmetric = relations.resolve(rel, rela)
    return iri, flip, symmetric


class UmlsRows:
    """The loader's passes over the rows an update picked, not over whole files: ``releases.umls_scope`` hands it
    the rows that changed and the rows naming the concepts in scope, and reads back the lines a load would write
    from them. One state byte per CUI as in ``UmlsLoader.lines``; a CUI whose MRCONSO rows are not read here gets
    its status from ``mark`` (what the graph says of it: its rows did not change)."""

    def __init__(self, loader: UmlsLoader, files: dict[str, Path], options: LoadOptions, report: LoadReport) -> None:
        self.loader, self.files = loader, files
        self.filters = UmlsFilters.from_options(options)
        self.options, self.report = options, report
        self.problem = Problem(options, report)
        self.state = bytearray(1 << 16)
        self.inverses = read_inverses(files, self.problem) if "MRREL.RRF" in files else {}
        self.relations = _Relations(options.relation_namespace, self.inverses)

    def picked(self, name: str, pick: Criteria) -> list[list[str]]:
        """The rows of the release's ``name`` that ``pick`` names (``row_pick``), as fields."""
        return list(rrf_rows(self.files[name], self.problem, pick=pick))

    def picked_lines(self, name: str, pick: Criteria,
                     keep: Callable[[bytes], bool] | None = None) -> list[tuple[int, str]]:
        """The lines of the release's ``name`` that ``pick`` names (and ``keep`` keeps, by their raw bytes),
        numbered (MRREL's reader takes lines)."""
        return list(read_picked_lines(self.files[name], self.problem, pick, b"|", numeric_ids=True, keep=keep))

    def lines(self, path: Path, rows: Iterable[tuple[int, bytes]], problem: Problem | None = None) -> list[tuple[int, str]]:
        """Raw numbered lines of ``path`` (rows found changed), checked as a whole read checks them."""
        return list(checked_rows(path, problem or self.problem, rows))

    def source_lines(self, graph: str) -> Iterator[str]:
        for rsab, vsab in sorted(read_sources(self.files, self.problem).items()):
            if self.filters.sabs is None or rsab in self.filters.sabs:
                yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(vsab)} .\n"

    def concept_lines(self, rows: list[list[str]]) -> Iterator[str]:
        """Labels and codes of the concepts of these MRCONSO rows (all of each concept's rows)."""
        ignore = lambda done: None  # noqa: E731  (no progress bar: the scope is small)
        return self.loader._concepts(self.files["MRCONSO.RRF"], self.filters, self.problem, self.state, ignore, rows)

    def type_lines(self, rows: list[list[str]]) -> Iterator[str]:
        """Semantic types from these MRSTY rows (after ``concept_lines`` of their concepts)."""
        ignore = lambda done: None  # noqa: E731
        return self.loader._semantic_types(self.files["MRSTY.RRF"], self.problem, self.state, ignore, rows)

    def edge_lines(self, lines: Iterable[tuple[int, str]], *, path: Path | None = None,
                   quiet: bool = False) -> Iterator[str]:
        """The edges (and first-use relation declarations) of these MRREL lines (of ``path``, the release's own
        MRREL unless said). ``quiet``: lines the previous load read already (its problems were reported then;
        declarations go to a relation table of their own)."""
        if quiet:
            report = LoadReport()
            problem = Problem(LoadOptions(lenient=True), report)
            relations = _Relations(self.options.relation_namespace, self.inverses)
        else:
            report, problem, relations = self.report, self.problem, self.relations
        return self.loader._relations(path or self.files["MRREL.RRF"], self.filters, problem, report, self.state,
                                      relations, ((number, [text]) for number, text in lines))

    def seen(self, cui: str) -> bool:
        """Whether a MRCONSO row read here names the CUI (or ``mark`` said so)."""
        return bool(_flags(cui, self.state, len(self.state)) & _SEEN)

    def kept(self, cui: str) -> bool:
        """Whether the filters keep the concept (it has a row they let through)."""
        return bool(_flags(cui, self.state, len(self.state)) & _KEPT)

    def mark(self, cui: str, kept: bool) -> None:
        """A CUI of MRCONSO whose rows are not read here: kept or not, as the graph says."""
        if len(cui) == 8 and cui[0] == "C" and cui[1:].isdigit():
            number = int(cui[1:])
            if number >= len(self.state):
                self.state.extend(bytes(max(number + 1 - len(self.state), len(self.state))))
            self.state[number] |= _SEEN | (_KEPT if kept else 0)


def _lang_tag(lat: str) -> str:
    """The language tag of a LAT: ``ENG`` -> ``en``; an unlisted LAT lower-cased; a malformed one ``und``."""
    tag = LAT_TO_LANG.get(lat)
    if tag is None:
        tag = lat.lower() if lat.isalpha() and lat.isascii() and 2 <= len(lat) <= 8 else "und"
    return tag


def _flags(cui: str, state: bytearray, size: int) -> int:
    """The state byte of a CUI (0 for a malformed or never-seen one)."""
    if len(cui) != 8 or cui[0] != "C" or not cui[1:].isdigit():
        return 0
    number = int(cui[1:])
    return state[number] if number < size else 0
