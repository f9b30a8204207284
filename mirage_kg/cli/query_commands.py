"""``query sparql|anchor|bridge``, ``link`` and ``retrieve``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from mirage_kg.cli.main import store_options

if TYPE_CHECKING:
    from mirage_kg.graph.resolution import Resolution
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.model.records import Entity, Path, Step


@click.group()
def query() -> None:
    """Look things up: SPARQL, an entity's neighbourhood (anchor) or the paths between two (bridge)."""


@query.command()
@click.argument("sparql_query", metavar="QUERY")
@store_options
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds before giving up.")
@click.option("--json", "as_json", is_flag=True, help="Print SPARQL-JSON-like results.")
@click.option("--allow-service", "allow_service", multiple=True, metavar="URL",
              help="Let SERVICE call this endpoint (repeatable); SERVICE is refused otherwise, since it makes this "
                   "process send requests to whatever host the query names.")
def sparql(sparql_query: str, store: str | None, endpoint: str | None, timeout: float, as_json: bool,
           allow_service: tuple[str, ...]) -> None:
    """Run a read-only SPARQL QUERY (SELECT, ASK, CONSTRUCT, DESCRIBE; '@file.rq' reads a file). The shipped
    prefixes (MKG:, HP:, SNOMEDCT:, rdfs:, skos:, ...) may be used undeclared; the query is parsed here first, and
    anything that is not a query is refused.

    A pattern outside GRAPH matches the union of the named graphs' quads, on the embedded store and on every
    endpoint alike: a triple held in two graphs (two sources stating one fact) matches once per graph. Use SELECT
    DISTINCT (or COUNT(DISTINCT ...)) for distinct triples, as `stats` counts them, and GRAPH ?g to see which
    source holds each."""
    from pathlib import Path

    from mirage_kg.errors import InputError
    from mirage_kg.graph.json_output import sparql_json
    from mirage_kg.store import check_read_only, open_store
    from mirage_kg.store.sparql_text import with_known_prefixes

    if sparql_query.startswith("@"):
        source = Path(sparql_query[1:])
        try:
            sparql_query = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the query: {exc}", source) from None
    sparql_query = with_known_prefixes(sparql_query)
    check_read_only(sparql_query, allow_service)  # an update or a SERVICE is refused before any store opens
    with open_store(store, endpoint) as opened:
        result = opened.query(sparql_query, timeout=timeout)
    if as_json:
        click.echo(json.dumps(sparql_json(result), indent=2, ensure_ascii=False))
        return
    if "boolean" in result:
        click.echo(str(result["boolean"]).lower())
        return
    if "triples" in result:
        for s, p, o in result["triples"]:
            click.echo(f"{s.sparql()} {p.sparql()} {o.sparql()} .")
        return
    from mirage_kg.model.namespaces import compress

    names = result["vars"]
    click.echo("\t".join(names))
    for row in result["rows"]:
        click.echo("\t".join(
            (compress(row[n].value) if row[n].kind == "uri" else row[n].value) if n in row else "" for n in names))


# --- anchor, bridge, link, retrieve ---------------------------------------------------------------------------------

def _embedding_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--embedding-model", metavar="NAME|PATH|none", envvar="MIRAGE_KG_EMBEDDING_MODEL",
                        help="sentence-transformers model for soft matching [default: the offline "
                             "all-MiniLM-L6-v2; 'none' switches embeddings off].")(func)


def _open_graph(store: str | None, endpoint: str | None, embedding_model: str | None = None,
                merge: bool = True) -> KnowledgeGraph:
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.store import open_store

    return KnowledgeGraph(open_store(store, endpoint), embedding_model=embedding_model, merge_equivalents=merge)


def resolve_entity(kg: KnowledgeGraph, text: str, quiet: bool = False) -> Resolution:
    """A CURIE, an IRI or a name -> what it resolved to and how (``mirage_kg.graph.concepts.resolve_name``), said on
    stderr unless ``quiet``; an ambiguous name lists its candidates and exits 1."""
    from mirage_kg.graph.resolution import resolve_name

    found = resolve_name(kg, text)
    if not quiet:
        click.echo(f"resolved {found.describe()}", err=True)
    return found


def _merge_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--merge/--no-merge", "merge", default=True, show_default=True,
                        help="Treat a concept and its exact matches in other sources as one node.")(func)


def _rank_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--rank", type=click.Choice(["specificity", "degree"]), default="specificity",
                        show_default=True,
                        help="specificity: specific and frequent features first, hubs last; degree: best "
                             "connected first.")(func)


