"""A warm ``mirage-kg ask``: with ``MIRAGE_KG_SERVER`` set to a running ``mirage-kg serve`` (its root URL, e.g.
``http://127.0.0.1:8000``; its token from ``MIRAGE_KG_TOKEN``), ``ask`` sends the question there instead of
loading the KG and the model itself, so a second ask costs the answer, not the start-up.

With ``MIRAGE_KG_WARM`` set instead, the server is a background ``mirage-kg serve`` for this store and these model
options, started by the first such call and left running until idle (``mirage_kg.cli.warm_server``); the model
options then go to its command line rather than being refused.

The server answers with its own store, model and pipeline: an option that would change those (``--model``,
``--backend``, ``--pipeline``, ``--set``, ``--html``, a ``--store`` other than the server's, ...) is refused with a
clear message rather than silently ignored; the budgets ``--n-q``, ``--n-r``, ``-k``, ``--max-hops``,
``--samples`` and ``--seed`` go with the question. The output is the same record (``--json``) or the same text
shape as a local ask."""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from mirage_kg import REMOTE_SERVER_ENV as SERVER_ENV
from mirage_kg import remote_fetch as fetch
from mirage_kg import remote_server_url as server_url

if TYPE_CHECKING:
    from mirage_kg import WarmServer

__all__ = ["ask_remote", "grounding", "print_record", "server_url", "warm_server_for"]

#: ask options the server takes per question (``/v1/ask`` overrides), by click parameter name
FORWARDED = {"n_q": "n_q", "n_r": "n_r", "k": "k", "max_hops": "max_hops", "samples": "samples", "seed": "seed"}
#: parameters that change nothing the server decides
HARMLESS = {"question", "as_json", "store", "endpoint", "max_in_flight"}
#: ask options a background server (``MIRAGE_KG_WARM``) takes on its command line, by click parameter name
SERVE_OPTIONS = {"backend_kind": "--backend", "model": "--model", "base_url": "--base-url", "pipeline": "--pipeline",
                 "max_new_tokens": "--max-new-tokens", "embedding_model": "--embedding-model", "script": "--script"}


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)


