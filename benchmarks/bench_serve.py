"""Load on ``mirage-kg serve``: concurrent clients on loopback sending anchor, bridge and link requests for a fixed
time, against a KG store; requests/s, p50/p95/p99 latency and errors per endpoint. The baseline, measured in the
same run, is the same calls made in-process on one thread (``KnowledgeGraph`` with no HTTP), so the table shows what
the HTTP layer and the concurrency cost or gain.

    python benchmarks/bench_serve.py --store /path/to/hpo-store [--clients 32] [--seconds 30] [--json]
    python benchmarks/bench_serve.py --quick        # the demo KG, 4 clients, 3 s (a smoke run)

The workload: entities sampled from the store (seeded), anchor with k=10, bridge between an entity and a
neighbour of one of its neighbours with h=2 (so every bridge has a path to find), link on the entities' labels.
Linking runs without embeddings (``--embedding-model none``: building label embeddings for a large KG takes
long and is another benchmark). The server and the clients share this machine: on a shared or small machine the
figures are the machine's, not the server's; the load average is printed with them. Never gates CI."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reason.service_support import ServeProcess  # noqa: E402

OPS = ("anchor", "bridge", "link")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def workload(store: str | None, entities: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Request parameters per endpoint, drawn from the store itself (in-process, before the server starts)."""
    from mirage_kg import KnowledgeGraph, open_store

    rng = random.Random(seed)
    kg = KnowledgeGraph(open_store(store), embedding_model="none")
    try:
        rows = kg.store.select("SELECT DISTINCT ?s WHERE { ?s <http://www.w3.org/2004/02/skos/core#prefLabel> ?l } "
                               "LIMIT 50000")
        iris = sorted(r["s"].value for r in rows if kg.is_concept(r["s"].value))
        rng.shuffle(iris)
        anchors, bridges, links = [], [], []
        for iri in iris:
            if len(anchors) >= entities:
                break
            steps = kg.anchor(iri, k=10)
            if not steps:
                continue
            entity = kg.entity(iri)
            anchors.append({"entity": entity.id, "k": 10})
            links.append({"text": entity.label, "whole": "true"})
            second = kg.anchor(rng.choice(steps).end, k=10)
            others = [s.end for s in second if s.end.iri != iri]
            if others:
                bridges.append({"source": entity.id, "target": rng.choice(others).id, "max_hops": 2})
    finally:
        kg.store.close()
    return {"anchor": anchors, "bridge": bridges, "link": links}


def baseline(store: str | None, work: dict[str, list[dict[str, Any]]], per_op: int) -> dict[str, float]:
    """p50 in milliseconds of the same calls in-process, one thread, after one warm-up pass."""
    from mirage_kg import KnowledgeGraph, open_store

    kg = KnowledgeGraph(open_store(store), embedding_model="none")
    calls = {
        "anchor": lambda p: kg.anchor(p["entity"], k=p["k"]),
        "bridge": lambda p: kg.bridge(kg.entity(p["source"]), kg.entity(p["target"]), max_hops=p["max_hops"],
                                      max_paths=20),
        "link": lambda p: kg.linker.link_one(p["text"], top=5),
    }
    out = {}
    try:
        for op in OPS:
            sample = work[op][:per_op]
            for params in sample[:5]:
                calls[op](params)
            times = []
            for params in sample:
                started = time.perf_counter()
                calls[op](params)
                times.append((time.perf_counter() - started) * 1000)
            out[op] = statistics.median(times) if times else float("nan")
    finally:
        kg.store.close()
    return out


async def load(url: str, work: dict[str, list[dict[str, Any]]], clients: int, seconds: float,
               seed: int) -> dict[str, dict[str, Any]]:
    import httpx

    results: dict[str, dict[str, Any]] = {op: {"times": [], "errors": 0, "statuses": {}} for op in OPS}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        for op in OPS:  # warm the server's caches and indexes (label index, degrees) before the clock starts
            await client.get(f"/v1/{op}", params=work[op][0])
        deadline = time.perf_counter() + seconds

        async def one_client(index: int) -> None:
            rng = random.Random(seed + index)
            turn = index
            while time.perf_counter() < deadline:
                op = OPS[turn % len(OPS)]
                turn += 1
                params = rng.choice(work[op])
                started = time.perf_counter()
                try:
                    response = await client.get(f"/v1/{op}", params=params)
                    status = response.status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                elapsed = (time.perf_counter() - started) * 1000
                record = results[op]
                if status == 200:
                    record["times"].append(elapsed)
                else:
                    record["errors"] += 1
                    record["statuses"][str(status)] = record["statuses"].get(str(status), 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one_client(i) for i in range(clients)))
        wall = time.perf_counter() - started
    for record in results.values():
        record["wall"] = wall
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store folder (default: the demo KG)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--entities", type=int, default=300, help="entities sampled for the workload")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="demo KG, 4 clients, 3 s")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.store, args.clients, args.seconds, args.entities = None, 4, 3.0, 40
    os.environ.setdefault("MIRAGE_KG_PROGRESS", "0")

    work = workload(args.store, args.entities, args.seed)
    if not all(work[op] for op in OPS):
        sys.exit(f"the store gave no workload for {[op for op in OPS if not work[op]]}")
    base = baseline(args.store, work, per_op=min(100, args.entities))
    extra = ["--store", args.store] if args.store else []
    server = ServeProcess("--no-ask", "--embedding-model", "none", *extra, log=Path(os.devnull), wait_for_labels=True)
    try:
        results = asyncio.run(load(server.url, work, args.clients, args.seconds, args.seed))
    finally:
        server.stop()
    load_avg = os.getloadavg()
    rows = []
    for op in OPS:
        record = results[op]
        times = record["times"]
        rows.append({
            "endpoint": op, "requests": len(times), "errors": record["errors"], "statuses": record["statuses"],
            "requests_per_s": round(len(times) / record["wall"], 1),
            "p50_ms": round(percentile(times, 50), 2), "p95_ms": round(percentile(times, 95), 2),
            "p99_ms": round(percentile(times, 99), 2), "in_process_p50_ms": round(base[op], 2),
            "p50_vs_in_process": round(percentile(times, 50) / base[op], 1) if base[op] else None,
        })
    info = {"store": args.store or "demo", "clients": args.clients, "seconds": args.seconds,
            "load_average": [round(x, 2) for x in load_avg], "cpus": os.cpu_count(), "rows": rows,
            "total_requests_per_s": round(sum(r["requests_per_s"] for r in rows), 1)}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"mirage-kg serve on {info['store']}: {args.clients} clients, {args.seconds:g} s, loopback; "
          f"{info['cpus']} CPUs, load average {' '.join(map(str, info['load_average']))} (shared machine: "
          "clients and server compete for the same cores)")
    print(f"{'endpoint':<8} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>7} "
          f"{'in-proc p50':>12} {'ratio':>6}")
    for r in rows:
        print(f"{r['endpoint']:<8} {r['requests']:>9} {r['requests_per_s']:>8} {r['p50_ms']:>8} {r['p95_ms']:>8} "
              f"{r['p99_ms']:>8} {r['errors']:>7} {r['in_process_p50_ms']:>12} {r['p50_vs_in_process']:>6}")
    print(f"total {info['total_requests_per_s']} requests/s; ratio = server p50 under load / in-process p50 "
          "on one idle thread")


if __name__ == "__main__":
    main()
