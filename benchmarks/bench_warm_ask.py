"""``mirage-kg ask`` (and ``link``) cold vs warm, in the same run: the README's question asked by the CLI on its own (which loads
the KG, the embedding model and the LLM every time), then the same command with ``MIRAGE_KG_SERVER`` naming a
``mirage-kg serve`` started here (the question goes to the running server), ``--warm`` times.

    python benchmarks/bench_warm_ask.py [--store DIR] [--warm 2] [--json]

Each figure is the wall time of the whole ``mirage-kg ask`` process, as a person waits for it. The server's own
start-up (model and label index loaded once) is reported apart. The target: the second identical ask <= 25% of the
first's wall time. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

QUESTION = "I have palpitations, feel dizzy and short of breath. What could it be and what should I take?"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mirage_kg.cli", *command, "--json"], capture_output=True,
                          text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mirage-kg {command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def _ask(store: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    return _run(["ask", QUESTION, "--seed", "0", *store], env)


def _link(store: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    return _run(["link", QUESTION, *store], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store folder [default: the demo KG]")
    parser.add_argument("--warm", type=int, default=2, help="asks through the running server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    store = ["--store", args.store] if args.store else []
    env = {k: v for k, v in os.environ.items() if k not in ("MIRAGE_KG_SERVER", "MIRAGE_KG_TOKEN")}
    env.update(HF_HUB_OFFLINE="1", MIRAGE_KG_PROGRESS="0")

    cold, cold_record = _ask(store, env)
    cold_link, cold_links = _link(store, env)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "mirage_kg.cli", "serve", "--port", str(port), "--log-level",
                               "warning", *store], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"mirage-kg serve exited with {server.returncode}")
            try:
                health = httpx.get(f"{url}/v1/health", timeout=2)
                if health.status_code == 200 and health.json().get("linker_warm", health.json()["labels_ready"]):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        server_start = time.perf_counter() - started
        warm_env = {**env, "MIRAGE_KG_SERVER": url}
        warm = [_ask(store, warm_env) for _ in range(args.warm)]
        warm_link = [_link(store, warm_env) for _ in range(args.warm)]
    finally:
        server.terminate()
        server.wait(20)

    def stages(record: dict[str, Any]) -> dict[str, float]:
        return {k: round(v, 2) for k, v in record["timings"].items() if v >= 0.05 and k != "total"}

    rows = [{"run": "cold (the CLI alone)", "seconds": round(cold, 2),
             "answer_seconds": cold_record["timings"].get("total"), "stages": stages(cold_record)}]
    rows += [{"run": f"warm {i} (MIRAGE_KG_SERVER)", "seconds": round(s, 2),
              "answer_seconds": r["timings"].get("total"), "stages": stages(r), "ratio_to_cold": round(s / cold, 3)}
             for i, (s, r) in enumerate(warm, start=1)]
    result = {"question": QUESTION, "store": args.store or "demo", "server_start_seconds": round(server_start, 2),
              "rows": rows, "target": "second identical ask <= 25% of the first's wall time",
              "link": {"cold_seconds": round(cold_link, 2), "warm_seconds": [round(s, 2) for s, _ in warm_link],
                       "same_mentions": all(r == cold_links for _, r in warm_link)},
              "same_answer": all(r["answer"] == cold_record["answer"] for _, r in warm)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"mirage-kg ask, cold vs warm ({result['store']} KG); server start-up {server_start:.1f} s (once)")
    print(f"{'run':<28} {'wall s':>8} {'answer s':>9} {'vs cold':>8}  stages (s)")
    for row in rows:
        ratio = f"{row['ratio_to_cold']:.0%}" if "ratio_to_cold" in row else ""
        parts = ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items())
        print(f"{row['run']:<28} {row['seconds']:>8.2f} {row['answer_seconds'] or 0:>9.2f} {ratio:>8}  {parts}")
    print(f"same answer text as the cold run (seed 0): {result['same_answer']}")
    link = result["link"]
    print(f"mirage-kg link (the same question): cold {link['cold_seconds']:.2f} s, warm "
          + ", ".join(f"{s:.2f} s ({s / link['cold_seconds']:.0%})" for s in link["warm_seconds"])
          + f"; same mentions: {link['same_mentions']}")


if __name__ == "__main__":
    main()
