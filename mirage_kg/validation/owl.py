"""OWL consistency (``validate --reason``): HermiT, through owlready2, over the KG's class axioms.

Only the TBox is reasoned over: subclass, equivalence and disjointness axioms, restrictions and property axioms,
as one CONSTRUCT. Instance typing (``rdf:type`` to a domain class) is left out, since a KG puns concepts as both
classes and individuals and HermiT would read that as an ABox. HermiT runs on Java; without ``java`` the check is
skipped with an info finding that says so."""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from mirage_kg.errors import MissingExtraError
from mirage_kg.model.namespaces import OWL, RDF, RDF_TYPE, RDFS, compress
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.validation.report import Example, Finding

# Predicates that make up class and property axioms (RDF lists included, for unionOf/intersectionOf/members).
_AXIOMS = [RDFS + "subClassOf", RDFS + "subPropertyOf", RDFS + "domain", RDFS + "range", RDF + "first",
           RDF + "rest"] + [OWL + p for p in (
               "equivalentClass", "disjointWith", "complementOf", "unionOf", "intersectionOf", "oneOf",
               "someValuesFrom", "allValuesFrom", "hasValue", "onProperty", "onClass", "members",
               "disjointUnionOf", "inverseOf", "propertyDisjointWith", "equivalentProperty", "cardinality",
               "minCardinality", "maxCardinality", "qualifiedCardinality", "minQualifiedCardinality",
               "maxQualifiedCardinality", "propertyChainAxiom")]
_DECLARATIONS = [OWL + t for t in (
    "Class", "Restriction", "ObjectProperty", "DatatypeProperty", "TransitiveProperty", "SymmetricProperty",
    "AsymmetricProperty", "ReflexiveProperty", "IrreflexiveProperty", "FunctionalProperty",
    "InverseFunctionalProperty", "AllDisjointClasses")] + [RDFS + "Datatype"]
_CLASS_POSITIONS = (RDFS + "subClassOf", OWL + "equivalentClass", OWL + "disjointWith")

SKIPPED = "owl-reasoner-skipped"
UNSATISFIABLE = "owl-unsatisfiable"
INCONSISTENT = "owl-inconsistent"


def class_axioms(store: Store) -> list[tuple[Term, Term, Term]]:
    """The TBox triples of the store (all graphs but the manifest), with an owl:Class declaration for every IRI
    that stands where a class must, so HermiT sees a well-formed ontology."""
    preds = " ".join(iri_ref(p) for p in _AXIOMS)
    decls = " ".join(iri_ref(t) for t in _DECLARATIONS)
    manifest = iri_ref(MANIFEST_GRAPH)
    triples = store.construct(f"""CONSTRUCT {{ ?s ?p ?o }} WHERE {{
        {{ VALUES ?p {{ {preds} }} GRAPH ?g {{ ?s ?p ?o }} FILTER(?g != {manifest}) }}
        UNION {{ VALUES ?o {{ {decls} }} GRAPH ?g {{ ?s ?p ?o }} FILTER(?g != {manifest} && ?p = {iri_ref(RDF_TYPE)}) }}
    }}""")
    declared = {s.value for s, p, o in triples if p.value == RDF_TYPE}
    out = list(triples)
    for s, p, o in triples:
        if p.value in _CLASS_POSITIONS:
            for term in (s, o):
                if term.kind == "uri" and term.value not in declared:
                    declared.add(term.value)
                    out.append((term, Term("uri", RDF_TYPE), Term("uri", OWL + "Class")))
    return out


def _skipped(why: str) -> Finding:
    return Finding(SKIPPED, "info", 1, (Example(id="--reason", detail=why),))


def run_reasoner(store: Store, *, max_examples: int = 5, java: str | None = None) -> list[Finding]:
    """Unsatisfiable classes (and an inconsistent ontology) as findings; an info finding when Java is missing."""
    try:
        import owlready2
    except ImportError as exc:
        raise MissingExtraError("owlready2", "owl") from exc
    exe = shutil.which(java or "java")
    if exe is None:
        return [_skipped("skipped: no `java` on PATH; HermiT needs Java 8+ (e.g. apt install default-jre-headless)")]
    previous, owlready2.JAVA_EXE = owlready2.JAVA_EXE, exe  # owlready2 reads a module global; put it back after
    try:
        return _reason(store, owlready2, max_examples)
    finally:
        owlready2.JAVA_EXE = previous


def _reason(store: Store, owlready2: Any, max_examples: int) -> list[Finding]:
    axioms = class_axioms(store)
    if not axioms:
        return []
    parents: dict[str, list[str]] = defaultdict(list)
    for s, p, o in axioms:
        if p.value == RDFS + "subClassOf" and o.kind == "uri":
            parents[s.value].append(o.value)
    with tempfile.TemporaryDirectory(prefix="mirage-kg-owl-") as tmp:
        path = Path(tmp) / "tbox.nt"
        with open(path, "w", encoding="utf-8") as handle:
            for s, p, o in axioms:
                handle.write(f"{s.sparql()} {p.sparql()} {o.sparql()} .\n")
        world = owlready2.World()
        onto = world.get_ontology("https://w3id.org/mirage-kg/validation/tbox")
        with open(path, "rb") as handle:
            onto.load(fileobj=handle, format="ntriples")
        try:
            owlready2.sync_reasoner_hermit(world, infer_property_values=False, debug=0)
        except owlready2.OwlReadyInconsistentOntologyError as exc:
            return [Finding(INCONSISTENT, "error", 1, (Example(id="ontology", detail=f"HermiT: {exc}"),))]
        unsat = sorted(c.iri for c in world.inconsistent_classes() if c.iri != OWL + "Nothing")
        world.close()
    if not unsat:
        return []
    examples = []
    for iri in unsat[:max_examples]:
        supers = ", ".join(compress(p) for p in sorted(parents.get(iri, []))[:4]) or "none stated"
        examples.append(Example(id=compress(iri), iri=iri,
                                detail=f"unsatisfiable (equivalent to owl:Nothing); stated superclasses: {supers}"))
    return [Finding(UNSATISFIABLE, "error", len(unsat), tuple(examples))]
