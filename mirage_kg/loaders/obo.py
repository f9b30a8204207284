"""OBO ontologies (HPO, MONDO, DOID...) read with pronto, and the ontology-term RDF model the OWL loader shares:
labels, synonyms, definitions, is_a, typed relationships, and xrefs mapped to the conventional CURIE prefixes.

pronto reports neither a bad byte's line nor a dangling reference's line, so a quick scan of the lines runs first:
it names file and line for each problem (or drops the line with ``--lenient``) before pronto parses the text."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mirage_kg.errors import InputError, MissingExtraError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, Problem, checked_lang, literal_nt, read_lines
from mirage_kg.loaders.rows.hygiene import open_input
from mirage_kg.loaders.nt_terms import (
    ACTIVE,
    ALT,
    CONCEPT,
    DEFINITION,
    LABEL,
    OBJECT_PROPERTY,
    PREF,
    RELATION,
    SOURCE_VERSION,
    SUBCLASS,
    TYPE,
)
from mirage_kg.model.namespaces import GRAPH, MKG, OWL, SKOS_CLOSE, SKOS_EXACT, mint, prefixes
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    import pronto

OBO_PURL = "http://purl.obolibrary.org/obo/"
OBO_IN_OWL = "http://www.geneontology.org/formats/oboInOwl#"

_EXACT = iri_ref(SKOS_EXACT)
_CLOSE = iri_ref(SKOS_CLOSE)
_DB_XREF = iri_ref(OBO_IN_OWL + "hasDbXref")
_DEPRECATED = iri_ref(OWL + "deprecated")
_FALSE = '"false"^^<http://www.w3.org/2001/XMLSchema#boolean>'
_TRUE = '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>'

# --- xrefs ----------------------------------------------------------------------------------------------------
# The prefixes sources write in xrefs, folded to the conventional one (upper-cased keys). SNOMEDCT_US_2023_03_01
# and friends are matched by their start in ``xref_target``.
XREF_PREFIXES: dict[str, str] = {
    "UMLS": "UMLS", "UMLS_CUI": "UMLS", "UMLSCUI": "UMLS", "CUI": "UMLS",
    "SNOMEDCT": "SNOMEDCT", "SNOMEDCT_US": "SNOMEDCT", "SNOMED": "SNOMEDCT", "SNOMED_CT": "SNOMEDCT",
    "SCTID": "SNOMEDCT", "SCT": "SNOMEDCT",
    "MESH": "MESH", "MSH": "MESH",
    "ICD10CM": "ICD10CM", "ICD-10-CM": "ICD10CM", "ICD10_CM": "ICD10CM",
    "OMIM": "OMIM", "MIM": "OMIM",
    "ORPHA": "ORPHA", "ORPHANET": "ORPHA", "ORDO": "ORPHA",
    "MONDO": "MONDO", "DOID": "DOID", "NCIT": "NCIT", "NCI": "NCIT", "HP": "HP", "HPO": "HP",
    "DECIPHER": "DECIPHER",
}
# What a local id must look like for the mapping to be trusted (an OMIM phenotypic series "PS123" is not an entry).
_LOCAL_SHAPE: dict[str, re.Pattern[str]] = {
    "UMLS": re.compile(r"C\d{7}"),
    "SNOMEDCT": re.compile(r"\d{6,18}"),
    "MESH": re.compile(r"[CDQ]\d{6,9}"),
    "ICD10CM": re.compile(r"[A-Z]\d[0-9A-Z](\.[0-9A-Z]{1,4})?"),
    "OMIM": re.compile(r"\d{6}"),
    "ORPHA": re.compile(r"\d+"),
    "MONDO": re.compile(r"\d{7}"),
    "DOID": re.compile(r"\d+"),
    "NCIT": re.compile(r"C\d+"),
    "HP": re.compile(r"\d{7}"),
    "DECIPHER": re.compile(r"\d+"),
}
# Qualifiers that make an xref an exact match (MONDO writes {source="MONDO:equivalentTo"}).
_EXACT_QUALIFIER = re.compile(r"equivalentTo|exactMatch|MONDO:equivalentObsolete", re.IGNORECASE)


def xref_target(xref: str) -> str | None:
    """The IRI an xref such as ``UMLS_CUI:C0015967``, ``SNOMEDCT_US_2023_03_01:386661006`` or ``MSH:D005334``
    points to under the conventional prefix (UMLS:, SNOMEDCT:, MESH:...), or None when it maps to none."""
    prefix, sep, local = xref.strip().partition(":")
    if not sep or not local:
        return None
    key = prefix.upper()
    target = XREF_PREFIXES.get(key)
    if target is None and key.startswith(("SNOMEDCT_", "SCTID_")):
        target = "SNOMEDCT"
    if target is None:
        return None
    if target in ("HP", "MONDO") and local.upper().startswith(target + "_"):
        local = local[len(target) + 1:]
    if target == "ORPHA" and local.lower().startswith("orphanet_"):
        local = local[len("orphanet_"):]
    if target == "MESH" and local.upper().startswith("MESH:"):
        local = local[5:]
    shape = _LOCAL_SHAPE.get(target)
    if shape is not None and not shape.fullmatch(local):
        return None
    return prefixes()[target] + local


def term_iri(curie: str, namespace: str) -> str:
    """An ontology id as an IRI: known prefixes (HP:, MONDO:...) by the shipped map, other ``PREFIX:local`` ids as
    OBO PURLs, absolute IRIs as they are, bare ids minted in ``namespace``."""
    text = curie.strip()
    if text.startswith(("http://", "https://", "urn:")):
        return text
    prefix, sep, local = text.partition(":")
    if sep and local:
        ns = prefixes().get(prefix)
        if ns is not None:
            return mint(ns, local)
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", prefix) and re.fullmatch(r"[A-Za-z0-9_.-]+", local):
            return f"{OBO_PURL}{prefix}_{local}"
    return mint(namespace, text)


# --- the shared term model ----------------------------------------------------------------------------------------
@dataclass
class TermRecord:
    """One ontology class as the loaders emit it (IRIs already resolved)."""

    iri: str
    name: str | None = None
    name_lang: str | None = None
    synonyms: list[tuple[str, str | None]] = field(default_factory=list)
    definition: str | None = None
    parents: list[str] = field(default_factory=list)
    relations: list[tuple[str, str]] = field(default_factory=list)  # (relation IRI, target IRI)
    xrefs: list[tuple[str, bool]] = field(default_factory=list)  # (xref as written, exact?)
    obsolete: bool = False


class TermWriter:
    """N-Triples for ontology terms, declaring each relation once (with its label) and mapping xrefs."""

    def __init__(self, lang: str | None) -> None:
        self.lang = checked_lang(lang)
        self.declared: set[str] = set()

    def relation(self, iri: str, label: str, inverse: str | None = None) -> str:
        if iri in self.declared:
            return ""
        self.declared.add(iri)
        ref = iri_ref(iri)
        out = f"{ref} {TYPE} {RELATION} .\n{ref} {TYPE} {OBJECT_PROPERTY} .\n{ref} {LABEL} {literal_nt(label)} .\n"
        if inverse:
            out += f"{ref} {iri_ref(MKG + 'inverseLabel')} {literal_nt(inverse)} .\n"
        return out

    def term(self, record: TermRecord) -> str:
        ref = iri_ref(record.iri)
        out = [f"{ref} {TYPE} {CONCEPT} .\n"]
        if record.obsolete:
            out.append(f"{ref} {ACTIVE} {_FALSE} .\n{ref} {_DEPRECATED} {_TRUE} .\n")
        if record.name:
            out.append(f"{ref} {PREF} {literal_nt(record.name, record.name_lang or self.lang)} .\n")
        seen = {(record.name, record.name_lang or self.lang)}
        for text, lang in record.synonyms:
            key = (text, lang or self.lang)
            if text and key not in seen:
                seen.add(key)
                out.append(f"{ref} {ALT} {literal_nt(text, lang or self.lang)} .\n")
        if record.definition:
            out.append(f"{ref} {DEFINITION} {literal_nt(record.definition, self.lang)} .\n")
        for parent in record.parents:
            out.append(f"{ref} {SUBCLASS} {iri_ref(parent)} .\n")
        for rel, target in record.relations:
            out.append(f"{ref} {iri_ref(rel)} {iri_ref(target)} .\n")
        for xref, exact in record.xrefs:
            mapped = xref_target(xref)
            if mapped is None:
                out.append(f"{ref} {_DB_XREF} {literal_nt(xref)} .\n")
            else:
                out.append(f"{ref} {_EXACT if exact else _CLOSE} {iri_ref(mapped)} .\n")
        return "".join(out)


def readable(identifier: str) -> str:
    """``part_of`` -> ``part of`` for a relation with no name."""
    return identifier.replace("_", " ")


# --- the line scan ------------------------------------------------------------------------------------------------
_ID = re.compile(r"id:\s*(\S+)")
_IS_A = re.compile(r"is_a:\s*(\S+)")
_RELATIONSHIP = re.compile(r"relationship:\s*(\S+)\s+(\S+)")
_XREF = re.compile(r"xref:\s*(\S+)(.*)")
_SYNONYM = re.compile(r'synonym:\s*"(?:[^"\\]|\\.)*"\s+([A-Z_]+)(?:\s+([^\s\[]+))?\s*\[')
_SYNONYM_TYPEDEF = re.compile(r"synonymtypedef:\s*(\S+)")
_TREAT_EQUIVALENT = re.compile(r"treat-xrefs-as-equivalent:\s*(\S+)")
# Relations pronto knows without a [Typedef] stanza.
_BUILTIN_RELATIONS = {"is_a"}


@dataclass
class OboScan:
    """What the line scan learnt: the cleaned text for pronto, exact xrefs, and the header's version."""

    text: list[bytes]
    exact_xrefs: set[tuple[str, str]]
    exact_prefixes: set[str]
    data_version: str | None
    ontology: str | None


