"""OWL ontologies (RDF/XML, OWL/XML, N-Triples) read with owlready2 and written in the same term model as OBO:
named classes, labels, synonyms, definitions, named superclasses, ``some`` restrictions as typed edges, xrefs."""

from __future__ import annotations

import io
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from mirage_kg.errors import InputError, MissingExtraError, QueryError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, Problem, literal_nt
from mirage_kg.loaders.rows.hygiene import check_xml_entities, checked_bytes, open_input
from mirage_kg.loaders.nt_terms import SOURCE_VERSION
from mirage_kg.loaders.obo import OBO_IN_OWL, OBO_PURL, TermRecord, TermWriter, obo_graph_name, readable
from mirage_kg.model.namespaces import OWL, RDFS_LABEL, SKOS, SKOS_ALT, SKOS_DEFINITION, SKOS_PREF
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

_NAME_PROPERTIES = (RDFS_LABEL, SKOS_PREF)
_SYNONYM_PROPERTIES = (OBO_IN_OWL + "hasExactSynonym", OBO_IN_OWL + "hasRelatedSynonym",
                       OBO_IN_OWL + "hasBroadSynonym", OBO_IN_OWL + "hasNarrowSynonym", SKOS_ALT)

_DEFINITION_PROPERTIES = (OBO_PURL + "IAO_0000115", SKOS_DEFINITION)
_XREF = OBO_IN_OWL + "hasDbXref"
_EXACT_IRI = (SKOS + "exactMatch",)
_CLOSE_IRI = (SKOS + "closeMatch",)
_DEPRECATED = OWL + "deprecated"
_OWL_SUFFIXES = (".owl", ".rdf", ".owx", ".ofn")

#: an owlready2 World, Ontology or entity: owlready2 ships no types
OwlObject = Any


def _owlready() -> ModuleType:
    try:
        import owlready2
    except ModuleNotFoundError:
        raise MissingExtraError("owlready2", "owl") from None
    return owlready2


