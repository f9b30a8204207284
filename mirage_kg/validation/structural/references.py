"""Reference checks: link targets that nothing describes (``dangling-reference``), and links to or from a concept
marked inactive (``inactive-reference``)."""

from __future__ import annotations

import numpy as np

from mirage_kg.model.namespaces import compress
from mirage_kg.model.terms import iri_ref
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.queries import DATA, DESCRIBING, example, values


def dangling_reference(ctx: Context) -> tuple[int, list[Example]]:
    """Link targets (mappings aside) with no label and no type anywhere: the targets come from the components'
    pass over the links, whether a concept has a label or type from one pass over each describing predicate's
    subjects, and whether a target outside the concepts has one from lookups of those few. (A query with
    ``FILTER NOT EXISTS`` per distinct target took 17-44 s at 2.2M triples; ``MINUS`` builds its right side whole,
    every label and type triple, gigabytes at UMLS size.)"""
    preds = ctx.concept_links
    if not preds:
        return 0, []
    components = ctx.components
    concepts = components.targets & ~ctx.described
    outside = sorted(components.outside_targets - _described_outside(ctx, sorted(components.outside_targets)))
    total = int(np.count_nonzero(concepts)) + len(outside)
    if not total:
        return 0, []
    first = sorted(ctx.concepts.iris(np.flatnonzero(concepts)[: ctx.max_examples]) + outside[: ctx.max_examples])
    shown = first[: ctx.max_examples]
    if not shown:
        return total, []
    refs = {r["o"].value: r for r in ctx.select(f"""SELECT ?o (COUNT(*) AS ?n) (MIN(STR(?s)) AS ?from) WHERE {{
        {values('o', shown)} GRAPH ?g {{ ?s ?p ?o }} {DATA} {values('p', preds)} }}
        GROUP BY ?o""")}
    return total, [example(o, f"no label and no type; target of {refs[o]['n'].value} "
                              f"edge(s), e.g. from {compress(refs[o]['from'].value)}") for o in shown]


def _described_outside(ctx: Context, iris: list[str], chunk: int = 500) -> set[str]:
    """The IRIs among ``iris`` that have a label or a type in some graph (a VALUES-bound lookup per chunk)."""
    described: set[str] = set()
    for at in range(0, len(iris), chunk):
        branches = " UNION ".join(f"{{ ?o {iri_ref(p)} ?any }}" for p in DESCRIBING)
        described.update(r["o"].value for r in ctx.select(
            f"SELECT DISTINCT ?o WHERE {{ {values('o', iris[at: at + chunk])} {branches} }}"))
    return described


def inactive_reference(ctx: Context) -> tuple[int, list[Example]]:
    if not ctx.concept_links:
        return 0, []
    preds = values("p", ctx.concept_links)  # bound first in each branch: 200x faster than after the UNION
    inner = f"""SELECT DISTINCT ?s ?p ?o ?x WHERE {{
        ?x MKG:active ?a FILTER(STR(?a) IN ("false", "0"))
        {{ {preds} GRAPH ?g {{ ?x ?p ?o }} BIND(?x AS ?s) }} UNION {{ {preds} GRAPH ?g {{ ?s ?p ?x }} BIND(?x AS ?o) }}
        {DATA} FILTER(isIRI(?s) && isIRI(?o)) }}"""
    total, rows = ctx.count_and_examples(inner, ["x", "s", "p", "o"])
    return total, [example(r["x"].value, f"{compress(r['s'].value)} {compress(r['p'].value)} "
                                         f"{compress(r['o'].value)}, and {compress(r['x'].value)} is inactive")
                   for r in rows]
