"""bench_scale's smoke run: a tiny UMLS-shaped release in the exact RRF layouts, loaded and measured stage by
stage. Checks what it counts and that every stage reports sane values, never a time against a target."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_generated_release_has_the_rrf_layouts(tmp_path: Path) -> None:
    from bench_scale import write_release

    counts = write_release(tmp_path, 500, seed=3, progress=False)
    widths = {"MRCONSO.RRF": 18, "MRREL.RRF": 16, "MRSTY.RRF": 6, "MRSAB.RRF": 25}
    for name, width in widths.items():
        lines = (tmp_path / "META" / name).read_text(encoding="utf-8").splitlines()
        assert lines and all(line.endswith("|") and line.count("|") == width for line in lines), name
    conso = [line.split("|") for line in (tmp_path / "META" / "MRCONSO.RRF").read_text().splitlines()]
    assert [r[0] for r in conso] == sorted(r[0] for r in conso)  # sorted by CUI, as released
    assert len(conso) == counts["names"] and 2.0 < counts["names"] / 500 < 2.8
    assert {r[16] for r in conso} >= {"N", "O"} and len({r[11] for r in conso}) >= 20  # suppressed rows, many SABs
    rel = [line.split("|") for line in (tmp_path / "META" / "MRREL.RRF").read_text().splitlines()]
    assert len(rel) == counts["mrrel_rows"] and len(rel) % 2 == 0
    edges = {(r[0], r[4]) for r in rel}
    assert all((b, a) in edges for a, b in edges)  # both directions of every relation
    degree: dict[str, int] = {}
    for r in rel:
        degree[r[0]] = degree.get(r[0], 0) + 1
    ordered = sorted(degree.values())
    assert ordered[-1] > 5 * ordered[len(ordered) // 2]  # heavy-tailed: hubs far above the median


@pytest.mark.slow
def test_smoke_run_reports_every_stage(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, "benchmarks/bench_scale.py", "--scale", "0.0005", "--quick", "--cold",
                           "--json", str(out), "--workdir", str(tmp_path / "work")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["table"]
    assert {r["stage"] for r in rows} == {"load", "query", "link", "validate", "retrieve"}
    for r in rows:
        assert r["ours"] is not None and math.isfinite(r["ours"]) and r["ours"] >= 0, r
        if r["ratio"] is not None:
            assert r["ratio"] > 0, r
    by = {(r["stage"], r["what"]): r for r in rows}
    result = report["result"]
    assert result["load"]["triples"] > result["concepts"] * 5  # labels, types, edges: not an empty graph
    assert result["load"]["triples"] <= result["load"]["store_quads"] == result["validate"]["scan_quads"]
    assert by[("load", "peak RSS")]["ours"] > 0 and by[("load", "disk per triple")]["ours"] > 0
    # CPU seconds of the whole child (its threads included): the interpreter start alone takes some
    assert by[("load", "CPU (user + system)")]["ours"] > 0.1 and by[("load", "CPU (user + system)")]["baseline"] > 0.1
    assert by[("validate", "CPU (user + system)")]["ours"] > 0.1
    timings = result["validate"]["timings"]  # each check's seconds, from `validate --timings`
    assert {"dangling-reference", "ambiguous-label", "isa-cycle"} <= set(timings) and sum(timings.values()) > 0
    # the query process built the degree index and adjacency file: its CPU, and the process's peak (wait4's, which
    # counts pages a little differently from /proc's resident figure) beside the memory left after its queries
    query = result["query"]
    assert 0 < query["degree_index_cpu_s"] and query["peak_rss_mib"] >= 0.95 * query["rss_mib"] > 0
    for group in ("typical", "hub"):
        assert by[("query", f"anchor {group} p50")]["ours"] <= by[("query", f"anchor {group} p95")]["ours"]
        assert by[("query", f"bridge h=3 {group} p50")]["ours"] <= by[("query", f"bridge h=3 {group} p95")]["ours"]
    assert result["query"]["hub_degree"] > 5 * result["query"]["typical_degree_p50"]
    assert result["query"]["cold"] and "query cold" in done.stdout  # the store's pages dropped before each call
    assert result["query"]["bridge_connected"] > 0
    for kind in ("exact", "normalised", "synonym"):
        assert by[("link", f"{kind} found@5")]["ours"] >= 0.9, kind  # names taken from the graph are found
    assert by[("link", "fuzzy found@5")]["ours"] >= 0.5
    assert by[("link", "labels indexed")]["ours"] > result["concepts"]
    # cold: the index's files were dropped from the page cache first (what is read back depends on the file
    # system: none from a tmpfs), and what opening it and each kind read from disk is reported
    assert result["link"]["cold"] and result["link"]["open_read_mib"] >= 0
    for kind in ("exact", "normalised", "synonym", "fuzzy"):
        assert by[("link", f"{kind}: read from disk per mention")]["ours"] >= 0
    assert result["retrieve"]["questions"] > 0 and result["retrieve"]["evidence_mean"] > 0
    assert "| load | wall (s) |" in done.stdout  # the table is printed