class OwlLoader(Loader):
    name = "owl"
    description = "OWL ontologies (RDF/XML, OWL/XML) via owlready2"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if path.is_dir():
            return False
        return path.suffix.lower() in (".owl", ".owx") or (
            path.suffix.lower() in (".rdf", ".xml") and b"http://www.w3.org/2002/07/owl#" in head)

    def _checked_bytes(self, path: Path, problem: Problem, advance: Callable[[float], None]) -> bytes:
        """The file, with the shared input checks (encoding, control bytes, each bad UTF-8 line named; lenient,
        a bad line is blanked so the XML parser's line numbers stay the file's)."""
        data = checked_bytes(path, problem)
        advance(len(data))
        return data

    def _parse(self, path: Path, data: bytes) -> tuple[OwlObject, OwlObject]:
        owlready2 = _owlready()
        world = owlready2.World()
        added = str(path.parent.resolve())
        owlready2.onto_path.append(added)  # imports resolve beside the file, offline
        if data.lstrip()[:1] == b"<":
            check_xml_entities(path, data)
        seen: list[BaseException] = []  # owlready2 hands its parser's error to sys.excepthook before raising its own
        hook = sys.excepthook
        sys.excepthook = lambda kind, value, tb: seen.append(value)
        try:
            onto = world.get_ontology(path.resolve().as_uri()).load(fileobj=io.BytesIO(data))
        except Exception as exc:  # owlready2 raises its own errors and its XML parser's
            cause = next((e.__cause__ for e in seen if e.__cause__ is not None), None) or exc.__cause__
            text = f"{cause} ({exc_text(exc)})" if cause is not None else exc_text(exc)
            match = re.search(r"line (\d+)", text)
            raise InputError(f"cannot read OWL: {text}", path, int(match.group(1)) if match else None) from None
        finally:
            sys.excepthook = hook
            owlready2.onto_path.remove(added)
        return world, onto

    def records(self, world: OwlObject, options: LoadOptions, writer: TermWriter) -> Iterator[str]:
        owlready2 = _owlready()
        lang = writer.lang

        def values(prop: str) -> dict[str, list[object]]:
            found: dict[str, list[object]] = defaultdict(list)
            for subject, value in world.sparql(f"SELECT ?s ?o WHERE {{ ?s <{prop}> ?o }}", error_on_undefined_entities=False):
                iri = getattr(subject, "iri", None)
                if iri:
                    found[iri].append(value)
            return found

        def text_of(value: object) -> tuple[str, str | None]:
            return str(value), getattr(value, "lang", None) or None

        names = [values(p) for p in _NAME_PROPERTIES]
        synonyms = [values(p) for p in _SYNONYM_PROPERTIES]
        definitions = [values(p) for p in _DEFINITION_PROPERTIES]
        xrefs = values(_XREF)
        exact = [values(p) for p in _EXACT_IRI]
        close = [values(p) for p in _CLOSE_IRI]
        deprecated = {iri for iri, vals in values(_DEPRECATED).items() if any(v is True or str(v).lower() == "true"
                                                                               for v in vals)}
        exact_xrefs = self._exact_xrefs(world)
        keep_obsolete = bool(options.extra.get("keep_inactive"))
        thing = owlready2.Thing
        some = owlready2.SOME
        classes = sorted((c for c in world.classes() if getattr(c, "iri", None)), key=lambda c: c.iri)
        for cls in classes:
            iri = cls.iri
            if iri in deprecated and not keep_obsolete:
                continue
            record = TermRecord(iri, obsolete=iri in deprecated)
            labels = [text_of(v) for table in names for v in table.get(iri, [])]
            if labels:
                labels.sort(key=lambda t: (t[1] not in (lang, None), t[1] is not None, t[0]))
                record.name, record.name_lang = labels[0]
                record.synonyms.extend(labels[1:])
            record.synonyms.extend(sorted(text_of(v) for table in synonyms for v in table.get(iri, [])))
            defs = [str(v) for table in definitions for v in table.get(iri, [])]
            record.definition = min(defs) if defs else None
            header = ""
            for parent in cls.is_a:
                if isinstance(parent, owlready2.ThingClass):
                    if parent is thing or not getattr(parent, "iri", None):
                        continue
                    if parent.iri in deprecated and not keep_obsolete:
                        continue
                    record.parents.append(parent.iri)
                elif isinstance(parent, owlready2.Restriction) and parent.type == some:
                    prop, target = parent.property, parent.value
                    if not getattr(prop, "iri", None) or not isinstance(target, owlready2.ThingClass) \
                            or not getattr(target, "iri", None):
                        continue  # anonymous or nested expressions have no single edge to write
                    if target.iri in deprecated and not keep_obsolete:
                        continue
                    label = next((str(v) for v in prop.label), None) or readable(prop.name)
                    header += writer.relation(prop.iri, label)
                    record.relations.append((prop.iri, target.iri))
            record.parents.sort()
            record.relations.sort()
            for xref in sorted(str(v) for v in xrefs.get(iri, [])):
                record.xrefs.append((xref, (iri, xref) in exact_xrefs))
            body = writer.term(record)
            for table, predicate in ((exact, SKOS + "exactMatch"), (close, SKOS + "closeMatch")):
                for target in sorted({str(getattr(v, "iri", v)) for t in table for v in t.get(iri, [])}):
                    if target.startswith(("http://", "https://", "urn:")):
                        body += f"{iri_ref(iri)} {iri_ref(predicate)} {iri_ref(target)} .\n"
            yield header + body

    @staticmethod
    def _exact_xrefs(world: OwlObject) -> set[tuple[str, str]]:
        """xrefs whose axiom annotation says they are exact (MONDO: ``source "MONDO:equivalentTo"``)."""
        query = f"""SELECT ?s ?x ?src WHERE {{ ?a <{OWL}annotatedSource> ?s ; <{OWL}annotatedProperty> <{_XREF}> ;
                    <{OWL}annotatedTarget> ?x ; <{OBO_IN_OWL}source> ?src }}"""
        found = set()
        for subject, xref, source in world.sparql(query, error_on_undefined_entities=False):
            if re.search(r"equivalentTo|exactMatch", str(source), re.IGNORECASE) and getattr(subject, "iri", None):
                found.add((subject.iri, str(xref)))
        return found

    def lines(self, path: Path, options: LoadOptions, report: LoadReport, graph: str,
              advance: Callable[[float], None]) -> Iterator[str]:
        problem = Problem(options, report)
        world, _ = self._parse(path, self._checked_bytes(path, problem, advance))
        version = None
        for _, value in world.sparql(f"SELECT ?o ?v WHERE {{ ?o <{OWL}versionInfo> ?v }}",
                                      error_on_undefined_entities=False):
            version = str(value)
        if version:
            yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(version)} .\n"
        try:
            yield from self.records(world, options, TermWriter(options.lang))
        except QueryError as exc:  # an IRI in the file that N-Triples cannot carry
            raise InputError(f"cannot write this ontology as RDF: {exc}", path) from exc
        finally:
            world.close()

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        if not path.is_file():
            raise InputError("no such OWL file", path)
        if path.stat().st_size == 0:
            raise InputError("the file is empty", path)
        graph = options.graph or owl_graph_name(path)
        with progress_bar(f"loading {path.name}", total=path.stat().st_size, unit="bytes") as advance:
            receipt = store.load(self.lines(path, options, report, graph, advance),
                                 media_type="application/n-triples", graph=graph, source=str(path))
        return [receipt]


def exc_text(exc: BaseException) -> str:
    """owlready2's message without the tuples it wraps it in (``('error', ('RDF/XML parsing error ...',))``)."""
    texts = re.findall(r"'((?:[^'\\]|\\.)*)'", str(exc))
    useful = [t for t in texts if t not in ("error",)]
    return (useful[-1] if useful else str(exc)).replace(" in file ???", "")


def owl_graph_name(path: Path) -> str:
    """``GRAPH:obo/<name>/<release>``: the name from the ontology IRI (``.../tst.owl`` -> tst, else the file name),
    the release from the versionIRI or versionInfo, read from the file's first 64 KiB."""
    with open_input(path) as handle:
        head = handle.read(65536).decode("utf-8", "replace")
    version = None
    match = re.search(r'versionIRI\s+rdf:resource="([^"]+)"', head) or re.search(r"<owl:versionInfo[^>]*>([^<]+)<", head)
    if match:
        version = match.group(1)
    name = path.stem
    ontology = re.search(r'<owl:Ontology\s+rdf:about="([^"]+)"', head)
    if ontology:
        name = ontology.group(1).rstrip("/#").rsplit("/", 1)[-1] or name
    for suffix in _OWL_SUFFIXES:
        name = name.removesuffix(suffix)
    return obo_graph_name(name, version, path)
