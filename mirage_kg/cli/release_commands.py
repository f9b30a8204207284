"""``mirage-kg diff``: what changed between two releases of a source (graphs, stores or releases on disk)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mirage_kg.cli.main import store_options

_LOADER_FORMATS = ["auto", "rdf", "triples", "umls", "snomed", "obo", "owl", "hpoa"]


@click.command()
@click.argument("old")
@click.argument("new")
@store_options
@click.option("--graph", metavar="NAME", help="The graph inside a store folder side when it holds several.")
@click.option("--format", "fmt", type=click.Choice(_LOADER_FORMATS), default="auto", show_default=True,
              help="Loader for a release-on-disk side.")
@click.option("--lang", default="en", show_default=True, help="Label language(s) of a release side (as for load).")
@click.option("--sab", multiple=True, help="UMLS release side: only these source vocabularies.")
@click.option("--stated", is_flag=True, help="SNOMED CT release side: stated relationships.")
@click.option("--keep-inactive", is_flag=True, help="Release side: keep inactive concepts (as for load).")
@click.option("--lenient", is_flag=True, help="Release side: skip bad rows instead of failing.")
@click.option("--examples", type=click.IntRange(0, 1000), default=10, show_default=True,
              help="Examples kept per kind of change.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write an HTML page.")
def diff(old: str, new: str, store: str | None, endpoint: str | None, graph: str | None, fmt: str, lang: str,
         sab: tuple[str, ...], stated: bool, keep_inactive: bool, lenient: bool, examples: int, as_json: bool,
         html_path: Path | None) -> None:
    """Concepts added, retired and relabelled, facts added and removed by relation, and synonyms changed, from
    release OLD to release NEW. Each is a graph of --store (GRAPH:umls/2024AA), a store folder, or a release
    on disk (read with its loader, nothing written)."""
    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.releases.sides import open_side, diff_sides
    from mirage_kg.store import open_store

    opened = open_store(store, endpoint) if store or endpoint else None
    options = LoadOptions(lang=lang, lenient=lenient)
    options.extra.update(sab=list(sab), stated=stated, keep_inactive=keep_inactive)
    sides = []
    try:
        sides.append(open_side(old, opened, graph, fmt))
        sides.append(open_side(new, opened, graph, fmt))
        result = diff_sides(sides[0], sides[1], options, LoadReport(), examples, reads=opened)
    finally:
        for side in sides:
            side.close()
        if opened is not None:
            opened.close()
    if html_path is not None:
        html_path.write_text(result.html(), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        for line in result.lines():
            click.echo(line)
