"""``index``: build a store's query indexes ahead (degrees, merged concepts, labels, label embeddings), and the
``--no-index`` / ``--no-embeddings`` options ``load`` and ``build-default`` share for their final index step."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from mirage_kg.cli.main import store_options


def index_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--index/--no-index`` (default: $MIRAGE_KG_INDEX, else on) and ``--embeddings/--no-embeddings``
    (default: $MIRAGE_KG_INDEX_EMBEDDINGS, else on) for commands that end by building the indexes."""
    func = click.option("--embeddings/--no-embeddings", "embeddings", default=None,
                        help="Include the label embeddings in the index step (minutes on a large KG) "
                             "[default: on, or $MIRAGE_KG_INDEX_EMBEDDINGS].")(func)
    return click.option("--index/--no-index", "index", default=None,
                        help="Build the query indexes as a last step (resumable; skipped ones are built, with "
                             "progress, by the first query that needs them) [default: on, or $MIRAGE_KG_INDEX].")(func)


def run_index_step(store: Any, index: bool | None, embeddings: bool | None, echo: Callable[[str], None]) -> list[Any]:
    """The shared last step: build the indexes unless ``index`` (None: $MIRAGE_KG_INDEX, else on) is off."""
    from mirage_kg.index.build import INDEX_ENV, build_indexes, embeddings_by_default, on_by_default

    if not (on_by_default(INDEX_ENV) if index is None else index):
        echo("indexes: skipped (--no-index); `mirage-kg index` builds them later")
        return []
    return build_indexes(store, embeddings=embeddings_by_default() if embeddings is None else embeddings, echo=echo)


@click.command("index")
@store_options
@click.option("--embeddings/--no-embeddings", "embeddings", default=True, show_default=True,
              help="Include the label embeddings.")
@click.option("--embedding-model", metavar="NAME|PATH", envvar="MIRAGE_KG_EMBEDDING_MODEL",
              help="sentence-transformers model [default: the offline all-MiniLM-L6-v2].")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def index(store: str | None, endpoint: str | None, embeddings: bool, embedding_model: str | None,
          as_json: bool) -> None:
    """Build the indexes queries use (degrees, merged concepts, labels, label embeddings) for a store, so that
    no query starts a long build. Cached beside the store; a stopped embedding build resumes."""
    from mirage_kg.index.build import build_indexes
    from mirage_kg.store import open_store

    opened = open_store(store, endpoint)
    try:
        steps = build_indexes(opened, embeddings=embeddings, embedding_model=embedding_model,
                              echo=(lambda s: None) if as_json else (lambda s: click.echo(s, err=True)))
    except KeyboardInterrupt:
        # the store is only read; each index file is written whole under a temporary name, the embeddings in
        # resumable parts
        raise click.ClickException("interrupted: the store is unchanged and the indexes finished so far are kept; "
                                   "`mirage-kg index` goes on from there (a stopped embedding build resumes)") from None
    finally:
        opened.close()
    if as_json:
        click.echo(json.dumps([step.__dict__ for step in steps], indent=2))
