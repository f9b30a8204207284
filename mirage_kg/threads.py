"""Work handed to a thread of its own whose outcome the caller collects as a ``concurrent.futures.Future``: its
result, or the exception it raised, re-raised in the caller's thread by ``Future.result``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def in_daemon_thread(work: Callable[..., T], *args: Any, name: str) -> Future[T]:
    """Start ``work(*args)`` in a daemon thread named ``name``; its future holds the outcome. A daemon thread, not
    a ``ThreadPoolExecutor``'s: the executor's threads are joined at interpreter exit, and the work handed here may
    be left behind on purpose (a query past its timeout, a native transaction abandoned on Ctrl-C) where the
    process must still end."""
    future: Future[T] = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(work(*args))
        except BaseException as exc:  # the caller's ``result()`` raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
