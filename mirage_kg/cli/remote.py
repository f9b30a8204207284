"""Commands that a running ``mirage-kg serve`` can answer warm (``ask``, ``link``): with ``MIRAGE_KG_SERVER`` set to
its root URL (e.g. ``http://127.0.0.1:8000``; its token from ``MIRAGE_KG_TOKEN``) they send their request there
instead of opening the store and loading the models themselves.

A request the server cannot answer as asked is refused, never quietly run elsewhere: a server that is down, one on
another store than ``--store``/``--endpoint``/``$MIRAGE_KG_STORE`` names, a wrong token. Plain HTTP through
``httpx``; nothing here imports the reasoner."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mirage_kg.errors import InputError, MirageError

__all__ = ["SERVER_ENV", "TOKEN_ENV", "RemoteError", "client_for", "fetch", "server_url"]

SERVER_ENV = "MIRAGE_KG_SERVER"
TOKEN_ENV = "MIRAGE_KG_TOKEN"


class RemoteError(MirageError):
    """The server named by ``$MIRAGE_KG_SERVER`` did not answer, or refused."""


def server_url() -> str | None:
    """The running server named by ``$MIRAGE_KG_SERVER`` (without a trailing slash), or None."""
    url = os.environ.get(SERVER_ENV, "").strip()
    return url.rstrip("/") or None


def headers(token: str | None = None) -> dict[str, str]:
    token = token if token is not None else os.environ.get(TOKEN_ENV, "").strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def client_for(url: str, token: str | None = None, timeout: Any = 10.0) -> Any:
    """An ``httpx.Client`` for the server at ``url``: a plain-HTTP server gets no TLS context, whose set-up (loading
    the CA bundle, ~0.7 s) was a third of a warm ``ask`` answered from the cache."""
    import httpx

    return httpx.Client(base_url=url, headers=headers(token), timeout=timeout, verify=url.startswith("https://"))


def fetch(path: str, *, params: dict[str, Any] | None = None, body: dict[str, Any] | None = None,
          store: str | None = None, endpoint: str | None = None, needs_model: bool = False,
          url: str | None = None, token: str | None = None) -> Any:
    """The server's JSON for ``path`` (GET with ``params``, or POST of ``body``), after checking it serves the store
    asked for (and, with ``needs_model``, that it has a model). The server is ``url`` with ``token`` (a background
    server of ``mirage_kg.cli.warm_server``), else ``$MIRAGE_KG_SERVER`` with ``$MIRAGE_KG_TOKEN``.
    ``RemoteError`` says what went wrong."""
    import httpx

    named = SERVER_ENV if url is None else "MIRAGE_KG_WARM"  # what the message tells the user to unset
    url = url or server_url()
    if url is None:
        raise InputError(f"{SERVER_ENV} is not set")
    try:
        with client_for(url, token, httpx.Timeout(10.0, read=None)) as client:
            info = _answer(client.get("/v1/health"), url, named)
            _same_store(url, str(info.get("store", "")), store, endpoint, named)
            if needs_model and not info.get("asks"):
                raise RemoteError(f"the server at {url} ({named}) runs without a model (--no-ask); unset "
                                  f"{named} to run this locally")
            response = client.post(path, json=body) if body is not None else client.get(path, params=params)
            return _answer(response, url, named)
    except httpx.HTTPError as exc:
        raise RemoteError(f"the server at {url} ({named}) did not answer: {exc}; start it with "
                          f"`mirage-kg serve` or unset {named}") from None


def _answer(response: Any, url: str, named: str = SERVER_ENV) -> Any:
    if response.status_code == 200:
        return response.json()
    try:
        message = response.json()["error"]["message"]
    except Exception:
        message = response.text[:300]
    raise RemoteError(f"the server at {url} ({named}) answered {response.status_code}: {message}")


def _same_store(url: str, location: str, store: str | None, endpoint: str | None, named: str = SERVER_ENV) -> None:
    asked = endpoint or (str(Path(store).resolve()) if store else None)
    if asked is None and os.environ.get("MIRAGE_KG_STORE"):
        asked = str(Path(os.environ["MIRAGE_KG_STORE"]).resolve())
    served = location if location.startswith(("http://", "https://", "memory")) else str(Path(location).resolve())
    if asked is not None and asked != served:
        raise InputError(f"the server at {url} ({named}) serves {location}, not {asked}; start one on that "
                         f"store (mirage-kg serve --store ...) or unset {named}")
