"""Asks behind a bounded queue: at most ``workers`` MIRAGE runs at once, at most ``queue`` more waiting; past that a
new ask is refused at once (the API answers 429 with Retry-After) instead of piling up behind the model. Answer
records are kept in a small cache keyed on everything that decides them (:class:`AnswerCache`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
import time
from collections import OrderedDict, deque
from datetime import datetime, timezone
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.answer import Answer
from mirage_reason.pipeline.coordinator import Mirage, ProgressHook
from mirage_reason.errors import ReasonerError

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

    from mirage_reason.backends.base import Backend

__all__ = ["AnswerCache", "AskQueueFull", "AskService"]


class AskQueueFull(ReasonerError):
    """Every ask worker is busy and the waiting line is full; ``retry_after`` is a fair guess in seconds."""

    def __init__(self, waiting: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"{waiting} asks are already waiting for the model; retry in about {retry_after} s")


class AnswerCache:
    """The last ``size`` answer records, keyed on what decides an answer: the store (its location and load
    records, which change with every committed load), the question, the model, and the whole configuration, seed
    included. A record served from here carries ``cache``: when it was answered and its key; an unseeded ask is
    kept too (one draw of the model, said so by the same field), and ``"cache": false`` on an ask draws again."""

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._records: OrderedDict[str, tuple[dict[str, Any], str]] = OrderedDict()

    @staticmethod
    def key(kg: KnowledgeGraph, backend: Backend, question: str, config: MirageConfig) -> str:
        parts = {"store": kg.store.location, "loads": kg.token, "question": question,
                 "model": [type(backend).__name__, getattr(backend, "name", "")],
                 "config": dataclasses.asdict(config)}
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]

    def get(self, key: str) -> dict[str, Any] | None:
        """The record kept under ``key``, marked as served from the cache, or None."""
        with self._lock:
            found = self._records.get(key)
            if found is None:
                return None
            self._records.move_to_end(key)
        record, answered_at = found
        return {**record, "cache": {"served_from": answered_at, "key": key}}

    def put(self, key: str, record: dict[str, Any]) -> None:
        answered_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._lock:
            self._records[key] = (record, answered_at)
            self._records.move_to_end(key)
            while len(self._records) > self.size:
                self._records.popitem(last=False)


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
        self.answers = AnswerCache()

    def cache_key(self, question: str, overrides: Mapping[str, Any] | None = None) -> str:
        """The answer cache's key for this question asked with these per-ask settings."""
        return AnswerCache.key(self.kg, self.backend, question, self.config_for(overrides or {}))

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

