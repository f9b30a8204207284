"""A warm ``mirage-kg ask``: with ``MIRAGE_KG_SERVER`` set to a running ``mirage-kg serve`` (its root URL, e.g.
``http://127.0.0.1:8000``; its token from ``MIRAGE_KG_TOKEN``), ``ask`` sends the question there instead of
loading the KG and the model itself, so a second ask costs the answer, not the start-up.

The server answers with its own store, model and pipeline: an option that would change those (``--model``,
``--backend``, ``--pipeline``, ``--set``, ``--html``, a ``--store`` other than the server's, ...) is refused with a
clear message rather than silently ignored; the budgets ``--n-q``, ``--n-r``, ``-k``, ``--max-hops``,
``--samples`` and ``--seed`` go with the question. The output is the same record (``--json``) or the same text
shape as a local ask."""

from __future__ import annotations

import json
from typing import Any

import click

from mirage_kg import REMOTE_SERVER_ENV as SERVER_ENV
from mirage_kg import remote_fetch as fetch
from mirage_kg import remote_server_url as server_url

__all__ = ["ask_remote", "print_record", "server_url"]

#: ask options the server takes per question (``/v1/ask`` overrides), by click parameter name
FORWARDED = {"n_q": "n_q", "n_r": "n_r", "k": "k", "max_hops": "max_hops", "samples": "samples", "seed": "seed"}
#: parameters that change nothing the server decides
HARMLESS = {"question", "as_json", "store", "endpoint", "max_in_flight"}


def _refuse_local_options(ctx: click.Context, url: str) -> dict[str, Any]:
    """The per-question overrides to send; a UsageError naming each option the server cannot honour."""
    sent: dict[str, Any] = {}
    refused: list[str] = []
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source in (click.core.ParameterSource.DEFAULT, None):
            continue
        if name in FORWARDED:
            sent[FORWARDED[name]] = ctx.params[name]
        elif name not in HARMLESS and source is not click.core.ParameterSource.ENVIRONMENT:
            refused.append(param.opts[0] if getattr(param, "opts", None) else name)
    if refused:
        raise click.UsageError(f"{', '.join(refused)}: the server at {url} ({SERVER_ENV}) answers with its own "
                               f"model and settings; unset {SERVER_ENV} to ask locally with these options")
    return sent


def ask_remote(ctx: click.Context, question: str, as_json: bool) -> None:
    """Ask the server at ``$MIRAGE_KG_SERVER`` and print its answer as a local ``ask`` would."""
    url = server_url()
    assert url is not None
    overrides = _refuse_local_options(ctx, url)
    record = fetch("/v1/ask", body={"question": question, **overrides}, store=ctx.params.get("store"),
                   endpoint=ctx.params.get("endpoint"), needs_model=True)
    if as_json:
        click.echo(json.dumps(record, indent=2, ensure_ascii=False))
    else:
        print_record(record)
    click.echo(f"(answered by the server at {url})", err=True)


def print_record(record: dict[str, Any]) -> None:
    """An ``ask --json`` record as the text a local ``ask`` prints: the answer, how grounded it is, the claims
    with the paths they rest on, then notes and a summary line on stderr."""
    from mirage_reason.service.openai_chat import grounding

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
