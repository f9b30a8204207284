"""Progress bars for long work, on stderr, quiet when stderr is not a terminal or MIRAGE_KG_PROGRESS=0."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def enabled() -> bool:
    flag = os.environ.get("MIRAGE_KG_PROGRESS")
    if flag is not None:
        return flag not in ("0", "false", "no")
    return sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, total: float | None = None, unit: str = "") -> Iterator[Callable[[float], None]]:
    """Yields ``advance(n)``; a rich bar with rate and ETA when enabled, a no-op otherwise."""
    if not enabled():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    columns = [TextColumn("[bold]{task.description}"), BarColumn()]
    columns.append(TransferSpeedColumn() if unit == "bytes" else MofNCompleteColumn())
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


@contextmanager
def progress_lines(description: str, total: int, unit: str = "", every: float = 10.0,
                   write: Callable[[str], None] | None = None) -> Iterator[Callable[[float], None]]:
    """Yields ``advance(n)`` for work watched off a terminal (a log, CI): a line at least every ``every`` seconds
    (from a timer thread, so a slow step still reports) with the count, the measured rate and the time left at
    that rate, and a last line when the work ends."""
    import threading
    import time

    if write is None:
        def write(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    done = [0.0]
    stop = threading.Event()

    def line() -> str:
        elapsed = max(time.perf_counter() - started, 1e-9)
        rate = done[0] / elapsed
        left = f"about {_duration((total - done[0]) / rate)} left" if rate > 0 else "rate not yet measured"
        return (f"  {description}: {done[0]:,.0f}/{total:,} {unit}, {rate:,.0f} {unit}/s, {left} "
                f"({_duration(elapsed)} so far)")

    def tick() -> None:
        while not stop.wait(every):
            write(line())

    thread = threading.Thread(target=tick, name="progress-lines", daemon=True)
    thread.start()
    try:
        yield lambda n: done.__setitem__(0, done[0] + n)
    finally:
        stop.set()
        thread.join()
        write(line())


def _duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
