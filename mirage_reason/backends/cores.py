"""How many threads a CPU engine (llama.cpp) takes: the cores idle right now, measured so that our own start-up
does not count against us, or what the user set.

llama.cpp's threads spin-wait for each other at every decoding step, so a thread more than there are idle cores
makes each step wait for a descheduled thread (measured on 2 cores at load 12: 2 threads 2 tokens/s, 1 thread 20),
while a thread fewer leaves speed on the table (both cores idle: 1 thread 78 tokens/s, 2 threads 119). The
1-minute load average, used before, counts this process's own start-up (the KG and embedding model load just
before the engine), so on an idle 2-core machine it said one core was busy. Instead, on Linux, the busy time of
every usable core (``/proc/stat``) minus this process's own CPU time, all threads (``/proc/self/stat``), is sampled
over a short window; elsewhere the load average is the fallback, and the reason says which rule decided.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage_reason.errors import BackendError

__all__ = [
    "THREADS_ENV",
    "CpuTimes",
    "ThreadChoice",
    "choose_threads",
    "free_cores",
    "idle_cores",
    "proc_cpu_times",
    "usable_cores",
]

#: set to a whole number to fix llama.cpp's thread count (every llama.cpp backend, in process or server)
THREADS_ENV = "MIRAGE_KG_LLAMA_THREADS"

#: the sampling window: long enough for ~15 clock ticks per core, short next to an engine's seconds of start-up
WINDOW_S = 0.15

#: a measurement is reused for this long (several backends built in a row need not wait again)
CACHE_S = 30.0


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time in clock ticks: busy time of the cores we may use, and this process's own."""

    busy_all: int
    busy_self: int


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and why it was chosen (shown in ``ask --json`` under ``engine``)."""

    threads: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"threads": self.threads, "threads_reason": self.reason}


def usable_cores() -> int:
    """CPU cores this process may use (torch's and llama.cpp's defaults may count the host's, not this share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _usable_cpu_ids() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return None


def parse_proc_stat(text: str, cpus: set[int] | None) -> int:
    """Busy ticks (user, nice, system, irq, softirq, steal; not idle or iowait; guest time is inside user) summed
    over the per-CPU lines of ``/proc/stat`` whose CPU is in ``cpus`` (all of them when None)."""
    total = 0
    seen = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        fields = [int(f) for f in rest.split()]
        user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
        steal = fields[7] if len(fields) > 7 else 0
        total += user + nice + system + irq + softirq + steal
        seen = True
    if not seen:
        raise ValueError("no per-CPU lines of our CPUs in /proc/stat")
    return total


def parse_self_stat(text: str) -> int:
    """utime + stime (fields 14 and 15, every thread of the process) from ``/proc/self/stat``; the command name in
    parentheses may hold spaces, so fields are counted after its closing parenthesis."""
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def proc_cpu_times(root: Path = Path("/proc")) -> CpuTimes:
    """Read the cumulative CPU times now (Linux); OSError or ValueError where ``/proc`` cannot tell."""
    stat = (root / "stat").read_text(encoding="ascii")
    own = (root / "self" / "stat").read_text(encoding="utf-8", errors="replace")
    return CpuTimes(parse_proc_stat(stat, _usable_cpu_ids()), parse_self_stat(own))


def idle_cores(
    *,
    cores: int | None = None,
    window: float = WINDOW_S,
    read: Callable[[], CpuTimes] = proc_cpu_times,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    ticks_per_second: int | None = None,
) -> ThreadChoice:
    """Sample the CPU times over ``window`` seconds: idle cores = usable cores - (busy ticks of all - our own) per
    second, rounded, between 1 and the usable cores. Raises OSError/ValueError where ``read`` cannot tell."""
    cores = cores or usable_cores()
    hz = ticks_per_second or os.sysconf("SC_CLK_TCK")
    before, started = read(), clock()
    sleep(window)
    after, elapsed = read(), clock() - started
    if elapsed <= 0:
        raise ValueError("the clock did not move while sampling /proc/stat")
    ours = after.busy_self - before.busy_self
    others = max(0.0, (after.busy_all - before.busy_all - ours) / hz / elapsed)
    idle = max(0.0, cores - others)
    threads = max(1, min(cores, int(idle + 0.5)))
    return ThreadChoice(threads, f"{idle:.1f} of {cores} cores idle over {elapsed * 1000:.0f} ms, not counting "
                                 f"this process's own {ours / hz / elapsed:.1f} (/proc/stat)")


def _load_average_choice(cores: int, why: str) -> ThreadChoice:
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return ThreadChoice(cores, f"all {cores} cores: {why}, and no load average either")
    threads = max(1, min(cores, int(cores - load + 0.5)))
    return ThreadChoice(threads, f"{cores} cores minus the 1-minute load average {load:.1f} ({why}; this counts "
                                 f"our own start-up too)")


_cache_lock = threading.Lock()
_cached: tuple[float, ThreadChoice] | None = None


def measured_threads() -> ThreadChoice:
    """:func:`idle_cores` once per :data:`CACHE_S` seconds per process; the load average where ``/proc`` is not."""
    global _cached
    with _cache_lock:
        now = time.monotonic()
        if _cached is not None and now - _cached[0] < CACHE_S:
            return _cached[1]
        try:
            choice = idle_cores()
        except (OSError, ValueError, IndexError) as exc:
            choice = _load_average_choice(usable_cores(), f"no idle-core measurement here: {exc}")
        _cached = (time.monotonic(), choice)
        return choice


def choose_threads(requested: int | None = None, *, reserve: int = 0, steady: bool = False) -> ThreadChoice:
    """The thread count for a llama.cpp engine: ``requested`` (the backend's ``threads=``) if given, else
    ``$MIRAGE_KG_LLAMA_THREADS``, else the idle cores measured now less ``reserve`` (at least 1); with ``steady``
    (a seeded run) every core this process may use less ``reserve``, whatever the load: llama.cpp's float rounding
    follows its thread count (SmolLM2 on its server, seed 7: 1 and 2 threads sample different third chains), so
    a count that moved with the load made the same ``--seed`` give different chains on a busy machine.

    ``reserve`` is the cores the caller's own Python needs while the engine decodes: 1 for llama.cpp in process,
    where llama-cpp-python samples and checks stops for every token in Python between decode steps, and a
    spin-waiting engine thread on that core slows both (measured on 2 idle cores, ``bench_ask``: 2 threads 45.5
    generated tok/s, 1 thread 58.3); 0 for llama.cpp's server, a process of its own (2 threads 43.9, 1 thread 28.6)."""
    if requested is not None:
        if requested < 1:
            raise BackendError(f"threads= must be at least 1, not {requested}",
                               hint="pass a positive thread count, or leave it unset to use the idle cores")
        return ThreadChoice(requested, "set by threads=")
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise BackendError(f"${THREADS_ENV}={value!r} is not a whole number of threads of at least 1",
                               hint=f"set {THREADS_ENV} to e.g. 2, or unset it to use the idle cores")
        return ThreadChoice(threads, f"set by ${THREADS_ENV}")
    if steady:
        threads = max(1, usable_cores() - max(0, reserve))
        return ThreadChoice(threads, f"a seed is set: the {usable_cores()} usable core(s)"
                                     + (f" less {reserve} for this process's own Python" if reserve > 0 else "")
                                     + ", not the idle ones, so the seed samples the same whatever the load")
    measured = measured_threads()
    if reserve <= 0 or measured.threads <= 1:
        return measured
    threads = max(1, measured.threads - reserve)
    return ThreadChoice(threads, f"{measured.reason}, less {reserve} for this process's own Python between decode steps")


def free_cores() -> int:
    """The idle cores right now, not counting this process (see :func:`choose_threads`), at least 1."""
    return choose_threads().threads