@query.command()
@click.argument("entity")
@store_options
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Neighbours per (relation, direction).")
@click.option("--relation", "relations", multiple=True, metavar="R",
              help="Only this relation (CURIE, IRI or label; repeatable).")
@click.option("--direction", type=click.Choice(["forward", "backward", "both", "out", "in"]), default="both",
              show_default=True, help="Outgoing edges (forward, or out), incoming edges (backward, or in), or both.")
@click.option("--rank-by", metavar="TEXT", help="Rank neighbours by similarity to TEXT instead.")
@_rank_option
@_merge_option
@_embedding_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str),
              help="Also write a self-contained HTML picture of the neighbourhood.")
def anchor(entity: str, store: str | None, endpoint: str | None, k: int, relations: tuple[str, ...],
           direction: str, rank_by: str | None, rank: str, merge: bool, embedding_model: str | None, as_json: bool,
           html_path: str | None) -> None:
    """The neighbourhood of ENTITY (a CURIE, IRI or name): up to K neighbours per relation and direction, the
    most specific and most frequent first (--rank degree: best connected first)."""
    kg = _open_graph(store, endpoint, embedding_model, merge)
    try:
        resolved = resolve_entity(kg, entity, quiet=as_json)
        center = resolved.entity
        steps = kg.anchor(center, k=k, relations=list(relations) or None, direction=direction, rank_by=rank_by,
                          rank=rank)
    finally:
        kg.store.close()
    from mirage_kg.graph.json_output import anchor_json

    data = anchor_json(center, steps)
    neighbours = data["neighbours"]
    if html_path:
        _write_text(html_path, anchor_html(center, steps))
    if as_json:
        click.echo(json.dumps({**data, "resolved": resolved.to_json()}, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # labels and ids are data, never rich markup ("Pain [finding]")

    ids = ", ".join(resolved.ids)
    table = Table(title=Text(f"{center.label} ({ids}): {len(steps)} neighbours"), title_justify="left")
    for name in ("relation", "dir", "neighbour", "id"):
        table.add_column(name, overflow="fold")
    for n in neighbours:
        table.add_row(*(Text(str(n[key])) for key in ("relation_label", "direction", "label", "id")))
    Console(soft_wrap=True).print(table if neighbours else Text(f"{center.label} ({center.id}) has no facts"))


@query.command()
@click.argument("a")
@click.argument("b")
@store_options
@click.option("--max-hops", type=click.IntRange(min=1, max=6), default=3, show_default=True,
              help="Longest path, in edges.")
@click.option("--max-paths", type=click.IntRange(min=1), default=20, show_default=True, help="Paths to show.")
@click.option("--relation", "relations", multiple=True, metavar="R", help="Only this relation (repeatable).")
@click.option("--hub-edges", type=click.IntRange(min=0), default=None, metavar="N",
              help="Edges per relation and direction the search takes past a node of over 5,000 edges "
                   "(0: every edge, slower) [default: 100; the answer says where it cut the search].")
@_rank_option
@_merge_option
@_embedding_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str),
              help="Also write a self-contained HTML picture of the paths.")