@dataclass
class _OboHeader:
    """What the header clauses (the lines before the first stanza) declare."""

    data_version: str | None = None
    ontology: str | None = None
    exact_prefixes: set[str] = field(default_factory=set)  # treat-xrefs-as-equivalent
    synonym_types: set[str] = field(default_factory=set)  # synonymtypedef

    def read(self, text: str) -> None:
        if text.startswith("data-version:"):
            self.data_version = text.split(":", 1)[1].strip()
        elif text.startswith("ontology:"):
            self.ontology = text.split(":", 1)[1].strip()
        elif (m := _TREAT_EQUIVALENT.match(text)) is not None:
            self.exact_prefixes.add(m.group(1))
        elif (m := _SYNONYM_TYPEDEF.match(text)) is not None:
            self.synonym_types.add(m.group(1))


def scan_obo(path: Path, problem: Problem, advance: Callable[[float], None]) -> OboScan:
    """Check every line (UTF-8, references to undeclared terms and relations) before pronto reads the file."""
    kept: list[bytes] = []
    terms: set[str] = set()
    typedefs: set[str] = set(_BUILTIN_RELATIONS)
    references: list[tuple[int, str, str]] = []  # (line, kind, id)
    exact: set[tuple[str, str]] = set()
    header = _OboHeader()
    stanza = ""
    current = ""
    number = 0
    first_line: dict[str, int] = {}  # term id -> the line of the id: clause of its [Term] stanza
    stanza_line = 0  # where the current stanza began
    dropping = False  # lenient: the lines of a repeated [Term] stanza are blanked
    for number, text in read_lines(path, problem):
        while len(kept) < number - 1:  # a line read_lines dropped (bad UTF-8, lenient): keep numbering
            kept.append(b"\n")
        kept.append(text.encode("utf-8") + b"\n")
        if number % 8192 == 0:
            advance(8192)
        if text[:1] == "[":
            dropping = False
        if dropping:
            kept[number - 1] = b"\n"
            continue
        if not text or text[0] == "!":
            continue
        if text[0] == "[":
            stanza = text.strip()
            current = ""
            stanza_line = number
            continue
        if not stanza:
            header.read(text)
            continue
        if text.startswith("id:"):
            m = _ID.match(text)
            if m:
                current = m.group(1)
                if stanza == "[Term]" and current in first_line:
                    # pronto would let this stanza's name replace the first one's, silently
                    problem("duplicate id", path, number,
                            f"{current} already has a [Term] stanza (line {first_line[current]}); merge the two "
                            "into one (with --lenient this one is skipped)")
                    for line in range(stanza_line, number + 1):
                        kept[line - 1] = b"\n"
                    dropping = True
                    continue
                if stanza == "[Term]":
                    first_line[current] = number
                (terms if stanza == "[Term]" else typedefs if stanza == "[Typedef]" else set()).add(current)
            continue
        if stanza != "[Term]":
            continue
        if text.startswith("is_a:"):
            m = _IS_A.match(text)
            if m:
                references.append((number, "term", m.group(1)))
        elif text.startswith("relationship:"):
            m = _RELATIONSHIP.match(text)
            if m:
                references.append((number, "relation", m.group(1)))
                references.append((number, "term", m.group(2)))
        elif text.startswith("synonym:"):
            m = _SYNONYM.match(text)
            if m and m.group(2):
                references.append((number, "synonym type", m.group(2)))
        elif text.startswith("xref:"):
            m = _XREF.match(text)
            if m and "{" in m.group(2) and _EXACT_QUALIFIER.search(m.group(2)):
                exact.add((current, m.group(1)))
    while len(kept) < number:
        kept.append(b"\n")
    declared = {"term": (terms, "term"), "relation": (typedefs, "relation ([Typedef])"),
                "synonym type": (header.synonym_types, "synonym type (synonymtypedef: in the header)")}
    _drop_dangling(path, problem, kept, references, declared)
    return OboScan(kept, exact, header.exact_prefixes, header.data_version, header.ontology)


