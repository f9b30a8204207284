"""The service's limits and switches, one frozen value object so a test or the command builds it in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ServiceSettings"]

_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{8,512}")


@dataclass(frozen=True)
class ServiceSettings:
    """Everything ``create_app`` needs besides the graph and the reasoner.

    ``token``: when set, every request needs ``Authorization: Bearer <token>`` (or the cookie the web app gets by
    opening ``/?token=<token>`` once). ``cors_origins``: origins allowed cross-site; empty means CORS stays off.
    Sizes are bytes; times are seconds."""

    token: str | None = None
    cors_origins: tuple[str, ...] = ()
    host: str = "127.0.0.1"  # the interface served; on loopback, MCP also checks Host and Origin are loopback
    max_body_bytes: int = 64 * 1024
    max_query_string_bytes: int = 8 * 1024
    request_timeout: float = 30.0
    sparql_timeout: float = 10.0
    sparql_services: tuple[str, ...] = ()  # endpoints SPARQL SERVICE may call; none: SERVICE is refused
    kg_threads: int = 16  # graph requests served at once; more wait for a thread
    ask_workers: int = 1  # model runs at once
    ask_queue: int = 4  # asks that may wait for a worker; past this a new ask gets 429
    ask_timeout: float = 600.0
    max_k: int = 200
    max_paths: int = 500
    max_hops: int = 6
    max_labels: int = 1000  # ids per /v1/labels request

    def __post_init__(self) -> None:
        if self.token is not None and not _TOKEN.fullmatch(self.token):
            raise ValueError("the token must be 8 to 512 characters from A-Z a-z 0-9 . _ ~ + / = - (it travels in a "
                             "header and a cookie); e.g. python -c 'import secrets; print(secrets.token_urlsafe())'")
        for name in ("ask_workers", "kg_threads", "max_body_bytes", "max_query_string_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.ask_queue < 0:
            raise ValueError("ask_queue must be at least 0")
