"""A server that exits when no one uses it: an ASGI wrapper that counts requests in flight and, once none has
been in flight for ``seconds``, calls ``on_idle`` (``mirage-kg serve --idle-exit``, what the background server of
a warm ``ask`` runs with, so it never outlives its use by more than that)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["IdleExit"]


class IdleExit:
    """Wraps an ASGI app; a watcher thread calls ``on_idle`` once the app has been idle for ``seconds``."""

    def __init__(self, app: Any, seconds: float, on_idle: Callable[[], None], check_every: float = 1.0) -> None:
        self.app = app
        self.seconds = seconds
        self._on_idle = on_idle
        self._lock = threading.Lock()
        self._active = 0
        self._last = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, args=(check_every,), name="mirage-idle-exit",
                                         daemon=True)
        self._watcher.start()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        with self._lock:
            self._active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                self._active -= 1
                self._last = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last request ended (0 while one is in flight)."""
        with self._lock:
            return 0.0 if self._active else time.monotonic() - self._last

    def _watch(self, check_every: float) -> None:
        while True:
            time.sleep(check_every)
            if self.idle_for() >= self.seconds:
                self._on_idle()
                return
