"""``load``, ``stats``, ``export`` and ``version``."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from mirage_kg.cli.index_command import index_options, run_index_step
from mirage_kg.cli.main import endpoint_auth_options, store_options
from mirage_kg.errors import InputError, UpdateInterrupted

if TYPE_CHECKING:
    from mirage_kg.loaders.base import LoadOptions, LoadReport, Loader
    from mirage_kg.store.base import Store

FORMAT_CHOICES = ["auto", "rdf", "triples", "umls", "snomed", "obo", "owl", "hpoa", "nt", "nq", "ttl", "trig",
                  "rdfxml", "jsonld"]


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--store", metavar="DIR", type=click.Path(file_okay=False),
              help="On-disk store folder, created if absent [default: $MIRAGE_KG_STORE].")
@click.option("--endpoint", metavar="URL", help="Load into a SPARQL 1.1 endpoint instead.")
@endpoint_auth_options
@click.option("--chunk-size", type=click.IntRange(min=1), metavar="TRIPLES",
              help="Endpoint: triples per INSERT DATA [default: 10,000, halved while the endpoint finds it too big].")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="auto", show_default=True,
              help="Source format; auto asks each loader whether it can read the path.")
@click.option("--graph", metavar="NAME", help="Named graph for the load [default: one per source file].")
@click.option("--namespace", metavar="IRI", help="Namespace for entity IRIs minted from names (triple files).")
@click.option("--lang", default="en", show_default=True, callback=lambda ctx, param, value: checked_langs(value),
              help="Language tag for labels (triple files); "
              "language filter (UMLS).")
@click.option("--base", "base_iri", metavar="IRI",
              help="RDF: the base IRI for relative IRIs in a file that states none (@base, xml:base); without "
                   "one, a relative IRI is an error.")
@click.option("--lenient", is_flag=True, help="Skip bad rows and report them instead of failing.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report of skipped rows as JSON.")
@click.option("--sab", multiple=True, help="UMLS: keep only these source vocabularies (repeatable).")
@click.option("--include-suppressed", is_flag=True, help="UMLS: keep suppressed rows.")
@click.option("--relations", "relation_filter", multiple=True, help="UMLS: keep only these REL/RELA (repeatable).")
@click.option("--stated", is_flag=True, help="SNOMED CT: use stated instead of inferred relationships.")
@click.option("--keep-inactive", is_flag=True, help="SNOMED CT: keep inactive concepts, marked inactive.")
@click.option("--update", "as_update", is_flag=True,
              help="A new release over the graph holding this source's previous one: apply the difference in one "
                   "atomic step and print it (SNOMED CT Delta folders apply over the previous release's files).")
@click.option("--force", is_flag=True,
              help="With --update: apply a release even when it shares almost nothing with the graph it replaces "
                   "or is of another kind of source (refused otherwise, as a file given by mistake).")
@index_options
def load(paths: tuple[Path, ...], store: str | None, endpoint: str | None, chunk_size: int | None, fmt: str,
         graph: str | None,
         namespace: str | None, lang: str, base_iri: str | None, lenient: bool, report_path: Path | None, sab: tuple[str, ...],
         include_suppressed: bool, relation_filter: tuple[str, ...], stated: bool, keep_inactive: bool,
         as_update: bool, force: bool, index: bool, embeddings: bool | None) -> None:
    """Load PATHS (files or release folders) into a store, each into its own named graph, atomically; with
    --update, bring an existing graph to a new release of its source. Then build the query indexes (--no-index
    skips that)."""
    from mirage_kg.loaders import LoadReport, detect, get_loader
    from mirage_kg.store import open_store

    if store is None and endpoint is None:
        store = os.environ.get("MIRAGE_KG_STORE")
        if store is None:
            raise click.UsageError("give --store DIR (or set MIRAGE_KG_STORE) or --endpoint URL to load into")
    report_target = writable_destination(report_path) if report_path else None  # before a load commits
    options, fmt = _load_options(fmt, lang, lenient, namespace, graph, base_iri, sab, include_suppressed,
                                 relation_filter, stated, keep_inactive, as_update, force)
    report = LoadReport()
    fresh = _fresh_folder(store) if endpoint is None else None
    fresh_existed = fresh is not None and fresh.exists()
    target = open_store(store, endpoint, create=True, chunk_triples=chunk_size)
    target.report = lambda line: click.echo(line, err=True)  # a long load into an endpoint says how far it got
    outcome = _Outcome()
    failed = True
    try:
        for path in paths:
            if not path.exists():
                raise InputError("no such file or folder", path)
            loader = detect(path) if fmt == "auto" else get_loader(fmt)
            if as_update:
                _update_graph(target, path, loader, options, report, outcome)
            else:
                _load_graphs(target, path, loader, options, report, outcome)
        failed = False
        try:
            run_index_step(target, index, embeddings, lambda s: click.echo(s, err=True))
        except KeyboardInterrupt:
            click.echo("warning: interrupted during the index step, after the load committed: the data is in the "
                       "store; `mirage-kg index` builds the indexes (or the first query that needs them)", err=True)
            raise SystemExit(130) from None
    finally:
        target.close()
        if failed and not outcome.committed and fresh is not None:
            _remove_new_store(fresh, fresh_existed)
        _end_report(report, report_path, report_target)


def _load_options(fmt: str, lang: str, lenient: bool, namespace: str | None, graph: str | None,
                  base_iri: str | None, sab: tuple[str, ...], include_suppressed: bool,
                  relation_filter: tuple[str, ...], stated: bool, keep_inactive: bool, as_update: bool,
                  force: bool) -> tuple[LoadOptions, str]:
    """``load``'s options as the loaders read them, and the format to load (an RDF syntax is the rdf loader's
    ``rdf_format``); a usage error for ``--force`` without ``--update`` or a ``--base`` that is no IRI."""
    from mirage_kg.loaders import LoadOptions
    from mirage_kg.model.namespaces import GRAPH, expand, mint
    from mirage_kg.store import RDF_FORMATS

    options = LoadOptions(lang=lang, lenient=lenient)
    if namespace:
        options.namespace = expand(namespace) if ":" in namespace and not namespace.startswith("http") else namespace
    if graph:
        # a plain name is a path under GRAPH:, each segment minted, so `--graph triples/x.tsv` is the graph that
        # stats shows as GRAPH:triples/x.tsv (not GRAPH:triples%2Fx.tsv)
        options.graph = expand(graph) if graph.startswith(("http", "urn:", "<")) or ":" in graph else \
            GRAPH + "/".join(mint("", segment) for segment in graph.strip("/").split("/"))
    options.extra.update(sab=list(sab), include_suppressed=include_suppressed, relations=list(relation_filter),
                         stated=stated, keep_inactive=keep_inactive)
    if force:
        if not as_update:
            raise click.UsageError("--force goes with --update (a plain load never replaces a graph)")
        options.extra["force"] = True
    if base_iri:
        import pyoxigraph as ox

        try:
            options.extra["base_iri"] = ox.NamedNode(base_iri).value
        except ValueError as exc:
            raise click.BadParameter(f"{base_iri!r} is not an absolute IRI: {exc}", param_hint="--base") from None
    if fmt in RDF_FORMATS:
        options.extra["rdf_format"] = fmt
        fmt = "rdf"
    return options, fmt


class _Outcome:
    """Whether a load or an update of this command committed (a new store is then kept when a later one fails)."""

    committed = False


def _load_graphs(target: Store, path: Path, loader: Loader, options: LoadOptions, report: LoadReport,
                 outcome: _Outcome) -> None:
    """Load ``path`` into its named graph(s), with its release recorded; one line per graph committed."""
    from mirage_kg.releases.provenance import load_recorded

    for receipt in load_recorded(target, path=path, loader=loader, options=options, report=report):
        outcome.committed = True
        click.echo(f"loaded {path} ({loader.name}): +{receipt.added:,} triples into <{receipt.graph}>")


def _update_graph(target: Store, path: Path, loader: Loader, options: LoadOptions, report: LoadReport,
                  outcome: _Outcome) -> None:
    """``load --update``: bring the graph holding this source's previous release to the release at ``path`` and
    print the difference; a Ctrl-C says what was applied and ends the command."""
    from mirage_kg.releases import update_release

    try:
        result = update_release(target, path, loader, options, report)
    except UpdateInterrupted as exc:
        outcome.committed = outcome.committed or exc.applied is not False
        _interrupted_update(exc)
    except KeyboardInterrupt:
        raise click.ClickException("interrupted while the new release was being compared: nothing "
                                   "was applied (the graph holds what it held)") from None
    for line in result.diff.lines():
        click.echo(line)
    outcome.committed = True
    click.echo(f"updated <{result.graph}> to {result.release.citation()}")
    if result.labels_updated is not None:
        click.echo(f"label index: carried over, {result.labels_updated:,} label rows re-read for the "
                   "changed entities (not rebuilt)")


def _end_report(report: LoadReport, report_path: Path | None, report_target: Path | None) -> None:
    """The warnings and skipped rows on stderr, and with ``--report`` the report as JSON."""
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if report.total or report_path:
        _print_report(report)
        if report_target is not None:
            data = json.dumps(report.to_json(), indent=2).encode("utf-8")
            write_atomically(report_target, lambda handle: handle.write(data))


def _interrupted_update(exc: UpdateInterrupted) -> None:
    """The truth about a Ctrl-C during ``load --update``, then the end of the command: exit 1 when nothing was
    applied, 130 when the update was applied (or may have been, on an endpoint) before the command could finish.
    A native transaction still running (``abandoned``) ends with the process, at once: its rollback is on disk."""
    code = 1 if exc.applied is False else 130
    click.echo(f"Error: {exc}" if exc.applied is False else f"warning: {exc}", err=True)
    if exc.applied:
        click.echo("the index step did not run: `mirage-kg index` builds the indexes", err=True)
    if exc.abandoned:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


def _fresh_folder(store: str | None) -> Path | None:
    """The store folder when this load creates it (absent, or an empty folder): a first load that fails then
    leaves no store holding only the schema behind."""
    if store is None:
        return None
    folder = Path(store)
    try:
        if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
            return folder
    except OSError:
        return None
    return None


def _remove_new_store(folder: Path, existed: bool) -> None:
    """Remove the store folder a failed first load created (or empty it again, had it been there empty)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    if existed:
        folder.mkdir(exist_ok=True)