def _refuse_local_options(ctx: click.Context, url: str, allowed: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The per-question overrides to send; a UsageError naming each option the server cannot honour (``allowed``:
    those the server was started with)."""
    sent: dict[str, Any] = {}
    refused: list[str] = []
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source in (click.core.ParameterSource.DEFAULT, None) or name in allowed:
            continue
        if name in FORWARDED:
            sent[FORWARDED[name]] = ctx.params[name]
        elif name == "no_cache":
            sent["cache"] = not ctx.params[name]
        elif name not in HARMLESS and source is not click.core.ParameterSource.ENVIRONMENT:
            refused.append(param.opts[0] if getattr(param, "opts", None) else name)
    if refused:
        raise click.UsageError(f"{', '.join(refused)}: the server at {url} ({SERVER_ENV}) answers with its own "
                               f"model and settings; unset {SERVER_ENV} to ask locally with these options")
    return sent


def warm_server_for(ctx: click.Context, what: str = "ask") -> WarmServer | None:
    """The background server ``$MIRAGE_KG_WARM`` asks for (running, or started now) for this call's store and
    model options; None when warm start is off, or when an option only a local run honours was given (said)."""
    from mirage_kg import ensure_warm_server as ensure_server
    from mirage_kg import warm_idle
    from mirage_kg import warm_store_argument as store_argument

    idle = warm_idle()
    if idle is None:
        return None
    local = [param.opts[0] for param in ctx.command.params if param.name and _given(ctx, param.name)
             and param.name not in (*FORWARDED, *HARMLESS, *SERVE_OPTIONS, "no_cache", "top", "whole", "text")
             and ctx.get_parameter_source(param.name) is not click.core.ParameterSource.ENVIRONMENT]
    if local:
        click.echo(f"note: {', '.join(local)}: a background server cannot honour this; {what} runs here", err=True)
        return None
    serve_args: list[str] = []
    for name, flag in SERVE_OPTIONS.items():
        value = ctx.params.get(name)
        if value is not None and _given(ctx, name):
            serve_args += [flag, str(Path(value).resolve()) if name == "script" else str(value)]
    kg_args = store_argument(ctx.params.get("store"), ctx.params.get("endpoint"))
    return ensure_server(kg_args, serve_args, idle, say=lambda text: click.echo(text, err=True))


def ask_remote(ctx: click.Context, question: str, as_json: bool, server: WarmServer | None = None) -> None:
    """Ask the server at ``$MIRAGE_KG_SERVER`` (or the background ``server``) and print its answer as a local
    ``ask`` would, saying when it came from the server's answer cache."""
    url = server.url if server is not None else server_url()
    assert url is not None
    overrides = _refuse_local_options(ctx, url, frozenset(SERVE_OPTIONS) if server is not None else frozenset())
    record = fetch("/v1/ask", body={"question": question, **overrides}, store=ctx.params.get("store"),
                   endpoint=ctx.params.get("endpoint"), needs_model=True,
                   url=url, token=server.token if server is not None else None)
    if as_json:
        click.echo(json.dumps(record, indent=2, ensure_ascii=False))
    else:
        print_record(record)
    by = f"the background server at {url} ({'started now' if server.started else 'warm'})" if server is not None \
        else f"the server at {url}"
    click.echo(f"(answered by {by})", err=True)


def cache_note(record: dict[str, Any]) -> str | None:
    """How a record served from the answer cache says so, or None."""
    cache = record.get("cache")
    if not cache:
        return None
    answered = (record.get("timings") or {}).get("total")
    took = f", answered then in {answered:.1f} s" if isinstance(answered, (int, float)) else ""
    return f"(served from cache of {cache['served_from']}{took}; --no-cache asks the model again)"


def print_record(record: dict[str, Any]) -> None:
    """An ``ask --json`` record as the text a local ``ask`` prints: the answer, how grounded it is, the claims
    with the paths they rest on, then notes and a summary line on stderr."""
    note = cache_note(record)
    if note:
        click.echo(note + "\n")
    click.echo(record.get("answer", ""))
    click.echo(f"\n{grounding(record)}")
    claims = record.get("claims") or []
    if claims:
        click.echo("\nClaims and the knowledge-graph paths they rest on:")
        for i, claim in enumerate(claims, start=1):
            click.echo(f"  [{i}] {claim.get('text', '')}")
            for path in claim.get("citations") or []:
                held = path.get("sources") or []
                click.echo(f"      - {path.get('text', '')}" + (f" [{', '.join(held)}]" if held else ""))
    for flag in record.get("flags") or []:
        click.echo(f"note: {flag.get('message', flag.get('code')) if isinstance(flag, dict) else flag}", err=True)
    timings, tokens = record.get("timings") or {}, record.get("tokens") or {}
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items() if v >= 0.05 and k != "total")
    click.echo(f"\n{len(record.get('sub_questions') or [])} sub-question(s), {len(record.get('chains') or [])} "
               f"chain(s), {tokens.get('total', 0)} tokens, {timings.get('total', 0.0):.1f} s ({stages})", err=True)


def grounding(record: Mapping[str, Any]) -> str:
    """The record's support verdict as the line a reader sees under the answer (CLI text, chat message)."""
    support = record.get("support")
    if isinstance(support, Mapping) and support.get("verdict"):
        reason = f": {support['reason']}" if support.get("reason") else ""
        return f"Grounding: {support['verdict']}{reason}"
    claims = record.get("claims") or []
    backed = sum(1 for c in claims if c.get("citations"))
    if record.get("abstained"):
        return "Grounding: none. The knowledge graph did not support an answer, so none is given."
    if not backed:
        return "Grounding: unsupported. No claim here is backed by a knowledge-graph path."
    return f"Grounding: {backed} of {len(claims)} claim(s) rest on the knowledge-graph paths below."
