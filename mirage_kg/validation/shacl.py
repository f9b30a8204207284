"""SHACL validation with pySHACL: the shapes shipped in ``ontologies/shapes.ttl`` plus the user's own.

pySHACL works on an in-memory rdflib graph and is slow on a whole KG, so it gets only the triples the shapes can
look at: every triple whose predicate the shapes graph mentions, plus ``rdf:type`` and ``rdfs:subClassOf`` (for
class targets). For shapes made of targets and property paths this subset gives exactly the results the whole
graph would; shapes that can see any predicate (``sh:closed``, SHACL-SPARQL constraints or targets) get the
whole dataset instead. The manifest graph is never included; the schema graph always is."""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from mirage_kg.errors import InputError, MissingExtraError
from mirage_kg.model.namespaces import MKG, RDF_TYPE, RDFS_SUBCLASS, compress, ontologies_dir
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.validation.report import Example, Finding, Level

if TYPE_CHECKING:
    import rdflib

SH = "http://www.w3.org/ns/shacl#"
_LEVELS: dict[str, Level] = {SH + "Violation": "error", SH + "Warning": "warning", SH + "Info": "info"}
# Shapes that read predicates the shapes graph does not name: the predicate subset would miss their triples.
_OPEN_WORLD = ("closed", "sparql", "SPARQLTarget", "SPARQLTargetType", "target", "js", "JSConstraint", "JSTarget")
_FORMATS = {".ttl": "turtle", ".nt": "nt", ".n3": "n3", ".rdf": "xml", ".owl": "xml", ".xml": "xml",
            ".jsonld": "json-ld", ".trig": "trig", ".nq": "nquads"}


def shipped_shapes() -> Path:
    return ontologies_dir() / "shapes.ttl"


def _rdflib() -> Any:
    try:
        import rdflib
    except ImportError as exc:  # pragma: no cover - rdflib is a core dependency
        raise MissingExtraError("rdflib", "all") from exc
    return rdflib