_LANG_TAG = re.compile(r"[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*")


def checked_langs(value: str) -> str:
    """``--lang``: a language tag (``en``, ``pt-BR``), a UMLS LAT (``ENG``), a comma-separated list of them, or
    ``all``; anything else (``'e n'``) is a usage error, not labels tagged with garbage."""
    parts = [p.strip() for p in value.split(",")] if value else []
    if value and value.strip().lower() not in ("all", "*", "any") and (
            not parts or not all(_LANG_TAG.fullmatch(p) for p in parts)):
        raise click.BadParameter(f"{value!r} is not a language tag (such as en or pt-BR), a list of them "
                                 "(en,fr) or all", param_hint="--lang")
    return value


def _print_report(report: LoadReport) -> None:
    data = report.to_json()
    if not data["skipped"]:
        return
    click.echo(f"skipped {data['skipped']:,} rows:", err=True)
    for reason in data["reasons"]:
        first = reason["examples"][0] if reason["examples"] else {}
        where = f" (first: {first.get('file')}:{first.get('line')} {first.get('detail', '')})" if first else ""
        click.echo(f"  {reason['count']:>8,}  {reason['reason']}{where}", err=True)


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(store: str | None, endpoint: str | None, as_json: bool) -> None:
    """Triples, facts, entities, relations with counts, label and type triples, and graphs."""
    from mirage_kg.graph.stats import compute_stats
    from mirage_kg.store import open_store

    with open_store(store, endpoint) as opened:
        result = compute_stats(opened)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # labels, ids and names are data, never rich markup

    console = Console()
    summary = Table(title=Text(f"store {opened.location}"), show_header=False)
    for key in ("triples", "facts", "entities", "labels", "types", "other"):
        summary.add_row(key, f"{getattr(result, key):,}")
    console.print(summary)
    rels = Table(title="relations")
    rels.add_column("relation")
    rels.add_column("label")
    rels.add_column("facts", justify="right")
    for rel in result.relations:
        rels.add_row(Text(str(rel["id"])), Text(str(rel["label"])), f"{rel['count']:,}")
    console.print(rels)
    graphs = Table(title="graphs")
    graphs.add_column("graph")
    graphs.add_column("triples", justify="right")
    graphs.add_column("source")
    graphs.add_column("release")
    for g in result.graphs:
        release = g.get("release")
        shown = ""
        if isinstance(release, dict) and release:
            details = release.get("details") or {}
            stated = details.get("effective_time") or details.get("version_iri") or details.get("data_version")
            shown = f"{release['source']} {release['release']}" + (f" ({stated})" if stated else "")
            shown += f", loaded {str(release['loaded_at'])[:19]}"
        graphs.add_row(Text(str(g["name"])), f"{g['triples']:,}", Text(str(g["source"] or "")), Text(shown))
    console.print(graphs)


