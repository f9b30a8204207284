"""The whole command set on the embedded store and on live endpoints, in one run: whether each command's answer is
the same as the embedded store's, and how long the set took against the embedded baseline.

    python benchmarks/bench_endpoints.py [--kg emckg|hpo] [--stores embedded,oxigraph,plain,virtuoso]

``oxigraph`` is ``oxigraph serve --union-default-graph``, ``plain`` the same server without the flag, ``virtuoso``
Debian's Virtuoso 7 with its default SPARQL settings (both started on free loopback ports with throwaway folders,
as the tests do). The commands and the comparison are those of ``tests/kg/test_endpoint_parity.py`` (load or
build-default, stats, anchor, bridge h=1..3, link, retrieve, validate, export nt/nq, query sparql); the EMCKG
case is that test, HPO (the ``build-default --only hpo`` KG) is too slow for CI on two cores. Never gates CI."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "kg")]

import test_endpoint_parity as parity  # noqa: E402  (the command set and its normalisation, shared with the test)
from conftest import SHARED_DATA, OxigraphServer, VirtuosoServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kg", choices=["emckg", "hpo"], default="emckg")
    parser.add_argument("--stores", default="embedded,oxigraph,plain,virtuoso")
    args = parser.parse_args()
    kinds = ["embedded"] + [k for k in args.stores.split(",") if k and k != "embedded"]
    if args.kg == "hpo":
        load, work = ["build-default", "--only", "hpo"], parity.HPO
    else:
        load, work = ["load", str(SHARED_DATA / "emckg" / "triples.tsv")], parity.EMCKG
    tmp = Path(tempfile.mkdtemp(prefix="bench-endpoints-"))
    answers, seconds = {}, {}
    for kind in kinds:
        folder = tmp / kind
        folder.mkdir()
        server = None
        if kind == "embedded":
            where = ["--store", str(folder / "kg")]
        elif kind == "virtuoso":
            server = VirtuosoServer(folder)
            where = ["--endpoint", server.query_url]
        else:
            server = OxigraphServer(folder, union=kind == "oxigraph")
            where = ["--endpoint", server.query_url]
        try:
            started = time.perf_counter()
            answers[kind] = parity.command_set(where, load, folder, work)
            seconds[kind] = time.perf_counter() - started
        finally:
            if server is not None:
                server.stop()
        print(f"{kind}: {seconds[kind]:.1f} s", file=sys.stderr)
    reference = answers["embedded"]
    print(f"| command ({args.kg}, {reference['stats']['triples']:,} triples) | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name in reference:
        print(f"| {name} | " + " | ".join("same" if answers[k][name] == reference[name] else "DIFFERENT"
                                          for k in kinds) + " |")
    print("| seconds (ratio to embedded) | " + " | ".join(
        f"{seconds[k]:.1f} ({seconds[k] / seconds['embedded']:.1f}x)" for k in kinds) + " |")


if __name__ == "__main__":
    main()