def _drop_dangling(path: Path, problem: Problem, kept: list[bytes], references: list[tuple[int, str, str]],
                   declared: dict[str, tuple[set[str], str]]) -> None:
    """A problem for each reference to an id the file does not declare; lenient, its clause is blanked."""
    for line, kind, ident in references:
        known, what = declared[kind]
        if ident not in known:
            problem("unknown id", path, line, f"{ident} is not a declared {what} in this file")
            kept[line - 1] = b"\n"  # lenient: drop the dangling clause


def parse_with_pronto(path: Path, scan: OboScan, problem: Problem) -> pronto.Ontology:
    """pronto's Ontology over the scanned text; a syntax error names its line (and, lenient, drops it)."""
    try:
        import pronto
    except ModuleNotFoundError:
        raise MissingExtraError("pronto", "owl") from None
    for _ in range(1000):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pronto's encoding guess and its own notes; we checked UTF-8
                return pronto.Ontology(io.BytesIO(b"".join(scan.text)))
        except SyntaxError as exc:
            line = exc.lineno
            problem("OBO syntax error", path, line, str(exc.msg if hasattr(exc, "msg") else exc))
            if line is None or not 0 < line <= len(scan.text) or scan.text[line - 1] == b"\n":
                raise InputError(f"OBO syntax error: {exc}", path, line) from exc
            scan.text[line - 1] = b"\n"
        except (KeyError, ValueError) as exc:  # pronto's own checks, past our scan
            raise InputError(f"pronto cannot read the ontology: {exc!r}", path) from exc
    raise InputError("too many syntax errors; is this an OBO file?", path)


