"""``mirage-kg serve``: open the KG read-only, set up the ask queue and run the API and web app under uvicorn.

FastAPI and uvicorn are imported inside the command, so listing commands (``mirage-kg --help``) stays fast."""

from __future__ import annotations

import os
from typing import Any

import click

from mirage_kg import MirageError, MissingExtraError, open_store

from mirage_reason.backends.defaults import ENGINES
from mirage_reason.pipeline.config import PIPELINES

__all__ = ["mcp_command", "serve"]

TOKEN_ENV = "MIRAGE_KG_TOKEN"


@click.command("serve")
@click.option("--store", "store", metavar="DIR", type=click.Path(file_okay=False),
              help="On-disk store folder, opened read-only [default: $MIRAGE_KG_STORE, else the built-in demo KG].")
@click.option("--endpoint", metavar="URL", envvar="MIRAGE_KG_ENDPOINT", help="SPARQL 1.1 query endpoint.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; anything but loopback exposes the KG (use --token).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--token", metavar="T", envvar=TOKEN_ENV, show_envvar=True,
              help="Require 'Authorization: Bearer T' on every request (the web app: open /?token=T once).")
@click.option("--cors", "cors", multiple=True, metavar="ORIGIN",
              help="Allow cross-site requests from ORIGIN (repeatable) [default: CORS off].")
@click.option("--backend", "backend_kind", type=click.Choice([*ENGINES, "openai"]), default="auto",
              show_default=True, help="Where the model for asks runs (as in `mirage-kg ask`; auto: transformers "
              "with a CUDA GPU, else llama.cpp in process, else llama.cpp's server).")
@click.option("--model", metavar="ID", help="Model for asks (as in `mirage-kg ask`).")
@click.option("--base-url", metavar="URL", envvar="MIRAGE_KG_BASE_URL", help="OpenAI-compatible root URL.")
@click.option("--no-ask", is_flag=True, help="Serve the graph only: no model is loaded, asks answer 503.")
@click.option("--pipeline", type=click.Choice(list(PIPELINES)), default="mirage", show_default=True)
@click.option("--max-new-tokens", type=click.IntRange(min=1), help="Tokens per generation step (as in `ask`).")
@click.option("--ask-workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model runs at once.")
@click.option("--ask-queue", type=click.IntRange(min=0), default=4, show_default=True,
              help="Asks that may wait for a worker; past this an ask gets 429 with Retry-After.")
@click.option("--request-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds a graph request may take (504 after).")
@click.option("--ask-timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds an ask may take.")
@click.option("--embedding-model", metavar="NAME", envvar="MIRAGE_KG_EMBEDDING_MODEL",
              help="Sentence-transformers model for linking [default: the offline all-MiniLM-L6-v2]; 'none': off.")
@click.option("--script", hidden=True, type=click.Path(exists=True, dir_okay=False),
              help="Replay a scripted model from a JSON file (tests).")
