"""``in_daemon_thread``: the work's result, or its exception raised in the caller's thread, through a Future; the
thread is a daemon, so work left behind never holds the process open."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from mirage_kg.threads import in_daemon_thread


def test_the_result_and_the_exception_reach_the_caller() -> None:
    assert in_daemon_thread(lambda a, b: a + b, 2, 3, name="t-sum").result(timeout=10) == 5
    failing = in_daemon_thread(lambda: 1 / 0, name="t-fail")
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=10)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # not only Exception: what the work raised, whatever it is
        in_daemon_thread(interrupted, name="t-interrupt").result(timeout=10)


def test_work_runs_in_a_named_daemon_thread() -> None:
    seen = in_daemon_thread(lambda: (threading.current_thread().name, threading.current_thread().daemon),
                            name="t-named").result(timeout=10)
    assert seen == ("t-named", True)


def test_work_left_behind_does_not_keep_the_process_alive() -> None:
    code = ("import threading; from mirage_kg.threads import in_daemon_thread; "
            "in_daemon_thread(threading.Event().wait, name='t-forever'); print('done')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
