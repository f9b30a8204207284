"""A warm CLI without a server to start by hand: with ``MIRAGE_KG_WARM`` set (``1``, or the idle seconds after
which the server exits), ``ask`` and ``link`` reuse a background ``mirage-kg serve`` started by an earlier call for
the same store and model options, or start one (detached, loopback only, with a random token) and send their
request there. The server exits once idle for that long.

Each background server is filed under ``$MIRAGE_KG_CACHE`` (else ``~/.cache/mirage-kg``) ``/servers/<key>.json``
(its URL, token and pid; readable by its owner only), the key naming what it serves: the store, the options that
decide its model, and this package's version. A file lock keeps two calls from starting two servers for one key.
Nothing here imports the reasoner."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mirage_kg.errors import InputError, MirageError

__all__ = ["DEFAULT_IDLE", "WARM_ENV", "WarmServer", "WarmServerError", "ensure_server", "find_server", "servers_dir",
           "store_argument", "warm_idle", "warm_link_server"]

WARM_ENV = "MIRAGE_KG_WARM"
DEFAULT_IDLE = 900.0
START_LIMIT = 900.0  # seconds a new server may take to load the KG and the model


class WarmServerError(MirageError):
    """A background server could not be started."""


def warm_idle() -> float | None:
    """The idle seconds ``$MIRAGE_KG_WARM`` asks for (None: warm start off)."""
    raw = os.environ.get(WARM_ENV, "").strip().lower()
    if raw in ("", "0", "no", "off", "false"):
        return None
    if raw in ("1", "yes", "on", "true"):
        return DEFAULT_IDLE
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds < 1:
        raise InputError(f"{WARM_ENV}={raw!r}: give 1 (on; the background server exits after {DEFAULT_IDLE:g} idle "
                         "seconds), the idle seconds (at least 1), or 0 (off)")
    return seconds


def servers_dir() -> Path:
    root = Path(os.environ.get("MIRAGE_KG_CACHE") or Path.home() / ".cache" / "mirage-kg")
    folder = root / "servers"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


class WarmServer:
    """A running background server: its root URL and token, and whether this call started it."""

    def __init__(self, url: str, token: str, started: bool = False) -> None:
        self.url, self.token, self.started = url, token, started


def store_argument(store: str | None, endpoint: str | None) -> list[str]:
    """What names the KG on the server's command line (the demo KG: nothing)."""
    if endpoint:
        return ["--endpoint", endpoint]
    location = store or os.environ.get("MIRAGE_KG_STORE")
    return ["--store", str(Path(location).resolve())] if location else []


def server_key(kg_args: Sequence[str], serve_args: Sequence[str]) -> str:
    from mirage_kg import __version__

    parts = [list(kg_args), sorted(serve_args), __version__, sys.executable]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def _alive(state: Path) -> WarmServer | None:
    import httpx

    from mirage_kg.cli.remote import client_for

    try:
        info = json.loads(state.read_text(encoding="utf-8"))
        with client_for(info["url"], info["token"], 3) as client:
            health = client.get("/v1/health")
    except (OSError, ValueError, KeyError, httpx.HTTPError):
        return None
    return WarmServer(info["url"], info["token"]) if health.status_code == 200 else None


def find_server(kg_args: Sequence[str], serve_args: Sequence[str]) -> WarmServer | None:
    """The running background server for this KG and these options, if there is one."""
    return _alive(servers_dir() / f"{server_key(kg_args, serve_args)}.json")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_server(kg_args: Sequence[str], serve_args: Sequence[str], idle: float,
                  say: Callable[[str], None] = lambda text: None) -> WarmServer:
    """The background server for this KG and these ``mirage-kg serve`` options: the running one, else a new one
    started here (``say`` tells the user), which exits after ``idle`` seconds without a request."""
    folder = servers_dir()
    key = server_key(kg_args, serve_args)
    state = folder / f"{key}.json"
    found = _alive(state)
    if found is not None:
        return found
    with _locked(folder / f"{key}.lock"):
        found = _alive(state)  # another call may have started it while this one waited
        if found is not None:
            return found
        token, port = secrets.token_urlsafe(24), _free_port()
        url = f"http://127.0.0.1:{port}"
        log = folder / f"{key}.log"
        command = [sys.executable, "-m", "mirage_kg.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                   "--idle-exit", f"{idle:g}", "--log-level", "warning", *kg_args, *serve_args]
        env = {k: v for k, v in os.environ.items() if k not in ("MIRAGE_KG_SERVER", WARM_ENV)}
        env.update(MIRAGE_KG_TOKEN=token, MIRAGE_KG_PROGRESS="0")
        say(f"starting a background mirage-kg serve for this and later calls (it exits after {idle:g} s without "
            f"a request; log: {log})")
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
        _wait(process, url, token, log)
        fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"url": url, "token": token, "pid": process.pid, "command": command[2:], "kg": list(kg_args),
                       "embedding_model": _option(serve_args, "--embedding-model"), "started": time.time(),
                       "idle_exit": idle}, handle)
        return WarmServer(url, token, started=True)


def warm_link_server(store: str | None, endpoint: str | None, embedding_model: str | None,
                     say: Callable[[str], None] = lambda text: None) -> WarmServer | None:
    """For ``link`` with ``$MIRAGE_KG_WARM``: a running background server of a plain ``ask`` on this store (it links
    too), else one for links alone (``--no-ask``: no model loaded), started if need be; None when warm start is off."""
    idle = warm_idle()
    if idle is None:
        return None
    kg_args = store_argument(store, endpoint)
    for state in sorted(servers_dir().glob("*.json")):  # any server of this KG links alike with the same model
        try:
            info = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if info.get("kg") == kg_args and info.get("embedding_model") == embedding_model:
            found = _alive(state)
            if found is not None:
                return found
    chosen = ["--embedding-model", embedding_model] if embedding_model else []
    return ensure_server(kg_args, [*chosen, "--no-ask"], idle, say)


def _option(args: Sequence[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def _wait(process: subprocess.Popen[bytes], url: str, token: str, log: Path) -> None:
    import httpx

    from mirage_kg.cli.remote import client_for

    deadline = time.monotonic() + START_LIMIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-1500:]
            raise WarmServerError(f"the background mirage-kg serve exited with {process.returncode}:\n{tail}\n"
                                  f"(log: {log}; unset {WARM_ENV} to run locally)")
        try:
            with client_for(url, token, 2) as client:
                health = client.get("/v1/health")
            # ready once the linker is warm too (label embeddings and embedding model loaded): a first link or ask
            # sent before would wait for them past the server's request time limit
            if health.status_code == 200 and health.json().get("linker_warm", True):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    process.terminate()
    raise WarmServerError(f"the background mirage-kg serve was not ready within {START_LIMIT:g} s (log: {log})")
