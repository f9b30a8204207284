"""Checks of the declarations: the schema graph present, relations used but undeclared or declared but unused, and
edges whose subject or object is typed outside the relation's ``rdfs:domain`` or ``rdfs:range``."""

from __future__ import annotations

from collections import defaultdict

from mirage_kg.model.namespaces import OWL, RDF, RDFS, SCHEMA_GRAPH, SKOS, XSD, compress
from mirage_kg.model.terms import iri_ref
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.queries import DATA, RELATION_TYPES, example, quote, values


def schema_missing(ctx: Context) -> tuple[int, list[Example]]:
    if ctx.store.ask(f"ASK {{ GRAPH {iri_ref(SCHEMA_GRAPH)} {{ ?s ?p ?o }} }}"):
        return 0, []
    return 1, [Example(id=compress(SCHEMA_GRAPH), detail=(
        "the store has no MIRAGE-KG schema graph, so the model's relations, classes, domains and ranges are "
        "unknown to the checks; load it: mirage-kg load ontologies/schema.ttl --graph GRAPH:schema"))]


def undeclared_relation(ctx: Context) -> tuple[int, list[Example]]:
    ranked = sorted(ctx.undeclared, key=lambda p: (-ctx.predicates[p], p))
    return len(ranked), [example(p, f"used by {ctx.predicates[p]:,} edge(s) but not declared as a MKG:Relation "
                                    f"or owl:ObjectProperty") for p in ranked[: ctx.max_examples]]


def unused_relation(ctx: Context) -> tuple[int, list[Example]]:
    inner = f"""SELECT DISTINCT ?r WHERE {{ GRAPH ?g {{ ?r rdf:type ?k }} {DATA} {values('k', RELATION_TYPES)}
        FILTER(isIRI(?r)) FILTER NOT EXISTS {{ ?s ?r ?o }} }}"""
    total, rows = ctx.count_and_examples(inner, ["r"])
    return total, [example(r["r"].value, "declared in a data graph but no edge uses it") for r in rows]


def _is_meta(cls: str) -> bool:
    return cls.startswith((RDF, RDFS, OWL, SKOS))


def _signature_violations(ctx: Context, axiom: str, end: str) -> tuple[int, list[Example]]:
    """Edges whose ``end`` node (?s for domain, ?o for range) has a type outside the declared class's hierarchy.

    A node fits a class when one of its types is the class, a subclass or a superclass of it (a node typed only
    MKG:Concept may still be a Disease); a node with no type, or only vocabulary types, is not judged."""
    decl = ctx.select(f"""SELECT DISTINCT ?p ?c WHERE {{ ?p {axiom} ?c . ?p rdf:type ?k . {values('k', RELATION_TYPES)}
        FILTER(isIRI(?c) && !STRSTARTS(STR(?c), "{XSD}") && ?c != rdfs:Literal) }}""")
    declared: dict[str, set[str]] = defaultdict(set)
    for r in decl:
        declared[r["p"].value].add(r["c"].value)
    expected = {p: classes for p, classes in declared.items() if p in ctx.predicates}
    total, examples = 0, []
    if not declared:
        return 0, []
    observed = []
    if expected:  # the types the relation's subjects (objects) actually have: a short list, judged in Python
        observed = ctx.select(f"""SELECT DISTINCT ?p ?t WHERE {{ {values('p', expected)}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(isIRI(?o)) ?{end} rdf:type ?t FILTER(isIRI(?t)) }}""")
    seen_types: dict[str, set[str]] = defaultdict(set)
    for r in observed:
        if not _is_meta(r["t"].value):
            seen_types[r["p"].value].add(r["t"].value)
    for prop in sorted(expected):
        fits = set.intersection(*(ctx.related_classes(c) for c in expected[prop]))
        bad = sorted(seen_types[prop] - fits)
        if not bad:
            continue
        good = sorted(seen_types[prop] & fits)
        keep_out = f"MINUS {{ ?{end} rdf:type ?good . {values('good', good)} }}" if good else ""
        inner = f"""SELECT ?s ?o (MIN(STR(?bad)) AS ?type) WHERE {{ GRAPH ?g {{ ?s {iri_ref(prop)} ?o }} {DATA}
            FILTER(isIRI(?o)) ?{end} rdf:type ?bad . {values('bad', bad)} {keep_out} }} GROUP BY ?s ?o"""
        n, rows = ctx.count_and_examples(inner, [end, "s", "o"])
        total += n
        want = " and ".join(compress(c) for c in sorted(expected[prop]))
        for r in rows:
            node = r[end].value
            examples.append(example(node, f"{compress(r['s'].value)} {compress(prop)} {compress(r['o'].value)}: "
                                          f"{compress(node)} is a {compress(r['type'].value)}, "
                                          f"the {'domain' if end == 's' else 'range'} is {want}"))
    if end == "o":  # a relation with a class range whose object is a literal
        inner = f"""SELECT DISTINCT ?s ?p ?o WHERE {{ {values('p', declared)} GRAPH ?g {{ ?s ?p ?o }} {DATA}
            FILTER(isLiteral(?o)) }}"""
        n, rows = ctx.count_and_examples(inner, ["s", "p", "o"])
        total += n
        examples += [example(r["s"].value, f"{compress(r['p'].value)} {quote(r['o'].value)}: a literal where "
                                           f"{' and '.join(compress(c) for c in sorted(declared[r['p'].value]))} "
                                           f"is expected") for r in rows]
    return total, examples[: ctx.max_examples]


def domain_violation(ctx: Context) -> tuple[int, list[Example]]:
    return _signature_violations(ctx, "rdfs:domain", "s")


def range_violation(ctx: Context) -> tuple[int, list[Example]]:
    return _signature_violations(ctx, "rdfs:range", "o")
