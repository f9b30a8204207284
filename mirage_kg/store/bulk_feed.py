"""How input reaches pyoxigraph's native bulk loader: lines written into a pipe by a thread of their own
(``pump``), and Ctrl-C seen within one chunk while the main thread is inside the native call
(``deferred_interrupt``, ``InterruptibleReader``)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import IO

from mirage_kg.store.base import LineReader


class Interrupt:
    """Whether Ctrl-C was pressed, readable from any thread even while the main thread is inside native code.

    Python runs a signal handler only when the main thread is back in Python, which a native bulk load does not
    do until the load ends (minutes for a big one); but the C-level handler writes the signal number to
    the wakeup pipe at once, so the thread feeding the parser sees it within one chunk."""

    def __init__(self, wakeup: int | None) -> None:
        self._flag = threading.Event()
        self._wakeup = wakeup

    def set(self) -> None:
        self._flag.set()

    def is_set(self) -> bool:
        if not self._flag.is_set() and self._wakeup is not None:
            try:
                data = os.read(self._wakeup, 512)
            except OSError:  # nothing written yet (non-blocking), or the block has ended
                data = b""
            if bytes([signal.SIGINT]) in data:
                self._flag.set()
        return self._flag.is_set()


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Interrupt | None]:
    """SIGINT sets the yielded flag instead of raising where it lands (inside native code it would wait for the
    native call to end); KeyboardInterrupt is raised when the block ends if it arrived. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    try:
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter: the flag alone (set once the main thread is back in Python)
        os.close(read_fd)
        os.close(write_fd)
        read_fd = write_fd = previous_fd = -1
    interrupt = Interrupt(read_fd if read_fd >= 0 else None)
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, frame: interrupt.set())
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        if write_fd >= 0:
            signal.set_wakeup_fd(previous_fd)
            interrupted = interrupt.is_set()  # read what the pipe holds before it closes
            os.close(read_fd)
            os.close(write_fd)
            interrupt._wakeup = None
            if interrupted:
                interrupt.set()
    if interrupt.is_set():
        raise KeyboardInterrupt


def pump(reader: LineReader, interrupted: Interrupt | None, sink: IO[bytes]) -> None:
    """Copy the loader's N-Triples lines to ``sink`` (the native bulk loader's pipe) a MiB at a time, checking for
    Ctrl-C between chunks: an interrupted load ends its input with a syntax error, so the parser stops there.

    A load is one native bulk load, as pyoxigraph's own ``bulk_load`` of a file is: the native loader holds its
    memory to a few batches of 1M quads whatever the input's size. (Cutting the input into several loads only
    cost: each one's table files were ingested on their own and left for compaction. UMLS-shaped, 0.9M triples,
    2026-12-01: 64 MB segments made 269-282 MB on disk against 166-196 MB for one load, CPU within noise, peak
    725 vs 393 MiB.)"""
    while True:
        if interrupted is not None and interrupted.is_set():
            sink.write(b"\n<interrupted by the user\n")  # a syntax error: the parser stops here
            return
        chunk = reader.read(1 << 20)
        if not chunk:
            return
        sink.write(chunk)


class InterruptibleReader:
    """A binary stream that stops (raising) once the load is interrupted, so the native parser pulling it ends."""

    def __init__(self, inner: IO[bytes], interrupted: Interrupt) -> None:
        self._inner = inner
        self._interrupted = interrupted

    def read(self, size: int = -1) -> bytes:
        if self._interrupted.is_set():
            raise KeyboardInterrupt
        return self._inner.read(size)
