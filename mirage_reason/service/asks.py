"""Asks behind a bounded queue: at most ``workers`` MIRAGE runs at once, at most ``queue`` more waiting; past that a
new ask is refused at once (the API answers 429 with Retry-After) instead of piling up behind the model."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from mirage_reason.config import MirageConfig
from mirage_reason.coordinator import Answer, Mirage, ProgressHook
from mirage_reason.errors import ReasonerError

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

    from mirage_reason.backends.base import Backend

__all__ = ["AskQueueFull", "AskService"]


class AskQueueFull(ReasonerError):
    """Every ask worker is busy and the waiting line is full; ``retry_after`` is a fair guess in seconds."""

    def __init__(self, waiting: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"{waiting} asks are already waiting for the model; retry in about {retry_after} s")


class AskService:
    """Runs ``Mirage(kg, backend, config).answer`` on a pool of ``workers`` threads with a line of ``queue``.

    ``config`` is the server's base configuration; each ask may override the method's budgets (``n_q``, ``n_r``,
    ``k``, ``max_hops``, ``samples``, ``seed``) through :meth:`submit`."""

    OVERRIDABLE = frozenset({"n_q", "n_r", "k", "max_hops", "samples", "seed"})

    def __init__(self, kg: KnowledgeGraph, backend: Backend, config: MirageConfig | None = None, *,
                 workers: int = 1, queue: int = 4) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self.workers = workers
        self.queue = queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mirage-ask")
        self._lock = threading.Lock()
        self._admitted = 0  # running plus waiting
        self._seconds: deque[float] = deque(maxlen=20)  # recent ask durations, for Retry-After
        self._cancels: dict[Future[Answer], threading.Event] = {}

    @property
    def waiting(self) -> int:
        with self._lock:
            return max(0, self._admitted - self.workers)

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the mean recent ask time per slot ahead, at least 1."""
        with self._lock:
            mean = sum(self._seconds) / len(self._seconds) if self._seconds else 10.0
            ahead = max(1, self._admitted - self.workers + 1)
        return max(1, math.ceil(mean * ahead / self.workers))

    def config_for(self, overrides: Mapping[str, Any]) -> MirageConfig:
        unknown = set(overrides) - self.OVERRIDABLE
        if unknown:
            raise ReasonerError(f"cannot override {sorted(unknown)} per ask; allowed: {sorted(self.OVERRIDABLE)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self.config, **given) if given else self.config

    def submit(self, question: str, overrides: Mapping[str, Any] | None = None,
               on_progress: ProgressHook | None = None) -> tuple[Future[Answer], int]:
        """Queue one ask; returns its future and its place in the line (0: it starts now, 1: next, ...).
        Raises ``AskQueueFull`` when the line is full."""
        config = self.config_for(overrides or {})
        with self._lock:
            if self._admitted >= self.workers + self.queue:
                waiting = self._admitted - self.workers
                full = True
            else:
                full = False
                ahead = max(0, self._admitted - self.workers + 1) if self._admitted >= self.workers else 0
                self._admitted += 1
        if full:
            raise AskQueueFull(waiting, self.retry_after())
        cancel = threading.Event()
        future = self._executor.submit(self._run, question, config, on_progress, cancel)
        with self._lock:
            self._cancels[future] = cancel
        future.add_done_callback(self._release)
        return future, ahead

    def cancel(self, future: Future[Answer]) -> None:
        """Give up on an ask (its client went away): a waiting ask leaves the line; a running one sends the model
        no new request and cancels those in flight (a queued request never runs, a server's request is closed)."""
        future.cancel()
        with self._lock:
            event = self._cancels.get(future)
        if event is not None:
            event.set()

    def _run(self, question: str, config: MirageConfig, on_progress: ProgressHook | None,
             cancel: threading.Event) -> Answer:
        started = time.perf_counter()
        if on_progress is not None:
            on_progress(0, {"type": "started"})
        try:
            return Mirage(self.kg, self.backend, config).answer(question, on_progress=on_progress, cancel=cancel)
        finally:
            with self._lock:
                self._seconds.append(time.perf_counter() - started)

    def _release(self, future: Future[Answer]) -> None:
        with self._lock:
            self._admitted -= 1
            self._cancels.pop(future, None)

    def close(self) -> None:
        """Stop taking asks; a waiting ask is cancelled, a running one stops asking the model."""
        with self._lock:
            events = list(self._cancels.values())
        for event in events:
            event.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

