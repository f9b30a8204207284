"""``query sparql|anchor|bridge`` and ``link``."""

from __future__ import annotations

import json

import click

from mirage_kg.cli.main import store_options


@click.group()
def query() -> None:
    """Look things up: SPARQL, an entity's neighbourhood (anchor) or the paths between two (bridge)."""


@query.command()
@click.argument("sparql_query", metavar="QUERY")
@store_options
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds before giving up.")
@click.option("--json", "as_json", is_flag=True, help="Print SPARQL-JSON-like results.")
def sparql(sparql_query: str, store: str | None, endpoint: str | None, timeout: float, as_json: bool) -> None:
    """Run a read-only SPARQL QUERY (SELECT, ASK, CONSTRUCT, DESCRIBE; '@file.rq' reads a file)."""
    from pathlib import Path

    from mirage_kg.errors import QueryError
    from mirage_kg.store import open_store

    if sparql_query.startswith("@"):
        sparql_query = Path(sparql_query[1:]).read_text(encoding="utf-8")
    if _looks_like_update(sparql_query):
        raise QueryError("query sparql is read-only; INSERT/DELETE/LOAD/CLEAR/DROP are refused")
    with open_store(store, endpoint) as opened:
        result = opened.query(sparql_query, timeout=timeout)
    if "boolean" in result:
        click.echo(json.dumps({"boolean": result["boolean"]}) if as_json else str(result["boolean"]).lower())
        return
    if "triples" in result:
        for s, p, o in result["triples"]:  # type: ignore[union-attr]
            click.echo(f"{s.sparql()} {p.sparql()} {o.sparql()} .")
        return
    names: list[str] = result["vars"]  # type: ignore[assignment]
    rows = result["rows"]
    if as_json:
        out = {"head": {"vars": names}, "results": {"bindings": [
            {k: {"type": v.kind, "value": v.value, **({"xml:lang": v.lang} if v.lang else {}),
                 **({"datatype": v.datatype} if v.datatype else {})} for k, v in row.items()}
            for row in rows]}}  # type: ignore[union-attr]
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    from mirage_kg.namespaces import compress

    click.echo("\t".join(names))
    for row in rows:  # type: ignore[union-attr]
        click.echo("\t".join(
            (compress(row[n].value) if row[n].kind == "uri" else row[n].value) if n in row else "" for n in names))


def _looks_like_update(text: str) -> bool:
    import re

    body = re.sub(r"#[^\n]*|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|<[^>\s]*>", " ", text)
    return re.search(r"\b(INSERT|DELETE|LOAD|CLEAR|DROP|CREATE|ADD|MOVE|COPY)\b\s", body, re.IGNORECASE) is not None \
        and re.search(r"\b(SELECT|ASK|CONSTRUCT|DESCRIBE)\b", body, re.IGNORECASE) is None
