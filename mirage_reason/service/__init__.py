"""``mirage-kg serve``: the KG and the reasoner behind an HTTP API (JSON under ``/v1/``, the same shapes as the CLI's
``--json``) and a small offline web app at ``/``.

It lives in ``mirage_reason`` because ``ask`` needs the reasoner and ``mirage_kg`` must never import it. Importing
this package is light: FastAPI and uvicorn load only in :func:`create_app` and the command (the ``[serve]`` extra)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from mirage_reason.service.settings import ServiceSettings

__all__ = ["AskService", "ServiceSettings", "create_app"]

_LAZY = {"create_app": "mirage_reason.service.app", "AskService": "mirage_reason.service.asks"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirage_reason.service' has no attribute {name!r}")