@click.command()
@store_options
@click.option("--format", "fmt", type=click.Choice(["nt", "ttl", "nq"]), required=True, help="Output syntax.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="File [default: stdout].")
def export(store: str | None, endpoint: str | None, fmt: str, output: Path | None) -> None:
    """Write the store as N-Triples or Turtle (the union of graphs) or N-Quads (with graph names)."""
    from mirage_kg.store import RDF_FORMATS, open_store

    media = RDF_FORMATS[fmt][0]
    destination = writable_destination(output) if output is not None else None
    with open_store(store, endpoint) as opened:
        if destination is None:
            opened.export(sys.stdout.buffer, media)
            sys.stdout.buffer.flush()
            return
        write_atomically(destination, lambda handle: opened.export(handle, media))
    click.echo(f"wrote {output}", err=True)


def writable_destination(path: Path) -> Path:
    """Where an output file really goes (a symlink is followed to its target), checked writable before any work
    is done, so a bad ``-o``, ``--html`` or ``--report`` fails in one line and before a load commits."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise InputError("is a folder; give a file name", path)
    if target.exists():
        if not os.access(target, os.W_OK):
            raise InputError("cannot write: permission denied", path)
    else:
        folder = target.parent
        if not folder.is_dir():
            raise InputError(f"cannot write: no such folder {folder}", path)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(f"cannot write: permission denied in {folder}", path)
    return target


def write_atomically(target: Path, write: "Callable[[BinaryIO], object]") -> None:
    """A regular file is written beside itself and renamed over, so a failed write leaves the old one whole; a
    device, pipe or socket (``/dev/stdout``, a FIFO) is written in place, never replaced by a file."""
    try:
        if target.exists() and not target.is_file():
            with open(target, "wb") as handle:
                write(handle)
            return
        remove_stale_parts(target)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
        try:
            with open(tmp, "wb") as handle:
                write(handle)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", target) from exc


_PART = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.part")


def remove_stale_parts(target: Path) -> list[Path]:
    """Delete the ``.NAME.PID.part`` files beside ``target`` that a killed writer of it left (their process is
    gone); a live process's part is left alone. Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(target.parent.glob(f".{glob_escape(target.name)}.*.part"))
    except OSError:
        return removed
    for part in candidates:
        match = _PART.fullmatch(part.name)
        if match is None or match.group("name") != target.name or not part.is_file():
            continue
        pid = int(match.group("pid"))
        if pid != os.getpid() and _alive(pid):
            continue
        try:
            part.unlink()
            removed.append(part)
        except OSError:
            pass  # not ours to remove (permissions): the next run tries again
    return removed


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def _alive(pid: int) -> bool:
    from mirage_kg.store.sparql import process_alive  # the one liveness test (os.kill with signal 0)

    return process_alive(pid)


@click.command()
def version() -> None:
    """Versions of mirage-kg and its key dependencies (for bug reports)."""
    from importlib import metadata

    import platform

    names = ["mirage-kg", "pyoxigraph", "rdflib", "click", "httpx", "rapidfuzz", "pyshacl", "owlready2",
             "sentence-transformers", "transformers", "accelerate", "torch"]
    click.echo(f"python {platform.python_version()}")
    for name in names:
        try:
            click.echo(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            click.echo(f"{name} (not installed)")
