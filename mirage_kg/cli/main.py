"""The ``mirage-kg`` group. Commands load lazily so ``mirage-kg --help`` stays fast and ``mirage_kg`` never
imports the reasoner until ``ask`` or ``eval`` runs. A ``MirageError`` becomes one clear line and exit 1."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

import click

from mirage_kg.errors import MirageError

# command name -> "module:attribute"; a module that is not installed simply has no command.
COMMANDS: dict[str, str] = {
    "load": "mirage_kg.cli.kg_commands:load",
    "stats": "mirage_kg.cli.kg_commands:stats",
    "export": "mirage_kg.cli.kg_commands:export",
    "diff": "mirage_kg.cli.release_commands:diff",
    "query": "mirage_kg.cli.query_commands:query",
    "link": "mirage_kg.cli.query_commands:link",
    "retrieve": "mirage_kg.cli.query_commands:retrieve",
    "validate": "mirage_kg.cli.validate_command:validate",
    "build-default": "mirage_kg.cli.build_default_command:build_default",
    "index": "mirage_kg.cli.index_command:index",
    "version": "mirage_kg.cli.kg_commands:version",
    "ask": "mirage_reason.cli:ask",
    "eval": "mirage_reason.evaluation.cli:eval_command",
    "serve": "mirage_reason.service.command:serve",
    "mcp": "mirage_reason.service.command:mcp_command",
}


def _available(target: str) -> bool:
    module = target.split(":")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class MirageGroup(click.Group):
    """Lazy commands, and MirageError -> ClickException (exit 1, one line, no traceback)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx)) | {n for n, t in COMMANDS.items() if _available(t)}
        return sorted(n for n in names if self.get_command(ctx, n) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        target = COMMANDS.get(cmd_name)
        if target is None or not _available(target):
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr, None)

    def invoke(self, ctx: click.Context) -> Any:
        import warnings

        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MirageError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:  # the system's own errors (disk full, permissions) are one line too, with the file
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            raise click.ClickException(f"{where}{exc.strerror or exc}") from None
        except KeyboardInterrupt as exc:
            from mirage_kg.errors import UpdateInterrupted

            if isinstance(exc, UpdateInterrupted):  # it says what was applied; a running transaction ends here
                click.echo(f"Error: {exc}", err=True)
                if exc.abandoned:
                    import os
                    import sys

                    sys.stderr.flush()
                    os._exit(1 if exc.applied is False else 130)
                raise SystemExit(1 if exc.applied is False else 130) from None
            raise click.ClickException("interrupted; nothing was half-written (loads are atomic)") from None


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: Any = None, line: str | None = None) -> None:
    """Our own warnings (``StoreStateWarning``) as one line on stderr, not Python's file-and-source form."""
    from mirage_kg.errors import StoreStateWarning

    if issubclass(category, StoreStateWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        import warnings

        click.echo(warnings.formatwarning(message, category, filename, lineno, line), err=True, nl=False)


@click.group(cls=MirageGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def main() -> None:
    """MIRAGE-KG: build, validate and query medical knowledge graphs, and answer questions over them.

    Commands that read a graph take --store DIR (default: $MIRAGE_KG_STORE, else the built-in demo KG) or
    --endpoint URL (any SPARQL 1.1 endpoint)."""


def _credential_to_environment(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """Endpoint credentials travel to the store through its environment variables, so that no command needs
    another parameter and nothing prints them."""
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        import os

        if value:
            os.environ[name] = str(value)
    return callback


def endpoint_auth_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--endpoint-user`` / ``--endpoint-password`` (HTTP basic) and ``--endpoint-token`` (bearer), each also
    read from its environment variable; never echoed. And ``--timeout`` (unless the command has its own): how
    long an endpoint may take to answer one request."""
    if not any(getattr(p, "name", None) == "timeout" for p in getattr(func, "__click_params__", [])):
        func = click.option("--timeout", metavar="SECONDS", type=click.FloatRange(min=0, min_open=True),
                            envvar="MIRAGE_KG_ENDPOINT_TIMEOUT", expose_value=False,
                            callback=_credential_to_environment("MIRAGE_KG_ENDPOINT_TIMEOUT"),
                            help="Seconds an endpoint may take to answer one request; an update gets at least "
                                 "600 [default: 30; $MIRAGE_KG_ENDPOINT_TIMEOUT].")(func)
    func = click.option("--endpoint-token", metavar="TOKEN", envvar="MIRAGE_KG_ENDPOINT_TOKEN", expose_value=False,
                        callback=_credential_to_environment("MIRAGE_KG_ENDPOINT_TOKEN"),
                        help="Bearer token for the endpoint [$MIRAGE_KG_ENDPOINT_TOKEN].")(func)
    func = click.option("--endpoint-password", metavar="PASSWORD", envvar="MIRAGE_KG_ENDPOINT_PASSWORD",
                        expose_value=False, callback=_credential_to_environment("MIRAGE_KG_ENDPOINT_PASSWORD"),
                        help="HTTP basic auth password [$MIRAGE_KG_ENDPOINT_PASSWORD; prefer the variable].")(func)
    func = click.option("--endpoint-user", metavar="USER", envvar="MIRAGE_KG_ENDPOINT_USER", expose_value=False,
                        callback=_credential_to_environment("MIRAGE_KG_ENDPOINT_USER"),
                        help="HTTP basic auth user for the endpoint [$MIRAGE_KG_ENDPOINT_USER].")(func)
    return func


def store_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--store`` and ``--endpoint`` (with its credentials), shared by every command that reads a graph."""
    func = endpoint_auth_options(func)
    func = click.option("--endpoint", metavar="URL", envvar="MIRAGE_KG_ENDPOINT",
                        help="SPARQL 1.1 query endpoint (updates go to its /update sibling; Virtuoso takes both at "
                             "/sparql).")(func)
    func = click.option("--store", "store", metavar="DIR", type=click.Path(file_okay=False),
                        help="On-disk store folder [default: $MIRAGE_KG_STORE, else the built-in demo KG].")(func)
    return func