def read_shapes(paths: Iterable[str | Path], *, shipped: bool = True) -> "rdflib.Graph":
    """One rdflib graph of the shipped shapes (unless ``shipped`` is false) and the files in ``paths``.

    A file that does not parse, or that holds no shape, is an ``InputError`` naming it."""
    rdflib = _rdflib()
    graph = rdflib.Graph()
    files = ([shipped_shapes()] if shipped else []) + [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise InputError("no such shapes file", path)
        fmt = _FORMATS.get(path.suffix.lower(), "turtle")
        one = rdflib.Graph()
        try:
            one.parse(path, format=fmt)
        except Exception as exc:  # rdflib raises many types for bad syntax
            raise InputError(f"cannot read SHACL shapes ({fmt}): {exc}", path) from exc
        if not any(str(p).startswith(SH) or str(o).startswith(SH) for _, p, o in one):
            raise InputError("the file holds no SHACL shapes (nothing in the sh: namespace)", path)
        graph += one
    return graph


def _needs_whole_graph(shapes: "rdflib.Graph") -> bool:
    rdflib = _rdflib()
    for name in _OPEN_WORLD:
        prop = rdflib.URIRef(SH + name)
        for value in shapes.objects(None, prop):
            if name != "closed" or isinstance(value, rdflib.Literal) and value.toPython() is True:
                return True
        if (None, rdflib.RDF.type, prop) in shapes:
            return True
    return False


def _mentions(shapes: "rdflib.Graph") -> tuple[set[str], bool]:
    """IRIs the shapes name (paths, targets, classes...), and whether rdf:type or rdfs:subClassOf is among them
    as more than the type of a shape, i.e. read as a path or target, in which case every such triple counts."""
    rdflib = _rdflib()
    iris: set[str] = set()
    for s, p, o in shapes:
        for term in (s, o) if p == rdflib.RDF.type else (s, p, o):
            if isinstance(term, rdflib.URIRef) and not str(term).startswith(SH):
                iris.add(str(term))
    whole_hierarchy = bool({RDF_TYPE, RDFS_SUBCLASS} & iris)
    return iris - {RDF_TYPE, RDFS_SUBCLASS}, whole_hierarchy


def _descendants(store: Store, roots: set[str]) -> set[str]:
    """``roots`` and every class below one of them, walked down one level per query (a few index lookups)."""
    seen, frontier = set(roots), sorted(roots)
    while frontier:
        rows = store.select(f"SELECT DISTINCT ?s WHERE {{ VALUES ?o {{ {' '.join(iri_ref(c) for c in frontier)} }} "
                            f"?s {iri_ref(RDFS_SUBCLASS)} ?o FILTER(isIRI(?s)) }}")
        frontier = sorted({r["s"].value for r in rows} - seen)
        seen.update(frontier)
    return seen


def _to_rdflib(term: Term, iris: dict[str, Any] | None = None) -> Any:
    """A term as an rdflib one; ``iris`` caches IRIs, which repeat (a subject per label, each type)."""
    rdflib = _rdflib()
    if term.kind == "uri":
        if iris is None:
            return rdflib.URIRef(term.value)
        iri = iris.get(term.value)
        if iri is None:
            iri = iris[term.value] = rdflib.URIRef(term.value)
        return iri
    if term.kind == "bnode":
        return rdflib.BNode(term.value)
    if term.lang:
        return rdflib.Literal(term.value, lang=term.lang)
    # normalize=False keeps an ill-typed lexical form ("yes"^^xsd:boolean) as it is, for the report to show
    return rdflib.Literal(term.value, datatype=rdflib.URIRef(term.datatype) if term.datatype else None,
                          normalize=False)


@contextmanager
def _quiet() -> Iterator[None]:
    """rdflib warns once per ill-typed literal and pySHACL logs progress; the report says what matters."""
    loggers = [logging.getLogger(n) for n in ("rdflib", "rdflib.term", "pyshacl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class SubsetTooLarge(Exception):
    """The triples the shapes need exceed the caller's limit; ``size`` says how many."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def data_graph(store: Store, shapes: "rdflib.Graph", *, limit: int | None = None) -> tuple["rdflib.Graph", str]:
    """The triples pySHACL will see, and how they were chosen (a note for the report's reader).

    The subset: triples of every predicate the shapes name; ``rdf:type`` triples to a class the shapes name or
    a subclass of one, with the subClassOf edges among those classes (what class targets and ``sh:class``
    need); the schema graph's triples of the same kinds. An indexed store is read pattern by pattern through its
    index; an endpoint answers one paged SELECT.
    Past ``limit`` triples (counted first, cheaply) it raises ``SubsetTooLarge`` instead of building."""
    rdflib = _rdflib()
    graph = rdflib.Graph()
    patterns: list[tuple[str | None, str | None, str | None]] = [(None, None, None)]
    if _needs_whole_graph(shapes):
        how = "whole dataset"
        where = f"GRAPH ?g {{ ?s ?p ?o }} FILTER(?g != {iri_ref(MANIFEST_GRAPH)})"
    else:
        how = "the predicates and classes the shapes name"
        mentioned, whole_hierarchy = _mentions(shapes)
        classes = set() if whole_hierarchy else _descendants(store, mentioned)
        predicates = sorted(mentioned | ({RDF_TYPE, RDFS_SUBCLASS} if whole_hierarchy else set()))
        patterns = [(None, p, None) for p in predicates]
        patterns += [(None, RDF_TYPE, c) for c in sorted(classes)]
        patterns += [(c, RDFS_SUBCLASS, None) for c in sorted(classes)]
        branches = [f"{{ VALUES ?p {{ {' '.join(iri_ref(p) for p in predicates)} }} GRAPH ?g {{ ?s ?p ?o }} }}"]
        if classes:
            listed = " ".join(iri_ref(c) for c in sorted(classes))
            branches.append(f"{{ VALUES ?o {{ {listed} }} GRAPH ?g {{ ?s {iri_ref(RDF_TYPE)} ?o }} "
                            f"BIND({iri_ref(RDF_TYPE)} AS ?p) }}")
            branches.append(f"{{ VALUES ?s {{ {listed} }} GRAPH ?g {{ ?s {iri_ref(RDFS_SUBCLASS)} ?o }} "
                            f"BIND({iri_ref(RDFS_SUBCLASS)} AS ?p) }}")
        where = f"{' UNION '.join(branches)} FILTER(?g != {iri_ref(MANIFEST_GRAPH)})"
    if limit:  # an unfiltered COUNT is cheap (no term is decoded); building the rdflib graph is not
        rows = store.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}")
        size = int(rows[0]["n"].value) if rows and "n" in rows[0] else 0
        if size > limit:
            raise SubsetTooLarge(size)
    with _quiet():
        iris: dict[str, Any] = {}
        if store.indexed:
            for s, p, o in patterns:
                graph.addN((_to_rdflib(q.subject, iris), _to_rdflib(q.predicate, iris), _to_rdflib(q.object, iris),
                            graph) for q in store.quads(s, p, o) if q.graph != MANIFEST_GRAPH)
        else:
            solutions = store.select_all(f"SELECT ?s ?p ?o WHERE {{ {where} }}")
            graph.addN((_to_rdflib(r["s"], iris), _to_rdflib(r["p"], iris), _to_rdflib(r["o"], iris), graph)
                       for r in solutions)
    return graph, f"{how}: {len(graph):,} triples"


def _component(iri: str) -> str:
    local = iri.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
    return local.removesuffix("ConstraintComponent")


def _node_id(node: Any) -> str:
    rdflib = _rdflib()
    if isinstance(node, rdflib.URIRef):
        iri = str(node)
        if iri.startswith(MKG):  # the shipped shapes
            return iri[len(MKG):]
        curie = compress(iri)
        if curie == iri:  # no known prefix: the local name reads better than the whole IRI
            curie = iri.rstrip("/#").rsplit("#", 1)[-1].rsplit("/", 1)[-1] or iri
        return curie
    return "_:" + str(node)


def _path_text(path: Any, shapes: "rdflib.Graph") -> str:
    rdflib = _rdflib()
    if isinstance(path, rdflib.URIRef):
        return compress(str(path))
    for kind in ("alternativePath", "inversePath", "zeroOrMorePath", "oneOrMorePath", "zeroOrOnePath"):
        inner = shapes.value(path, rdflib.URIRef(SH + kind))
        if inner is not None:
            if kind == "alternativePath":
                members = rdflib.collection.Collection(shapes, inner)
                return "|".join(_path_text(m, shapes) for m in members)
            return f"{kind.removesuffix('Path')}({_path_text(inner, shapes)})"
    if (path, rdflib.RDF.first, None) in shapes:
        return "/".join(_path_text(m, shapes) for m in rdflib.collection.Collection(shapes, path))
    return "path"


def shape_name(shape: Any, shapes: "rdflib.Graph") -> str:
    """A stable, readable name: the shape's CURIE, or for a blank property shape its node shape and path."""
    rdflib = _rdflib()
    if isinstance(shape, rdflib.URIRef):
        return _node_id(shape)
    parent = shapes.value(None, rdflib.URIRef(SH + "property"), shape)
    path = shapes.value(shape, rdflib.URIRef(SH + "path"))
    base = shape_name(parent, shapes) if parent is not None else "shape"
    return f"{base}/{_path_text(path, shapes)}" if path is not None else base


SKIPPED = "shacl-skipped"


def run_shacl(store: Store, shapes: "rdflib.Graph", *, max_examples: int = 5, limit: int | None = None,
              notes: dict[str, str] | None = None) -> list[Finding]:
    """Validate the store against ``shapes``; one finding per (shape, constraint component), counted.

    When the triples the shapes need exceed ``limit``, nothing runs and one info finding says so."""
    try:
        import pyshacl
    except ImportError as exc:
        raise MissingExtraError("pyshacl", "all") from exc
    rdflib = _rdflib()
    try:
        data, how = data_graph(store, shapes, limit=limit)
    except SubsetTooLarge as big:
        return [Finding(SKIPPED, "info", 1, (Example(id="--shacl-limit", detail=(
            f"the shapes need {big.size:,} triples, over the limit of {limit:,} (pySHACL works through about "
            f"25,000 a second); they were not run: rerun with --shacl-limit 0 to run them")),))]
    if notes is not None:
        notes["shacl"] = how
    advanced = any(True for _ in shapes.subject_objects(rdflib.URIRef(SH + "rule")))
    with _quiet():
        _conforms, results, _text = pyshacl.validate(
            data, shacl_graph=shapes, inference="none", abort_on_first=False, allow_infos=True,
            allow_warnings=True, advanced=advanced, meta_shacl=False)
    sh = rdflib.Namespace(SH)
    groups: dict[tuple[str, Level], list[Example]] = defaultdict(list)
    for result in results.subjects(rdflib.RDF.type, sh.ValidationResult):
        shape = results.value(result, sh.sourceShape)
        component = results.value(result, sh.sourceConstraintComponent)
        severity = str(results.value(result, sh.resultSeverity))
        focus = results.value(result, sh.focusNode)
        value = results.value(result, sh.value)
        message = results.value(result, sh.resultMessage)
        check = f"shacl:{shape_name(shape, shapes)}/{_component(str(component))}"
        path = results.value(result, sh.resultPath)
        if message is not None:
            detail = str(message)
        else:
            detail = _component(str(component))
            if isinstance(path, rdflib.URIRef):
                detail = f"{compress(str(path))}: {detail}"
        if value is not None and value != focus:
            shown = compress(str(value)) if isinstance(value, rdflib.URIRef) else repr(str(value))[:80]
            detail += f" (value {shown})"
        is_iri = isinstance(focus, rdflib.URIRef)
        groups[(check, _LEVELS.get(severity, "error"))].append(
            Example(id=compress(str(focus)) if is_iri else f"_:{focus}", detail=detail,
                    iri=str(focus) if is_iri else None))
    findings = []
    for (check, level), examples in sorted(groups.items()):
        examples.sort(key=lambda e: (e.id, e.detail))
        findings.append(Finding(check, level, len(examples), tuple(examples[:max_examples])))
    return findings


def check_shapes_files(paths: Sequence[str | Path]) -> None:
    """Raise ``InputError`` naming the first file that is not a readable SHACL shapes graph."""
    read_shapes(paths, shipped=False)