def bridge(a: str, b: str, store: str | None, endpoint: str | None, max_hops: int, max_paths: int,
           relations: tuple[str, ...], hub_edges: int | None, rank: str, merge: bool, embedding_model: str | None,
           as_json: bool, html_path: str | None) -> None:
    """How A and B connect: every simple path of at most --max-hops edges, edges walked either way, shortest
    first, then (--rank specificity) through specific nodes before hubs (A and B: CURIEs, IRIs or names)."""
    kg = _open_graph(store, endpoint, embedding_model, merge)
    try:
        from_a, from_b = resolve_entity(kg, a, quiet=as_json), resolve_entity(kg, b, quiet=as_json)
        source, target = from_a.entity, from_b.entity
        paths = kg.bridge(source, target, max_hops=max_hops, max_paths=max_paths, relations=list(relations) or None,
                          rank=rank, hub_edges=hub_edges)
        hubs = [(kg.entity(iri), edges) for iri, edges in paths.capped]
    finally:
        kg.store.close()
    if html_path:
        _write_text(html_path, bridge_html(source, target, paths))
    if as_json:
        from mirage_kg.graph.json_output import bridge_json

        data = {**bridge_json(source, target, paths, hubs), "resolved": [from_a.to_json(), from_b.to_json()]}
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True)
    cut = ""
    if hubs:  # never "no path" when the cap cut the search: say where, and how to lift it
        named = ", ".join(f"{hub.label} ({hub.id}, {edges:,} edges)" for hub, edges in hubs)
        cut = (f"the search went past {named} along only {paths.hub_edges} edges per relation and direction, so "
               "paths through the others may be missing: rerun with --hub-edges 0 to walk every edge (slower)")
    if not paths:
        if cut:
            console.print(f"no path of at most {max_hops} edges found between {escape(source.label)} and "
                          f"{escape(target.label)}, but {escape(cut)}")
        else:
            console.print(f"no path of at most {max_hops} edges between {escape(source.label)} and "
                          f"{escape(target.label)}")
        return
    console.print(f"[bold]{escape(source.label)}[/] ({source.id}) to [bold]{escape(target.label)}[/] ({target.id}): "
                  f"{len(paths)} path(s)")
    for i, path in enumerate(paths, 1):
        chain = " ".join([path.nodes[0].label] + [
            f"-[{s.relation.label}]-> {s.end.label}" if s.direction == "forward"
            else f"<-[{s.relation.label}]- {s.end.label}" for s in path.steps])
        console.print(f"{i:>3}. ({path.length}) {escape(chain)}")
        console.print(f"     [dim]{escape(path.text)}[/]")
    if cut:
        console.print(f"note: {escape(cut)}")


@query.command()
@click.argument("findings")
@store_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Candidates to show.")
@_merge_option
@_embedding_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON: 'candidates', best first.")
def differential(findings: str, store: str | None, endpoint: str | None, top: int, merge: bool,
                 embedding_model: str | None, as_json: bool) -> None:
    """A differential diagnosis for FINDINGS (free text, e.g. "fever, sore throat, blisters in the mouth"): the
    conditions that explain the most of the linked findings, each finding weighted by how specific it is (and by
    the annotation frequency where the source gives one), with what each explains, what it leaves unexplained and
    the facts that support it. No model: the graph's ranking."""
    from mirage_kg.retrieval.differential import differential as rank_conditions

    kg = _open_graph(store, endpoint, embedding_model, merge)
    try:
        result = rank_conditions(kg, findings, top=top)
    finally:
        kg.store.close()
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return
    click.echo(result.to_text())
    for note in result.notes:
        click.echo(f"note: {note}", err=True)


@click.command()
@click.argument("text")
@store_options
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True, help="Candidates per mention.")
@click.option("--whole", is_flag=True, help="Take TEXT as one mention (as a search block does).")
@_embedding_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def link(text: str, store: str | None, endpoint: str | None, top: int, whole: bool, embedding_model: str | None,
         as_json: bool) -> None:
    """Find mentions of KG entities in TEXT and rank candidates for each (id, exact, normalised, synonym, fuzzy,
    embedding). With $MIRAGE_KG_SERVER set to a running `mirage-kg serve`, the server links (warm: no start-up); with
    $MIRAGE_KG_WARM=1, a background server for this store is reused or started (see `ask`)."""
    from mirage_kg.cli.remote import SERVER_ENV, fetch, server_url
    from mirage_kg.cli.warm_server import warm_link_server
    from mirage_kg.graph.json_output import link_json
    from mirage_kg.linking.linker import Mention

    warm = warm_link_server(store, endpoint, embedding_model, say=lambda line: click.echo(line, err=True)) \
        if server_url() is None else None
    if server_url() is not None:
        given = click.get_current_context().get_parameter_source("embedding_model")
        if given is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--embedding-model: the server ({SERVER_ENV}) links with its own model; unset "
                                   f"{SERVER_ENV} to link locally with another")
        found = fetch("/v1/link", params={"text": text, "top": top, "whole": whole}, store=store, endpoint=endpoint)
    elif warm is not None:
        found = fetch("/v1/link", params={"text": text, "top": top, "whole": whole}, store=store, endpoint=endpoint,
                      url=warm.url, token=warm.token)
    else:
        kg = _open_graph(store, endpoint, embedding_model)
        try:
            if whole:
                candidates = kg.linker.link_one(text, top=top)
                mentions = [Mention(text, 0, len(text), tuple(candidates))] if candidates else []
            else:
                mentions = kg.link(text, top=top)
        finally:
            kg.store.close()
        found = link_json(mentions)
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if not found["mentions"]:
        click.echo("no mentions found")
        return
    table = Table(show_lines=False)
    merged = any(c.get("same_as") for m in found["mentions"] for c in m["candidates"])
    for name in ("mention", "span", "candidate", "id", "score", "method", *(["same as"] if merged else [])):
        table.add_column(name, overflow="fold")
    for m in found["mentions"]:
        for i, c in enumerate(m["candidates"]):
            table.add_row(Text(m["text"] if i == 0 else ""), f"{m['start']}-{m['end']}" if i == 0 else "",
                          Text(c["label"]), Text(c["id"]), f"{c['score']:.2f}",
                          Text(c["method"] if not c.get("same_as") else f"{c['method']}, merged"),
                          *([Text(", ".join(c.get("same_as") or []))] if merged else []))
    Console(soft_wrap=True).print(table)


