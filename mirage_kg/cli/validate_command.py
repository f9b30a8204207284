"""``mirage-kg validate``: structural checks, SHACL shapes, OWL consistency and SPARQL checks, as text or JSON.

Exit status: 0 when nothing reaches ``--fail-on``, 1 when something does (or the store fails), 2 for usage errors
(a missing or unreadable shapes or check file included)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mirage_kg.cli.main import store_options

if TYPE_CHECKING:
    from mirage_kg.store.base import Store
    from mirage_kg.validation.report import Report

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@store_options
@click.option("--shapes", "shapes", multiple=True, type=_FILE, metavar="FILE",
              help="Extra SHACL shapes (Turtle, RDF/XML, ...), run with the shipped ones. Repeatable.")
@click.option("--check", "checks", multiple=True, type=_FILE, metavar="FILE.rq",
              help="A SPARQL SELECT whose rows are problems; id = file name, level from '# level: warning' "
                   "(default error). Repeatable.")
@click.option("--reason", is_flag=True, help="Run the HermiT OWL reasoner (Java) and report unsatisfiable classes.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "none"]), default="error", show_default=True,
              help="Exit 1 when a finding reaches this level.")
@click.option("--no-shipped-shapes", is_flag=True, help="Do not run the shapes shipped in ontologies/shapes.ttl.")
@click.option("--shacl-limit", type=click.IntRange(0), default=250_000, show_default=True, metavar="TRIPLES",
              help="Skip the shipped shapes (with an info finding) when they need more triples than this; "
                   "0: no limit. Shapes given with --shapes always run.")
@click.option("--examples", "max_examples", type=click.IntRange(0, 1000), default=5, show_default=True,
              help="Examples kept per finding.")
@click.option("--timings", is_flag=True, help="Also print the seconds each check took (with --json: a \"timings\" "
                                                "object beside the report).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--against", metavar="GRAPH_OR_STORE",
              help="Report only what changed against the previous release: a store folder, or a graph of this "
                   "store (the rest of the store is then the new release). Exit 1 on new problems only.")
def validate(store: str | None, endpoint: str | None, shapes: tuple[Path, ...], checks: tuple[Path, ...],
             reason: bool, fail_on: str, no_shipped_shapes: bool, shacl_limit: int, max_examples: int,
             timings: bool, as_json: bool, against: str | None) -> None:
    """Check a KG before shipping it: dangling references, labels, IS-A cycles, relation signatures, inactive
    concepts, datatypes, connectivity; SHACL shapes; optionally OWL consistency and your own SPARQL checks."""
    from mirage_kg.errors import InputError
    from mirage_kg.store import open_store
    from mirage_kg.validation import read_check
    from mirage_kg.validation import validate as run_validation
    from mirage_kg.validation.shacl import check_shapes_files

    if store is not None and endpoint is not None:
        raise click.UsageError("give either --store or --endpoint, not both")
    # The user's files are checked before the store opens: a bad one is a usage error (exit 2), not a finding.
    try:
        custom = [read_check(path) for path in checks]
        check_shapes_files(shapes)
    except InputError as exc:
        raise click.UsageError(str(exc)) from None
    names = [c.id for c in custom]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise click.UsageError(f"two --check files share the id {', '.join(duplicated)}; rename one")

    if against:
        _validate_against(store, endpoint, against, fail_on, max_examples, as_json,
                          lambda s, n: run_validation(s, shapes=shapes, checks=custom, reason=reason,
                                                      shipped_shapes=not no_shipped_shapes, max_examples=n,
                                                      shacl_limit=shacl_limit))
        return
    with open_store(store, endpoint) as opened:
        report = run_validation(opened, shapes=shapes, checks=custom, reason=reason,
                                shipped_shapes=not no_shipped_shapes, max_examples=max_examples,
                                shacl_limit=shacl_limit)
        location = opened.location
    if as_json:
        payload = report.to_json()
        if timings:  # for people and benchmarks; the report itself stays the same whatever the run's speed
            payload["timings"] = {name: round(seconds, 3) for name, seconds in report.timings.items()}
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        from rich.console import Console

        from mirage_kg.validation import render

        render(report, Console(), location=location, show_timings=timings)
    if report.fails(fail_on):
        click.get_current_context().exit(1)


def _validate_against(store: str | None, endpoint: str | None, against: str, fail_on: str, max_examples: int,
                      as_json: bool, run: Callable[[Store, int], Report]) -> None:
    from mirage_kg.releases.sides import graph_name, is_store_folder
    from mirage_kg.releases.validation_diff import COMPARED_EXAMPLES, validate_against
    from mirage_kg.store import OxigraphStore, open_store

    def validated(target: Store) -> Report:
        return run(target, COMPARED_EXAMPLES)

    with open_store(store, endpoint) as opened:
        if is_store_folder(Path(against)):
            with OxigraphStore(Path(against), read_only=True) as baseline:
                result = validate_against(opened, baseline, validated, against)
        else:
            result = validate_against(opened, graph_name(against), validated, against)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        for line in result.lines(max_examples):
            click.echo(line)
    if result.fails(fail_on):
        click.get_current_context().exit(1)
