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
