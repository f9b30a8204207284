"""What the service tests share: a scripted model that decomposes, searches and answers over the demo KG, and a
real ``mirage-kg serve`` process on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from mirage_reason.pipeline.prompts import QUERY_BEGIN as QB
from mirage_reason.pipeline.prompts import QUERY_END as QE
from mirage_reason.pipeline.prompts import RESULT_END

QUESTION = "I have a cough. What medication treats asthma?"

#: prompt substring -> completion (the first key found in the prompt wins; "" is the default), as `--script` reads
SCRIPT = {
    "Write at most": "1. What medication treats asthma?\n2. What causes a cough?",
    "Facts:\n[1]": "Salbutamol can treat asthma [2]. Please see a doctor.",  # fact [2] is the salbutamol one
    f"{RESULT_END}\n\n": "Salbutamol is a medication for asthma.",
    "What causes a cough": f"Let me look. {QB}Cough{QE}",
    "": f"Let me check the graph. {QB}Asthma{QE}",
}


def script_reply(prompt: str) -> str:
    return next((v for k, v in SCRIPT.items() if k and k in prompt), SCRIPT[""])


def write_script(folder: Path) -> Path:
    path = folder / "script.json"
    path.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """``mirage-kg serve`` in a subprocess (the real command and uvicorn), stopped by :meth:`stop`."""

    def __init__(self, *args: str, token: str | None = None, log: Path | None = None,
                 wait_for_labels: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MIRAGE_KG_PROGRESS": "0", "HF_HUB_OFFLINE": "1"}
        env.pop("MIRAGE_KG_TOKEN", None)
        command = [sys.executable, "-m", "mirage_kg.cli", "serve", "--port", str(self.port), "--log-level",
                   "warning", *args]
        if token:
            command += ["--token", token]
        self.log = log
        out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self._out = out
        self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self._wait(token, wait_for_labels)

    def _wait(self, token: str | None, wait_for_labels: bool) -> None:
        """Until /v1/health answers (and, if asked, says the label index is built)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limit = 600 if wait_for_labels else 90
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mirage-kg serve exited with {self.proc.returncode}: {self.output()}")
            try:
                health = httpx.get(f"{self.url}/v1/health", headers=headers, timeout=2)
                if health.status_code == 200 and (not wait_for_labels or health.json()["labels_ready"]):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"mirage-kg serve was not ready within {limit} s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:] if self.log else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._out is not subprocess.DEVNULL:
            self._out.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def scripted_serve(folder: Path, token: str | None = None) -> Iterator[ServeProcess]:
    """``mirage-kg serve`` over the demo KG with the scripted model (no embeddings), its log in ``folder``."""
    process = ServeProcess("--script", str(write_script(folder)), "--embedding-model", "none", token=token,
                           log=folder / "serve.log")
    try:
        yield process
    finally:
        process.stop()
