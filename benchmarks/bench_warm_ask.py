"""``mirage-kg ask`` (and ``link``) cold vs warm, in the same run, each the wall time of a whole ``mirage-kg`` process
as a person waits for it: the README's question asked

1. by the CLI on its own (it loads the KG, the embedding model and the LLM every time);
2. with ``MIRAGE_KG_WARM`` set and no server running: the first call starts a background ``mirage-kg serve``
   (loaded once) and is answered by it;
3. the same command again: the background server answers it from its answer cache, saying so;
4. the same command with ``--no-cache``: the warm server asks its model again (llama.cpp reuses the prompts it has
   evaluated; linking and the KG are warm).

    python benchmarks/bench_warm_ask.py [--store DIR] [--backend transformers] [--json]

The target: the second identical ask <= 25% of the first's wall time. The background server is stopped at the
end. Never gates CI."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

QUESTION = "I have palpitations, feel dizzy and short of breath. What could it be and what should I take?"


def _run(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(["mirage-kg", *command, "--json"], capture_output=True,
                          text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mirage-kg {command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def _ask(store: list[str], env: dict[str, str], *extra: str) -> tuple[float, dict[str, Any]]:
    """``store`` here also carries ask's model options (``--backend``)."""
    return _run(["ask", QUESTION, "--seed", "0", *store, *extra], env)


def _link(store: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    return _run(["link", QUESTION, *store], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store folder [default: the demo KG]")
    parser.add_argument("--backend", help="ask's --backend (e.g. transformers) [default: ask's own choice]")
    parser.add_argument("--no-cold", action="store_true", help="leave out the CLI-alone ask and link (a slow CPU: the "
                        "first warm ask is itself a cold start)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    store = ["--store", args.store] if args.store else []
    model = ["--backend", args.backend] if args.backend else []
    env = {k: v for k, v in os.environ.items() if k not in ("MIRAGE_KG_SERVER", "MIRAGE_KG_TOKEN", "MIRAGE_KG_WARM")}
    env.update(HF_HUB_OFFLINE="1", MIRAGE_KG_PROGRESS="0")
    load_before = os.getloadavg()

    cold, cold_record = _ask(store + model, env) if not args.no_cold else (None, None)
    cold_link, cold_links = _link(store, env) if not args.no_cold else (None, None)
    with tempfile.TemporaryDirectory(prefix="mirage-warm-") as cache:
        warm_env = {**env, "MIRAGE_KG_WARM": "600", "MIRAGE_KG_CACHE": cache}
        try:
            runs = [("first (starts the background server)", *_ask(store + model, warm_env)),
                    ("second, the same ask", *_ask(store + model, warm_env)),
                    ("again with --no-cache", *_ask(store + model, warm_env, "--no-cache"))]
            warm_link = [_link(store, warm_env) for _ in range(2)]
        finally:
            for state in Path(cache, "servers").glob("*.json"):
                os.kill(json.loads(state.read_text())["pid"], signal.SIGTERM)

    def stages(record: dict[str, Any]) -> dict[str, float]:
        return {k: round(v, 2) for k, v in record["timings"].items() if v >= 0.05 and k != "total"}

    first = runs[0][1]
    rows = [] if cold is None else [{"run": "cold (the CLI alone)", "seconds": round(cold, 2), "cached": False,
                                     "answer_seconds": cold_record["timings"].get("total"),
                                     "stages": stages(cold_record)}]
    rows += [{"run": f"MIRAGE_KG_WARM: {name}", "seconds": round(s, 2), "cached": "cache" in r,
              "answer_seconds": r["timings"].get("total"), "stages": stages(r), "ratio_to_first": round(s / first, 3),
              **({"ratio_to_cold": round(s / cold, 3)} if cold else {})} for name, s, r in runs]
    result = {"question": QUESTION, "store": args.store or "demo", "backend": args.backend or "auto", "rows": rows,
              "target": "second identical ask <= 25% of the first's wall time",
              "second_vs_first": round(runs[1][1] / first, 3),
              "link": {"cold_seconds": round(cold_link, 2) if cold_link else None,
                       "warm_seconds": [round(s, 2) for s, _ in warm_link],
                       "same_mentions": all(r == (cold_links or warm_link[0][1]) for _, r in warm_link)},
              "same_answer": all(r["answer"] == (cold_record or runs[0][2])["answer"] for _, _, r in runs),
              "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"mirage-kg ask, cold vs MIRAGE_KG_WARM ({result['store']} KG, backend {result['backend']}, seed 0), "
          f"{os.cpu_count()} CPUs, load "
          f"{'/'.join(f'{v:.1f}' for v in load_before)} before, "
          f"{'/'.join(f'{v:.1f}' for v in result['load_average_after'])} after")
    print(f"{'run':<52} {'wall s':>8} {'answer s':>9} {'vs first':>9} {'vs cold':>8}  cache  stages (s)")
    for row in rows:
        first_ratio = f"{row['ratio_to_first']:.1%}" if "ratio_to_first" in row else ""
        cold_ratio = f"{row['ratio_to_cold']:.1%}" if "ratio_to_cold" in row else ""
        parts = ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items())
        print(f"{row['run']:<52} {row['seconds']:>8.2f} {row['answer_seconds'] or 0:>9.2f} {first_ratio:>9} "
              f"{cold_ratio:>8}  {'hit' if row['cached'] else '-':<5}  {parts}")
    print(f"second identical ask / first: {result['second_vs_first']:.1%} (target <= 25%); same answer text in every "
          f"run: {result['same_answer']}")
    link = result["link"]
    cold_text = f"cold {link['cold_seconds']:.2f} s, " if link["cold_seconds"] else ""
    print(f"mirage-kg link (the same question): {cold_text}warm "
          + ", ".join(f"{s:.2f} s" + (f" ({s / link['cold_seconds']:.0%})" if link["cold_seconds"] else "")
                      for s in link["warm_seconds"]) + f"; same mentions: {link['same_mentions']}")


if __name__ == "__main__":
    main()
