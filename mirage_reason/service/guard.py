"""The service's front door, as plain ASGI middleware: bounded query strings and bodies, the bearer token, and
headers that keep the web app's pages from being framed or sniffed.

The body is read here, whole and bounded, before the application sees it, so an oversized upload is refused with
413 without reaching an endpoint. The web app, which cannot set headers on a page load, authenticates once with
``/?token=...``: the guard checks it, sets an HttpOnly same-site cookie and redirects to ``/`` so the token does
not linger in the address bar. The cookie holds a session value derived from the token (an HMAC), never the token
itself, so a cookie read off a browser profile is no bearer token for the API or for another server."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from mirage_reason.service.settings import ServiceSettings

__all__ = ["COOKIE", "Guard", "error_body"]

COOKIE = "mirage_kg_token"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"),
]


def error_body(status: int, kind: str, message: str) -> dict[str, Any]:
    """The one error shape of the API."""
    return {"error": {"status": status, "type": kind, "message": message}}


class Guard:
    """Size limits, then the token, then the application."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], settings: ServiceSettings) -> None:
        self.app = app
        self.settings = settings
        self._token = settings.token.encode("utf-8") if settings.token else None
        #: what the web app's cookie holds: derived from the token, not the token
        self._session = (hmac.new(self._token, b"mirage-kg web session", hashlib.sha256).hexdigest().encode("ascii")
                         if self._token is not None else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        s = self.settings
        query: bytes = scope.get("query_string", b"")
        if len(query) > s.max_query_string_bytes:
            await _reply(send, 414, "QueryTooLong", f"the query string is {len(query)} bytes; the limit is "
                         f"{s.max_query_string_bytes}: send long input (SPARQL, asks) as a JSON POST body")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self._token is not None and not self._authorised(headers):
            if scope["path"] == "/" and self._token_in_query(query):
                await _redirect_with_cookie(send, (self._session or b"").decode("ascii"))
                return
            await _reply(send, 401, "Unauthorized", "this server needs a bearer token: send 'Authorization: Bearer "
                         "<token>' (the web app: open /?token=<token> once)",
                         [(b"www-authenticate", b'Bearer realm="mirage-kg"')])
            return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > s.max_body_bytes):
            await _reply(send, 413, "BodyTooLarge", f"the request body is over the limit of {s.max_body_bytes} bytes")
            return
        body = bytearray()
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body.extend(message.get("body", b""))
                if len(body) > s.max_body_bytes:
                    await _reply(send, 413, "BodyTooLarge", f"the request body is over the limit of "
                                 f"{s.max_body_bytes} bytes")
                    return
                if not message.get("more_body", False):
                    break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: wait for the client to go away (streams check this)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + _SECURITY_HEADERS
            await send(message)

        await self.app(scope, replay, send_with_headers)

    def _authorised(self, headers: dict[str, str]) -> bool:
        assert self._token is not None
        given = headers.get("authorization", "")
        if given[:7].lower() == "bearer " and hmac.compare_digest(given[7:].strip().encode("utf-8"), self._token):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header authenticates nothing
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and self._session is not None and hmac.compare_digest(
            morsel.value.encode("utf-8"), self._session)

    def _token_in_query(self, query: bytes) -> bool:
        assert self._token is not None
        values = parse_qs(query.decode("latin-1")).get("token", [])
        return any(hmac.compare_digest(v.encode("utf-8"), self._token) for v in values)


async def _reply(send: Send, status: int, kind: str, message: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(error_body(status, kind, message)).encode("utf-8")
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        *(extra or []), *_SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": payload})


async def _redirect_with_cookie(send: Send, session: str) -> None:
    cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/".encode("utf-8")
    await send({"type": "http.response.start", "status": 303, "headers": [
        (b"location", b"/"), (b"set-cookie", cookie), (b"content-length", b"0"), *_SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": b""})
