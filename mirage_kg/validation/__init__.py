"""KG validation: structural checks, SHACL shapes, OWL consistency and a user's SPARQL checks, in one report.

    >>> report = validate(store, shapes=["my-shapes.ttl"], checks=["no-orphans.rq"])
    >>> report.fails("error"), report.to_json()["summary"]

Check ids, levels and what each counts are listed in ``docs/validation.md``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_PREF
from mirage_kg.store.base import Store
from mirage_kg.model.terms import iri_ref
from mirage_kg.validation.custom import CustomCheck, read_check, run_check
from mirage_kg.validation.report import LEVELS, Example, Finding, Level, Report, render, sort_findings
from mirage_kg.validation.structural import CHECK_IDS, CHECKS, run_structural

SHACL_LIMIT = 250_000

__all__ = ["CHECKS", "CHECK_IDS", "CustomCheck", "Example", "Finding", "LEVELS", "Level", "Report", "read_check",
           "SHACL_LIMIT", "render", "validate"]


def validate(
    store: Store,
    *,
    shapes: Sequence[str | Path] = (),
    checks: Sequence[str | Path | CustomCheck] = (),
    reason: bool = False,
    shipped_shapes: bool = True,
    structural: bool | Iterable[str] = True,
    max_examples: int = 5,
    shacl_limit: int | None = SHACL_LIMIT,
) -> Report:
    """Validate ``store`` and return the report.

    ``shapes``: SHACL files run with the shipped ``ontologies/shapes.ttl`` (``shipped_shapes=False`` drops those;
    SHACL is skipped when neither is given). ``checks``: SPARQL SELECT files (or ``CustomCheck``\\ s).
    ``reason``: run HermiT over the class axioms. ``structural``: all built-in checks, none, or the ids to run.
    ``shacl_limit``: when the triples the shipped shapes need exceed it, they are skipped with an info finding
    (pySHACL is pure Python: about 10 s per 250,000 triples); 0 or None runs them whatever the size. Shapes
    given in ``shapes`` always run."""
    timings: dict[str, float] = {}
    findings: list[Finding] = []
    run = 0
    custom = [c if isinstance(c, CustomCheck) else read_check(c) for c in checks]

    if structural:
        only = None if structural is True else list(structural)
        findings += run_structural(store, max_examples=max_examples, only=only, timings=timings)
        run += len(CHECK_IDS) if only is None else len(only)
    if shipped_shapes or shapes:
        from mirage_kg.validation.shacl import read_shapes, run_shacl

        started = time.perf_counter()
        graph = read_shapes(shapes, shipped=shipped_shapes)
        limit = None if shapes else shacl_limit  # the user asked for their shapes: run them
        findings += run_shacl(store, graph, max_examples=max_examples, limit=limit or None)
        timings["shacl"] = time.perf_counter() - started
        run += 1
    if reason:
        from mirage_kg.validation.owl import run_reasoner

        started = time.perf_counter()
        findings += run_reasoner(store, max_examples=max_examples)
        timings["owl"] = time.perf_counter() - started
        run += 1
    for check in custom:
        started = time.perf_counter()
        findings.append(run_check(store, check, max_examples=max_examples))
        timings[check.id] = time.perf_counter() - started
        run += 1
    started = time.perf_counter()
    findings = _with_labels(store, findings)
    timings["labels"] = time.perf_counter() - started
    return Report(findings=sort_findings(findings), checks_run=run, timings=timings)


def _with_labels(store: Store, findings: list[Finding]) -> list[Finding]:
    """Fill the examples' missing labels with one query: a prefLabel (English or untagged first), else rdfs:label."""
    wanted = sorted({e.iri for f in findings for e in f.examples if e.iri and not e.label})
    if not wanted:
        return findings
    rows = store.select(f"""SELECT ?x ?l ?rank WHERE {{ VALUES ?x {{ {' '.join(iri_ref(i) for i in wanted)} }}
        {{ ?x {iri_ref(SKOS_PREF)} ?l BIND(IF(LANG(?l) IN ("en", ""), 0, 1) AS ?rank) }}
        UNION {{ ?x {iri_ref(RDFS_LABEL)} ?l BIND(2 AS ?rank) }} }}""")
    best: dict[str, tuple[int, str]] = {}
    for r in rows:
        candidate = (int(r["rank"].value), r["l"].value)
        if r["x"].value not in best or candidate < best[r["x"].value]:
            best[r["x"].value] = candidate
    out = []
    for finding in findings:
        examples = tuple(
            Example(e.id, best[e.iri][1], e.detail, e.iri) if e.iri in best and not e.label else e
            for e in finding.examples)
        out.append(Finding(finding.check, finding.level, finding.count, examples))
    return out