@click.option("--allow-service", "allow_service", multiple=True, metavar="URL",
              help="Let SPARQL SERVICE call this endpoint (repeatable); refused otherwise (the server would send "
                   "requests to any host a query names).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
@click.option("--idle-exit", type=click.FloatRange(min=1), metavar="SECONDS",
              help="Exit once no request has come for SECONDS (the background server of a warm `ask` runs so).")
def serve(store: str | None, endpoint: str | None, host: str, port: int, token: str | None, cors: tuple[str, ...],
          backend_kind: str, model: str | None, base_url: str | None, no_ask: bool, pipeline: str,
          max_new_tokens: int | None, ask_workers: int, ask_queue: int, request_timeout: float,
          ask_timeout: float, embedding_model: str | None, script: str | None, allow_service: tuple[str, ...],
          log_level: str, idle_exit: float | None) -> None:
    """Serve the KG and MIRAGE over HTTP: JSON under /v1/ (the same shapes as --json; OpenAPI at /openapi.json)
    and a web app at / to search concepts, draw neighbourhoods and paths, and watch answers being made.

    Nothing writes to the store. Not medical advice."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import uvicorn

        from mirage_reason.service.app import create_app
    except ImportError as exc:
        raise MissingExtraError(exc.name or "fastapi", "serve") from None
    from mirage_reason.service.settings import ServiceSettings

    try:
        settings = ServiceSettings(token=token, cors_origins=cors, host=host, request_timeout=request_timeout,
                                   ask_workers=ask_workers, ask_queue=ask_queue, ask_timeout=ask_timeout,
                                   sparql_services=tuple(allow_service))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    kg, asks = _open(store, endpoint, embedding_model, None if no_ask else (backend_kind, model, base_url, script),
                     pipeline, max_new_tokens, workers=ask_workers, queue=ask_queue)
    if host not in ("127.0.0.1", "localhost", "::1") and token is None:
        click.echo(f"warning: listening on {host} with no --token: anyone who can reach it can read the KG and "
                   "run the model", err=True)
    app = create_app(kg, asks, settings)
    click.echo(f"serving {kg.store.location} on http://{host}:{port}/ (API: /v1/, OpenAPI: /openapi.json; "
               "OpenAI-compatible chat: /v1/chat/completions; SPARQL 1.1 Protocol: /sparql; MCP: /mcp)"
               f"{'; token required' if token else ''}", err=True)
    served: Any = app
    if idle_exit is not None:
        from mirage_reason.service.idle import IdleExit

        def stop() -> None:
            click.echo(f"no request for {idle_exit:g} s: exiting (--idle-exit)", err=True)
            server.should_exit = True

        served = IdleExit(app, idle_exit, stop)
    server = uvicorn.Server(uvicorn.Config(served, host=host, port=port, log_level=log_level,
                                           timeout_graceful_shutdown=5, limit_concurrency=256,
                                           h11_max_incomplete_event_size=16 * 1024))
    server.run()


@click.command("mcp")
@click.option("--store", "store", metavar="DIR", type=click.Path(file_okay=False),
              help="On-disk store folder, opened read-only [default: $MIRAGE_KG_STORE, else the built-in demo KG].")
@click.option("--endpoint", metavar="URL", envvar="MIRAGE_KG_ENDPOINT", help="SPARQL 1.1 query endpoint.")
@click.option("--backend", "backend_kind", type=click.Choice([*ENGINES, "openai"]), default="auto",
              show_default=True, help="Where the model for the ask tool runs (as in `mirage-kg ask`).")
@click.option("--model", metavar="ID", help="Model for the ask tool (as in `mirage-kg ask`).")
@click.option("--base-url", metavar="URL", envvar="MIRAGE_KG_BASE_URL", help="OpenAI-compatible root URL.")
@click.option("--no-ask", is_flag=True, help="The graph tools only: no model is loaded and there is no ask tool.")
@click.option("--pipeline", type=click.Choice(list(PIPELINES)), default="mirage", show_default=True)
@click.option("--max-new-tokens", type=click.IntRange(min=1), help="Tokens per generation step (as in `ask`).")
@click.option("--embedding-model", metavar="NAME", envvar="MIRAGE_KG_EMBEDDING_MODEL",
              help="Sentence-transformers model for linking [default: the offline all-MiniLM-L6-v2]; 'none': off.")
@click.option("--allow-service", "allow_service", multiple=True, metavar="URL",
              help="Let SPARQL SERVICE call this endpoint (repeatable); refused otherwise.")
@click.option("--script", hidden=True, type=click.Path(exists=True, dir_okay=False),
              help="Replay a scripted model from a JSON file (tests).")
def mcp_command(store: str | None, endpoint: str | None, backend_kind: str, model: str | None, base_url: str | None,
                no_ask: bool, pipeline: str, max_new_tokens: int | None, embedding_model: str | None,
                allow_service: tuple[str, ...], script: str | None) -> None:
    """Serve the KG's tools to an MCP client over stdio: link, anchor, bridge, read-only SPARQL, the differential
    and ask (MIRAGE's answer with its cited paths), each with a JSON schema. An agent starts this as a subprocess;
    `mirage-kg serve` offers the same tools over streamable HTTP at /mcp.

    Nothing writes to the store; stdout carries only the protocol. Not medical advice."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import mcp.server  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(exc.name or "mcp", "mcp") from None
    from mirage_reason.service.mcp_server import build_mcp

    kg, asks = _open(store, endpoint, embedding_model, None if no_ask else (backend_kind, model, base_url, script),
                     pipeline, max_new_tokens)
    import threading

    from mirage_reason.service.warmup import warm_linker

    threading.Thread(target=warm_linker, args=(kg,), name="mirage-labels", daemon=True).start()
    click.echo(f"mirage-kg mcp: {kg.store.location} on stdio{'' if asks else ' (no ask tool)'}", err=True)
    try:
        build_mcp(kg, asks, sparql_services=allow_service).run("stdio")
    finally:
        if asks is not None:
            asks.close()


def _open(store: str | None, endpoint: str | None, embedding_model: str | None,
          model: tuple[str, str | None, str | None, str | None] | None, pipeline: str, max_new_tokens: int | None,
          **queue: int) -> tuple[Any, Any]:
    """The KG, opened read-only, and its ask service (None when ``model`` is None, i.e. ``--no-ask``); ``model`` is
    (backend kind, model id, base URL, script) as ``mirage-kg ask`` takes them."""
    from mirage_kg import KnowledgeGraph

    from mirage_reason.cli import ask_config, serve_backend
    from mirage_reason.service.asks import AskService

    if store is not None and endpoint is not None:
        raise click.UsageError("give either --store or --endpoint, not both")
    try:
        # readers open the store read-only (shared with other readers and a writer): nothing here can write to it
        kg = KnowledgeGraph(open_store(store, endpoint), embedding_model=embedding_model)
        asks = None
        if model is not None:
            backend, small = serve_backend(*model)
            asks = AskService(kg, backend, ask_config(pipeline, small, max_new_tokens), **queue)
    except MirageError as exc:
        raise click.ClickException(str(exc)) from None
    return kg, asks