@click.command()
@click.argument("question", required=False)
@store_options
@click.option("--budget", type=click.IntRange(min=1), default=100, show_default=True, help="Entities at most.")
@click.option("--batch", "batch", type=click.Path(exists=True, dir_okay=False, path_type=str),
              help="A JSONL file, one question per line (field 'question' or 'input'); one result per line out.")
@_embedding_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def retrieve(question: str | None, store: str | None, endpoint: str | None, budget: int, batch: str | None,
             embedding_model: str | None, as_json: bool) -> None:
    """LLM-free evidence for QUESTION: linked entities, the hubs they point to, and verbalised facts."""
    if (question is None) == (batch is None):
        raise click.UsageError("give a QUESTION or --batch FILE.jsonl (not both)")
    kg = _open_graph(store, endpoint, embedding_model)
    try:
        if batch is not None:
            from pathlib import Path

            from mirage_kg.errors import InputError

            for number, line in enumerate(Path(batch).read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    text = row.get("question", row.get("input"))
                except (ValueError, AttributeError):
                    raise InputError("not a JSON object", batch, number) from None
                if not isinstance(text, str):
                    raise InputError("no 'question' or 'input' string field", batch, number)
                click.echo(json.dumps(kg.retrieve(text, budget=budget).to_json(), ensure_ascii=False))
            return
        result = kg.retrieve(question or "", budget=budget)
    finally:
        kg.store.close()
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return
    click.echo("entities: " + (", ".join(f"{e.label} ({e.id})" for e in result.entities) or "none linked"))
    click.echo(f"evidence: {len(result.evidence)} facts, {len(result.evidence_entities())} entities")
    for line in result.to_text().splitlines():
        click.echo(f"  {line}")


def _write_text(path: str, text: str) -> None:
    from pathlib import Path

    from mirage_kg.cli.kg_commands import writable_destination, write_atomically

    data = text.encode("utf-8", "replace")  # a lone surrogate from a model must not stop the write
    write_atomically(writable_destination(Path(path)), lambda handle: handle.write(data))
    click.echo(f"wrote {path}", err=True)


# --- HTML pictures (self-contained: inline SVG and CSS, no scripts, no network) -----------------------------------

_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
            "#bab0ac"]
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; }} .muted {{ color: #666; font-size: 13px; }}
svg text {{ font-size: 12px; }} .node rect {{ fill: #fff; stroke: #555; rx: 6; }}
.center rect {{ fill: #fde9c9; stroke: #c77c02; }} .edge {{ stroke-width: 1.6; fill: none; }}
.rel {{ font-size: 10.5px; fill: #444; }} ol li {{ margin: 4px 0; }} table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: left; font-size: 13px; }}
</style></head><body>
<h1>{title}</h1><p class="muted">{subtitle}</p>
{body}
<p class="muted">Drawn by mirage-kg. Edge arrows follow the stored direction of each fact.</p>
</body></html>
"""


def _esc(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def _colour(key: str) -> str:
    import zlib

    return _PALETTE[zlib.crc32(key.encode("utf-8")) % len(_PALETTE)]


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _node(x: float, y: float, label: str, title: str, css: str = "node") -> str:
    width = 8 + 6.6 * len(_short(label))
    return (f'<g class="{css}"><title>{_esc(title)}</title><rect x="{x - width / 2:.1f}" y="{y - 12:.1f}" '
            f'width="{width:.1f}" height="24"/><text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">'
            f"{_esc(_short(label))}</text></g>")


def _arrow_defs(colours: set[str]) -> str:
    marks = "".join(f'<marker id="m{c[1:]}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                    f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
                    for c in sorted(colours))
    return f"<defs>{marks}</defs>"


def anchor_html(center: Entity, steps: Sequence[Step]) -> str:
    """A star: the entity in the middle, its neighbours on a circle, one coloured arrow per fact."""
    import math

    n = max(len(steps), 1)
    radius = max(180.0, 24.0 * n / math.pi)
    size = 2 * radius + 260
    cx = cy = size / 2
    parts, colours, rows = [], set(), []
    for i, step in enumerate(steps):
        angle = 2 * math.pi * i / n - math.pi / 2
        x, y = cx + radius * math.cos(angle), cy + radius * math.sin(angle)
        colour = _colour(step.relation.iri)
        colours.add(colour)
        # the arrow runs subject -> object whichever end the anchor is
        (x1, y1), (x2, y2) = ((cx, cy), (x, y)) if step.direction == "forward" else ((x, y), (cx, cy))
        dx, dy = x2 - x1, y2 - y1
        dist = math.hypot(dx, dy) or 1.0
        sx, sy, ex, ey = x1 + dx / dist * 30, y1 + dy / dist * 16, x2 - dx / dist * 30, y2 - dy / dist * 16
        parts.append(f'<line class="edge" x1="{sx:.1f}" y1="{sy:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" stroke="{colour}" '
                     f'marker-end="url(#m{colour[1:]})"><title>{_esc(step.text)}</title></line>')
        mx, my = (cx + x) / 2, (cy + y) / 2
        parts.append(f'<text class="rel" x="{mx:.1f}" y="{my - 4:.1f}" text-anchor="middle">'
                     f"{_esc(_short(step.relation.label, 22))}</text>")
        parts.append(_node(x, y, step.end.label, f"{step.end.label} ({step.end.id})"))
        rows.append(f"<tr><td>{_esc(step.relation.label)}</td><td>{step.direction}"
                    f"</td><td>{_esc(step.end.label)}</td><td>{_esc(step.end.id)}</td><td>{_esc(step.text)}</td></tr>")
    parts.append(_node(cx, cy, center.label, f"{center.label} ({center.id})", "node center"))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{size:.0f}" height="{size:.0f}" '
           f'viewBox="0 0 {size:.0f} {size:.0f}" role="img">{_arrow_defs(colours)}{"".join(parts)}</svg>')
    table = ("<table><tr><th>relation</th><th>dir</th><th>neighbour</th><th>id</th><th>fact</th></tr>"
             + "".join(rows) + "</table>")
    return _PAGE.format(title=_esc(f"Neighbourhood of {center.label}"),
                        subtitle=_esc(f"{center.id}: {len(steps)} neighbours"), body=svg + table)


def bridge_html(source: Entity, target: Entity, paths: Sequence[Path]) -> str:
    """One row per path, left to right from source to target; arrows follow each fact's stored direction."""
    gap, top, row_h = 210.0, 30.0, 70.0
    longest = max((p.length for p in paths), default=1)
    width = 120 + gap * longest
    height = top + row_h * max(len(paths), 1)
    parts, colours, items = [], set(), []
    for r, path in enumerate(paths):
        y = top + r * row_h + 20
        nodes = path.nodes
        for i, step in enumerate(path.steps):
            x1, x2 = 60 + gap * i, 60 + gap * (i + 1)
            colour = _colour(step.relation.iri)
            colours.add(colour)
            a, b = (x1 + 62, x2 - 62) if step.direction == "forward" else (x2 - 62, x1 + 62)
            parts.append(f'<line class="edge" x1="{a:.1f}" y1="{y:.1f}" x2="{b:.1f}" y2="{y:.1f}" stroke="{colour}" '
                         f'marker-end="url(#m{colour[1:]})"><title>{_esc(step.text)}</title></line>')
            parts.append(f'<text class="rel" x="{(x1 + x2) / 2:.1f}" y="{y - 8:.1f}" text-anchor="middle">'
                         f"{_esc(_short(step.relation.label, 26))}</text>")
        for i, node in enumerate(nodes):
            css = "node center" if i in (0, len(nodes) - 1) else "node"
            parts.append(_node(60 + gap * i, y, node.label, f"{node.label} ({node.id})", css))
        items.append(f"<li>{_esc(path.text)}</li>")
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img">{_arrow_defs(colours)}{"".join(parts)}</svg>')
    title = f"Paths from {source.label} to {target.label}"
    body = svg + ("<ol>" + "".join(items) + "</ol>" if items else "<p>No path found.</p>")
    return _PAGE.format(title=_esc(title), subtitle=_esc(f"{source.id} to {target.id}: {len(paths)} path(s)"),
                        body=body)