def obo_graph_name(ontology: str | None, data_version: str | None, path: Path) -> str:
    """``GRAPH:obo/hp/2025-01-16`` from the header (the file name when the header says nothing)."""
    name = (ontology or path.stem).removesuffix(".obo").removesuffix(".owl")
    version = data_version or ""
    match = re.search(r"\d{4}-\d{2}-\d{2}", version)
    release = match.group(0) if match else version.rsplit("/", 1)[-1]
    return GRAPH + "obo/" + "/".join(mint("", s) for s in (name, release) if s)


class OboLoader(Loader):
    name = "obo"
    description = "OBO 1.4 ontologies (HPO, MONDO, DOID...) via pronto"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if path.is_dir():
            return False
        return path.suffix.lower() == ".obo" or head.startswith(b"format-version:")

    def records(self, ontology: pronto.Ontology, scan: OboScan, options: LoadOptions,
                writer: TermWriter) -> Iterator[str]:
        """Terms as N-Triples; obsolete terms (and edges to them) are left out unless ``keep_inactive``."""
        keep_obsolete = bool(options.extra.get("keep_inactive"))
        namespace = options.namespace
        relation_iris: dict[str, str] = {}
        for rel in ontology.relationships():
            relation_iris[rel.id] = self._relation_iri(rel, options)
        obsolete = {t.id for t in ontology.terms() if t.obsolete}
        lang = writer.lang
        for term in ontology.terms():
            if term.obsolete and not keep_obsolete:
                continue
            record = TermRecord(term_iri(term.id, namespace), name=term.name, obsolete=term.obsolete)
            record.synonyms = [(s.description, lang) for s in sorted(term.synonyms, key=lambda s: s.description)]
            record.definition = str(term.definition) if term.definition else None
            for parent in sorted(term.superclasses(distance=1, with_self=False), key=lambda t: t.id):
                if parent.id in obsolete and not keep_obsolete:
                    continue
                record.parents.append(term_iri(parent.id, namespace))
            header = ""
            for rel, targets in sorted(term.relationships.items(), key=lambda kv: kv[0].id):
                rel_iri = relation_iris.get(rel.id) or self._relation_iri(rel, options)
                header += writer.relation(rel_iri, rel.name or readable(rel.id))
                for target in sorted(targets, key=lambda t: t.id):
                    if target.id in obsolete and not keep_obsolete:
                        continue
                    record.relations.append((rel_iri, term_iri(target.id, namespace)))
            for xref in sorted(term.xrefs, key=lambda x: x.id):
                prefix = xref.id.partition(":")[0]
                record.xrefs.append((xref.id, (term.id, xref.id) in scan.exact_xrefs or prefix in scan.exact_prefixes))
            yield header + writer.term(record)

    @staticmethod
    def _relation_iri(rel: pronto.Relationship, options: LoadOptions) -> str:
        """A relation's IRI: its own CURIE, else an RO/BFO xref (``part_of`` -> BFO:0000050), else minted."""
        ident: str = rel.id
        if ":" in ident:
            return term_iri(ident, options.relation_namespace)
        for xref in sorted(rel.xrefs, key=lambda x: x.id):
            if xref.id.split(":", 1)[0] in ("RO", "BFO"):
                return term_iri(xref.id, options.relation_namespace)
        return mint(options.relation_namespace, ident)

    def lines(self, path: Path, options: LoadOptions, report: LoadReport, graph: str,
              advance: Callable[[float], None]) -> Iterator[str]:
        problem = Problem(options, report)
        scan = scan_obo(path, problem, advance)
        ontology = parse_with_pronto(path, scan, problem)
        version = scan.data_version or getattr(ontology.metadata, "data_version", None)
        if version:
            yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(version)} .\n"
        try:
            yield from self.records(ontology, scan, options, TermWriter(options.lang))
        except (KeyError, ValueError) as exc:  # pronto checks some clauses only when they are read
            raise InputError(f"pronto cannot read the ontology: {exc}", path) from exc

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        if not path.is_file():
            raise InputError("no such OBO file", path)
        graph = options.graph or graph_for_obo(path)
        with progress_bar(f"loading {path.name}", total=count_newlines(path), unit="lines") as advance:
            receipt = store.load(self.lines(path, options, report, graph, advance),
                                 media_type="application/n-triples", graph=graph, source=str(path))
        return [receipt]


def graph_for_obo(path: Path) -> str:
    """The graph name from the header lines only (read before the load starts)."""
    ontology = version = None
    with open_input(path) as handle:
        for raw in handle:
            if raw.startswith(b"["):
                break
            text = raw.decode("utf-8", "replace").strip()
            if text.startswith("data-version:"):
                version = text.split(":", 1)[1].strip()
            elif text.startswith("ontology:"):
                ontology = text.split(":", 1)[1].strip()
    return obo_graph_name(ontology, version, path)


def count_newlines(path: Path) -> int:
    with open_input(path) as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
