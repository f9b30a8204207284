"""Structural checks of a KG, each a stable id with a level, answered by a few SPARQL queries on any ``Store``.

Each check is one or a few aggregate queries plus a LIMITed query for its first examples; the two graph-shaped
checks (IS-A cycles, connected components) fetch their edges once and finish in Python (strongly connected
components, union-find). The checks live in one module per family (``references``, ``labels``, ``hierarchy``,
``relations``, ``identifiers``, ``literals``, ``connectivity``); what they share is the run's ``context``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mirage_kg.store.base import Store
from mirage_kg.validation.report import Example, Finding, Level
from mirage_kg.validation.structural.connectivity import disconnected_component, isolated_node
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.hierarchy import isa_cycle
from mirage_kg.validation.structural.identifiers import duplicate_id
from mirage_kg.validation.structural.labels import ambiguous_label, missing_preflabel, multiple_preflabels
from mirage_kg.validation.structural.literals import literal_datatype
from mirage_kg.validation.structural.references import dangling_reference, inactive_reference
from mirage_kg.validation.structural.relations import (domain_violation, range_violation, schema_missing,
                                                       undeclared_relation, unused_relation)


@dataclass(frozen=True)
class StructuralCheck:
    """A check: its stable id, level, what its count counts, and the function that runs it."""

    id: str
    level: Level
    counts: str
    description: str
    run: Callable[[Context], tuple[int, list[Example]]]


CHECKS: tuple[StructuralCheck, ...] = (
    StructuralCheck("schema-missing", "warning", "stores",
                    "the store lacks the schema graph the other checks read relations and classes from",
                    schema_missing),
    StructuralCheck("dangling-reference", "error", "IRIs",
                    "an edge points to an IRI that has no label and no type anywhere in the store", dangling_reference),
    StructuralCheck("missing-preflabel", "warning", "concepts",
                    "a concept has no skos:prefLabel (it will read as its CURIE)", missing_preflabel),
    StructuralCheck("multiple-preflabels", "error", "concepts",
                    "a concept has more than one skos:prefLabel in one language", multiple_preflabels),
    StructuralCheck("ambiguous-label", "warning", "labels",
                    "one prefLabel (ignoring case) names several concepts", ambiguous_label),
    StructuralCheck("isa-cycle", "error", "cycles",
                    "rdfs:subClassOf edges form a cycle", isa_cycle),
    StructuralCheck("undeclared-relation", "warning", "predicates",
                    "edges use a predicate the schema does not declare as a relation", undeclared_relation),
    StructuralCheck("unused-relation", "info", "relations",
                    "a data graph declares a relation that no edge uses", unused_relation),
    StructuralCheck("domain-violation", "error", "edges",
                    "an edge's subject is typed outside the relation's rdfs:domain", domain_violation),
    StructuralCheck("range-violation", "error", "edges",
                    "an edge's object is typed outside the relation's rdfs:range, or is a literal", range_violation),
    StructuralCheck("inactive-reference", "warning", "edges",
                    "an edge touches a concept marked MKG:active false", inactive_reference),
    StructuralCheck("duplicate-id", "error", "identifiers",
                    "one skos:notation value is carried by several IRIs", duplicate_id),
    StructuralCheck("literal-datatype", "error", "triples",
                    "a literal is ill-typed, does not match its property's xsd range, or a label is not text",
                    literal_datatype),
    StructuralCheck("disconnected-component", "info", "components",
                    "concepts form components not connected to the largest one", disconnected_component),
    StructuralCheck("isolated-node", "info", "concepts",
                    "a concept has no edge to or from another concept", isolated_node),
)
CHECK_IDS = tuple(c.id for c in CHECKS)


def run_structural(store: Store, *, max_examples: int = 5, only: Iterable[str] | None = None,
                   timings: dict[str, float] | None = None) -> list[Finding]:
    """Run the structural checks (all, or those in ``only``); one finding per check that found something."""
    wanted = set(only) if only is not None else set(CHECK_IDS)
    unknown = wanted - set(CHECK_IDS)
    if unknown:
        raise ValueError(f"unknown structural check(s): {', '.join(sorted(unknown))}; known: {', '.join(CHECK_IDS)}")
    from mirage_kg.progress import progress_bar

    ctx = Context(store, max_examples)
    findings = []
    chosen = [check for check in CHECKS if check.id in wanted]
    # a check's time includes the shared passes it is the first to need (the concept table, the components)
    with progress_bar("validate: structural checks", total=len(chosen), unit="checks") as advance:
        for check in chosen:
            started = time.perf_counter()
            count, examples = check.run(ctx)
            if timings is not None:
                timings[check.id] = time.perf_counter() - started
            if count:
                findings.append(Finding(check.id, check.level, count, tuple(examples[:max_examples])))
            advance(1)
    return findings
