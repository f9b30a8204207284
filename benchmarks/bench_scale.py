"""A UMLS-size KG on one machine: generate a UMLS-shaped release, then measure load, queries, linking, validation
and retrieval on it, each against a baseline of the same run.

S = 1.0 is full size: 3.4M concepts, 8M MRCONSO names, 45M MRREL rows (about 60M triples once loaded). The
release is written in the exact RRF layouts (MRCONSO, MRREL, MRSTY, MRSAB; a trailing ``|`` on every line) by a
streaming generator that keeps nothing per concept (bounded memory, progress on stderr): 25 SABs, a preferred
name and 0-4 synonyms per concept, suppressed rows, both directions of every relation (the mirror row follows its
row, as in a release), and a heavy-tailed degree (a fifth of the relation targets drawn log-uniformly over CUI
rank, so C0000001.. are hubs with thousands of edges at S = 0.1).

Stages (each in its own child process, so its peak RSS from ``wait4`` counts native memory too):
- ``load``: ``mirage-kg load --format umls`` into an on-disk store vs pyoxigraph ``bulk_load`` of the same triples
  pre-serialised as N-Triples (exported from the loaded graph, not timed); ratio, wall, peak RSS, disk per triple;
- ``query``: anchor (k=10) and bridge (h=2, h=3) p50/p95 on typical and hub nodes; baseline: pyoxigraph's raw
  quad-pattern fetch of the same node's edges (anchor) and pyoxigraph's SPARQL engine on the hop query an
  endpoint would get (bridge h=2, a small sample with a deadline); with ``--cold``, the store's own files (not the
  caches beside it) are dropped from the OS page cache before every timed call, as a full-size store (14.8 GB on a
  24 GB machine) mostly is: a smaller S then shows the cost of pages read from disk; the degree index and
  adjacency file are built first when absent (wall and CPU seconds), and the process's peak RSS counts that build;
- ``link``: label-index build (its own process: time, peak RSS, size on disk), then, in another process, the
  index opened from its cache: resident memory and exact / normalised / synonym / fuzzy mentions per second
  against every name, each one product call ``Linker.link_one(mention, top=5)`` (what a search block's term and
  ``mirage-kg link`` do), by wall clock and per CPU second of the process (the wall rate is the CPU rate times the
  share of a core a loaded machine gives); baselines: the index's own lookup alone (``LabelIndex.exact``, exact)
  and rapidfuzz over every label without blocking (fuzzy), on the same mentions; with ``--cold``, the index's
  files are dropped from the page cache before that process, and it reports what opening the index and each
  kind's lookups read from disk (``/proc/self/io`` read_bytes) and their major page faults;
- ``validate``: ``mirage-kg validate`` wall, CPU, peak RSS and each check's seconds (``--timings``); baseline: one
  SPARQL COUNT over every quad (a full scan);
- ``retrieve``: ``KnowledgeGraph.retrieve`` per question ("How is X related to Y?" with two concepts' names) vs
  linking the same question alone.
The embedding ANN index is not measured (docs/benchmarks.md says why).

    python benchmarks/bench_scale.py --scale 0.01                 # ~0.5M triples, a few minutes
    python benchmarks/bench_scale.py --scale 0.1 --workdir /tmp/s # keeps the release and store there
    python benchmarks/bench_scale.py --scale 0.001 --json out.json --stages load,query

Prints one table; targets are those of issue 14. Never gates CI (the smoke test checks values, not times)."""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import CHILD_BULK  # noqa: E402
from bench_query import pct, run_with_deadline, typo  # noqa: E402
from bench_sources import phrase  # noqa: E402

FULL_CONCEPTS = 3_400_000
STAGES = ("load", "query", "link", "validate", "retrieve")
SABS = ["MSH", "SNOMEDCT_US", "NCI", "MEDCIN", "RXNORM", "LNC", "ICD10CM", "MDR", "MTH", "MEDLINEPLUS", "HPO",
        "OMIM", "CHV", "FMA", "GO", "HL7V3.0", "CPT", "ICD9CM", "NDFRT", "MED-RT", "AOD", "CSP", "DRUGBANK",
        "ORPHANET", "MSHFRE"]
STYS = [("T047", "B2.2.1.2.1", "Disease or Syndrome"), ("T184", "A2.2.2", "Sign or Symptom"),
        ("T121", "A1.4.1.1.1", "Pharmacologic Substance"), ("T023", "A1.2.3.1", "Body Part, Organ, or Organ Component"),
        ("T059", "B1.3.1.2.1", "Laboratory Procedure"), ("T061", "B1.3.1.3", "Therapeutic or Preventive Procedure"),
        ("T191", "B2.2.1.2.1.2", "Neoplastic Process"), ("T033", "A2.2", "Finding"),
        ("T109", "A1.4.1.2.1", "Organic Chemical"), ("T116", "A1.4.1.2.1.7", "Amino Acid, Peptide, or Protein")]
# (REL, RELA) of a row and of its mirror row; symmetric ones mirror onto themselves
RELATIONS = [("RO", "may_treat", "RO", "may_be_treated_by"), ("RO", "has_finding_site", "RO", "finding_site_of"),
             ("RO", "associated_with", "RO", "associated_with"), ("RO", "causative_agent_of", "RO", "has_causative_agent"),
             ("RO", "has_manifestation", "RO", "manifestation_of"), ("RB", "", "RN", ""),
             ("SY", "", "SY", ""), ("SIB", "", "SIB", ""), ("RO", "", "RO", "")]


# --- the release ----------------------------------------------------------------------------------------------------

def sizes(scale: float) -> int:
    return max(200, int(FULL_CONCEPTS * scale))


def _target(rng: random.Random, concepts: int) -> int:
    """A relation target: uniform four times in five, else log-uniform over CUI rank (hubs at the low CUIs)."""
    if rng.random() < 0.8:
        return rng.randint(1, concepts)
    return min(concepts, int(concepts ** rng.random()))


def write_release(folder: Path, concepts: int, seed: int, progress: bool = True) -> dict[str, int]:
    """MRCONSO (sorted by CUI), MRSTY, MRREL and MRSAB for ``concepts`` CUIs; returns the row counts. Per concept:
    2.35 names on average (8M at S = 1), 13.2 MRREL rows (45M at S = 1)."""
    rng = random.Random(seed)
    meta = folder / "META"
    meta.mkdir(parents=True, exist_ok=True)
    (folder / "release.dat").write_text("umls.release.name=2099AA\n")
    counts = {"concepts": concepts, "names": 0, "mrrel_rows": 0, "mrsty_rows": 0}
    aui, rui = 0, 0
    step = max(1, concepts // 20)
    started = time.perf_counter()
    with open(meta / "MRCONSO.RRF", "w", encoding="utf-8") as conso, \
            open(meta / "MRSTY.RRF", "w", encoding="utf-8") as sty, \
            open(meta / "MRREL.RRF", "w", encoding="utf-8") as rel:
        conso_buf: list[str] = []
        rel_buf: list[str] = []
        for n in range(1, concepts + 1):
            cui = f"C{n:07d}"
            sab = SABS[n % 20]
            rows = [("ENG", "P", "PF", "Y", sab, "PT", phrase(rng), "N")]
            # synonyms: 0-4, mean 1.3; a few suppressed (O obsolete, E editor) and a French name now and then
            for _ in range(rng.choice((0, 0, 1, 1, 1, 2, 2, 2, 3, 1))):
                rows.append(("ENG", "S", "VO", rng.choice("YN"), rng.choice(SABS[:24]), "SY", phrase(rng),
                             "O" if rng.random() < 0.05 else "E" if rng.random() < 0.01 else "N"))
            if n % 20 == 0:
                rows.append(("FRE", "P", "PF", "Y", "MSHFRE", "MH", phrase(rng), "N"))
            for lat, ts, stt, ispref, row_sab, tty, text, suppress in rows:
                aui += 1
                conso_buf.append(f"{cui}|{lat}|{ts}|L{aui:08d}|{stt}|S{aui:08d}|{ispref}|A{aui:08d}||||{row_sab}|"
                                 f"{tty}|{row_sab[:2]}{n}|{text}|0|{suppress}|256|\n")
            counts["names"] += len(rows)
            for tui, stn, label in {STYS[n % len(STYS)], *([rng.choice(STYS)] if n % 7 == 0 else [])}:
                sty.write(f"{cui}|{tui}|{stn}|{label}|AT{n:08d}|256|\n")
                counts["mrsty_rows"] += 1

            def pair(a: int, rel_name: str, rela: str, b: int, mirror: str, mirror_rela: str, sab: str) -> None:
                nonlocal rui
                suppress = "O" if rng.random() < 0.02 else "N"
                for c1, r, ra, c2 in ((a, rel_name, rela, b), (b, mirror, mirror_rela, a)):
                    rui += 1
                    rel_buf.append(f"C{c1:07d}|A{c1:08d}|SCUI|{r}|C{c2:07d}|A{c2:08d}|SCUI|{ra}|R{rui:09d}||{sab}|"
                                   f"{sab}|0|Y|{suppress}||\n")

            if n > 1:
                for _ in range(1 if rng.random() < 0.75 else 2):  # parents among the earlier CUIs
                    parent = min(n - 1, int((n - 1) ** rng.random()) if rng.random() < 0.2 else rng.randint(1, n - 1))
                    pair(parent, "CHD", "isa" if rng.random() < 0.5 else "", n, "PAR",
                         "inverse_isa" if rng.random() < 0.5 else "", rng.choice(SABS[:12]))
            for _ in range(rng.choice((2, 3, 4, 5, 5, 6, 7, 8))):  # 5.0 typed pairs on average
                other = _target(rng, concepts)
                if other != n:
                    r1, a1, r2, a2 = rng.choice(RELATIONS)
                    pair(n, r1, a1, other, r2, a2, rng.choice(SABS[:24]))
            if len(conso_buf) > 20_000 or len(rel_buf) > 50_000:
                conso.write("".join(conso_buf))
                rel.write("".join(rel_buf))
                counts["mrrel_rows"] += len(rel_buf)
                conso_buf.clear()
                rel_buf.clear()
            if progress and concepts >= 50_000 and n % step == 0:
                print(f"  generated {n:,}/{concepts:,} concepts ({time.perf_counter() - started:.0f} s)",
                      file=sys.stderr)
        conso.write("".join(conso_buf))
        rel.write("".join(rel_buf))
        counts["mrrel_rows"] += len(rel_buf)
    with open(meta / "MRSAB.RRF", "w", encoding="utf-8") as out:
        out.writelines(f"C{i:07d}|C{i:07d}|{s}2099|{s}|{s} synthetic|{s}|2099|||2099AA||||0|{concepts}|{concepts}"
                       f"||||{'FRE' if s == 'MSHFRE' else 'ENG'}|UTF-8|Y|Y|{s}|synthetic|\n"
                       for i, s in enumerate(SABS, start=1))
    return counts


# --- children -------------------------------------------------------------------------------------------------------

def run_json_child(kind: str, *args: str) -> tuple[dict[str, Any], float]:
    """This script as a child (``--child KIND ARGS``): its JSON answer and its own peak RSS in MiB."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", kind, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"child {kind} failed with exit code {os.waitstatus_to_exitcode(status)}")
    return json.loads(output), usage.ru_maxrss / 1024


def child_export(store_dir: str, nt: str) -> dict[str, Any]:
    """The UMLS graph of the loaded store, as N-Triples for the baseline (and its name)."""
    import pyoxigraph as ox

    store = ox.Store.read_only(store_dir)
    graphs = sorted(g.value for g in store.named_graphs() if "umls" in g.value.lower())
    if len(graphs) != 1:
        raise SystemExit(f"expected one UMLS graph in {store_dir}, found {graphs}")
    store.dump(output=nt, format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(graphs[0]))
    return {"graph": graphs[0], "quads": len(store)}


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _anon_mib() -> float:
    """The resident memory that is the process's own (RssAnon): not the pages of files it maps, such as the
    label index's, which the OS shares and may drop."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return _rss_mib()


def evict_store_pages(store_dir: str) -> None:
    """Drop the store's own files from the OS page cache (this store's pages only; the caches in its
    ``.mirage-cache`` folder stay, as files small enough to stay in memory do at full size). RocksDB's block cache
    inside the process is not touched."""
    for entry in os.scandir(store_dir):
        if entry.is_file():
            fd = os.open(entry.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def child_query(store_dir: str, concepts: int, seed: int, quick: bool, cold: bool = False) -> dict[str, Any]:
    """Anchor and bridge on typical and hub nodes, each against the engine's own primitive; ``cold``: each timed
    call finds the store's files out of the page cache (``evict_store_pages``)."""
    os.environ["MIRAGE_KG_PROGRESS"] = "0"
    import pyoxigraph as ox

    from mirage_kg.graph.paths import hop_query
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.store import OxigraphStore

    store = OxigraphStore(store_dir)
    kg = KnowledgeGraph(store, embedding_model="none")
    rng = random.Random(seed)
    started, cpu_started = time.perf_counter(), time.process_time()
    kg.degrees(["UMLS:C0000001"])  # the degree index: one pass, cached beside the store
    degree_index_s = time.perf_counter() - started
    degree_index_cpu_s = time.process_time() - cpu_started  # every thread of this process
    n = 40 if quick else 200
    typical = [f"UMLS:C{rng.randint(concepts // 10, concepts):07d}" for _ in range(n)]
    hubs = [f"UMLS:C{i:07d}" for i in range(1, 6)] * max(1, n // 25)
    iri = {c: kg.entity(c).iri for c in set(typical) | set(hubs)}
    raw = store.raw
    # cold: the baseline reads through its own engine instance, so its block cache (the engine's, in this process,
    # which dropping the OS's pages does not touch) holds only what its own calls read, not the anchor's
    baseline = ox.Store.read_only(store_dir) if cold else raw

    def raw_edges(curie: str) -> int:
        node = ox.NamedNode(iri[curie])
        return sum(1 for _ in baseline.quads_for_pattern(node, None, None)) + \
            sum(1 for _ in baseline.quads_for_pattern(None, None, node))

    before = (lambda _: evict_store_pages(store_dir)) if cold else None
    out: dict[str, Any] = {"cold": cold, "degree_index_s": degree_index_s, "degree_index_cpu_s": degree_index_cpu_s,
                           "hub_degree": kg.degrees([iri[hubs[0]]])[iri[hubs[0]]],
                           "typical_degree_p50": statistics.median(kg.degrees([iri[c] for c in typical]).values())}
    for group, nodes in (("typical", typical), ("hub", hubs)):
        out[f"anchor_{group}_cpu"] = []
        out[f"anchor_{group}"] = _times(lambda c: kg.anchor(c, k=10), nodes, out[f"anchor_{group}_cpu"], before)
        out[f"anchor_{group}_raw"] = _times(raw_edges, nodes, before=before)
    # bridge pairs: typical = a random walk of 2-3 steps from a typical node (connected) or a random pair;
    # hub = a hub and a typical node
    walk_pairs: list[tuple[str, str]] = []
    for a in typical:
        b = a
        for _ in range(rng.choice((2, 3))):
            steps = kg.anchor(b, k=5)
            if not steps:
                break
            b = rng.choice(steps).object.id
        walk_pairs.append((a, b) if b != a else (a, rng.choice(typical)))
    hub_pairs = list(zip(hubs, typical))
    out["bridge_connected"] = 0
    for hops in (2, 3):
        for group, pairs in (("typical", walk_pairs), ("hub", hub_pairs)):
            out[f"bridge{hops}_{group}_cpu"] = []
            out[f"bridge{hops}_{group}"] = _times(lambda p: kg.bridge(p[0], p[1], max_hops=hops), pairs,
                                                  out[f"bridge{hops}_{group}_cpu"], before)
    out["bridge_connected"] = sum(1 for a, b in walk_pairs if kg.bridge(a, b, max_hops=3, max_paths=1))
    out["bridge_pairs"] = len(walk_pairs)
    sparql: list[float] = []
    for a, b in walk_pairs[:10]:
        query = hop_query(kg.entity(a).iri, kg.entity(b).iri, 2)
        ms = run_with_deadline(lambda q=query: list(raw.query(q)), 20)
        sparql.append(ms if ms is not None else math.inf)
        if ms is None:
            break
    out["bridge2_typical_sparql"] = sparql
    out["rss_mib"] = _rss_mib()
    store.close()  # closed: a store left open is keyed anew by the next process, whose caches then rebuild
    return out


def _times(func: Any, items: list[Any], cpu: list[float] | None = None, before: Any = None) -> list[float]:
    """Milliseconds each call took by the wall clock; with ``cpu``, this process's CPU milliseconds per call too
    (what tells a slow call from a call that waited for a busy machine); ``before(item)`` runs untimed before each."""
    out = []
    for item in items:
        if before is not None:
            before(item)
        started, started_cpu = time.perf_counter(), time.process_time()
        func(item)
        out.append((time.perf_counter() - started) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - started_cpu) * 1000)
    return out


def _variant(name: str) -> str:
    """The name as only a normalised match finds it: upper case, hyphens for spaces and, where ``singular`` reads
    it back as this name (not after a final s, i, u or xe: "tiss", "kis", "jus", "xes"), a plural ``s``."""
    from mirage_kg.linking.text import normalise

    plain = name.upper().replace(" ", "-")
    return plain + "s" if normalise(plain + "s") == normalise(name) else plain


def child_index(store_dir: str, cache: str) -> dict[str, Any]:
    """Build the label index (an SQLite file in ``cache``): its time, size and counts; the peak RSS is the parent's
    reading of this process."""
    os.environ["MIRAGE_KG_PROGRESS"] = "0"
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.store import OxigraphStore

    kg = KnowledgeGraph(OxigraphStore(store_dir), embedding_model="none", cache_dir=Path(cache))
    started = time.perf_counter()
    index = kg.linker.index
    build_s = time.perf_counter() - started
    kg.store.close()  # closed: a store left open is keyed anew by the next process, whose caches then rebuild
    return {"build_s": build_s, "labels": index.label_count, "entities": len(index), "choices": index.choice_count,
            "disk_bytes": Path(index.path).stat().st_size, "from_cache": kg.linker.index_from_cache}


def _evict(folder: Path) -> int:
    """Drop every file of ``folder`` (the link stage's own cache, a release; or one file) from the OS's page
    cache, written back first: the next process then reads from disk what it touches, as after a reboot. Bytes
    evicted."""
    evicted = 0
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            evicted += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return evicted


def _io() -> tuple[int, int]:
    """This process's bytes read from disk (``/proc/self/io`` read_bytes) and major page faults so far."""
    import resource

    read_bytes = 0
    try:
        with open("/proc/self/io") as handle:
            for line in handle:
                if line.startswith("read_bytes:"):
                    read_bytes = int(line.split()[1])
    except OSError:  # not Linux, or not allowed: the faults still count
        pass
    return read_bytes, resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def _sample(rows: Any, n: int, rng: random.Random) -> list[Any]:
    """A uniform sample of ``n`` rows of a stream (reservoir): the label index is never held in memory."""
    out: list[Any] = []
    for seen, row in enumerate(rows):
        if seen < n:
            out.append(row)
        elif (j := rng.randrange(seen + 1)) < n:
            out[j] = row
    return out


def child_link(store_dir: str, seed: int, quick: bool, cache: str, cold: bool = False) -> dict[str, Any]:
    """``link_one`` per mention kind on the cached label index (resident memory of opening and using it, and
    what opening it and each kind's lookups read from disk: ``cold``, the parent evicted the cache first); then
    ``retrieve``."""
    os.environ["MIRAGE_KG_PROGRESS"] = "0"
    from rapidfuzz import fuzz, process

    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.linking.text import fold
    from mirage_kg.store import OxigraphStore

    store = OxigraphStore(store_dir)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=Path(cache))
    kg.groups  # noqa: B018 - the merged concepts are the graph's, not the index's: load them before measuring
    before, before_anon = _rss_mib(), _anon_mib()
    started, io_before = time.perf_counter(), _io()
    index = kg.linker.index  # opened from the cache, its packed lookup read into memory
    open_s = time.perf_counter() - started
    open_io = [a - b for a, b in zip(_io(), io_before)]
    rng = random.Random(seed)
    n = 200 if quick else 2000
    sample_p = [(t, i) for t, i, _ in _sample(index.labels(0), n, rng)]
    sample_s = [(t, i) for t, i, _ in _sample(index.labels(1), n, rng)]
    fuzzy_n = max(20, n // 10)
    kinds = {"exact": sample_p, "normalised": [(_variant(t), i) for t, i in sample_p],
             "synonym": sample_s, "fuzzy": [(typo(t, rng), i) for t, i in sample_p if len(t) >= 8][:fuzzy_n]}
    linker = kg.linker
    rows: dict[str, Any] = {}
    for kind, items in kinds.items():
        io_before = _io()
        started, cpu = time.perf_counter(), time.process_time()
        found = sum(any(c.entity.iri == index.iris[i] for c in linker.link_one(t, top=5)) for t, i in items)
        took, cpu_took = time.perf_counter() - started, time.process_time() - cpu
        read_bytes, faults = (a - b for a, b in zip(_io(), io_before))
        # wall clock, and this process's CPU time: on a shared machine the wall rate is the CPU rate times the
        # share of a core the scheduler gave us (printed as a row, so a slow figure can be told from a busy box);
        # what the lookups read from disk (none once the index is in memory), per mention
        rows[kind] = {"n": len(items), "per_s": len(items) / took, "per_cpu_s": len(items) / max(cpu_took, 1e-9),
                      "found_at_5": found / max(1, len(items)), "read_bytes_per": read_bytes / max(1, len(items)),
                      "major_faults_per": faults / max(1, len(items))}
    resident, anon = _rss_mib() - before, _anon_mib() - before_anon
    started = time.perf_counter()
    for _ in range(5):  # the index's own lookup, one SQLite query, with nothing around it
        hits = sum(1 for t, _ in kinds["exact"] if index.exact(t))
    rows["exact"]["baseline_per_s"] = 5 * len(kinds["exact"]) / max(time.perf_counter() - started, 1e-9)
    rows["exact"]["baseline_hits"] = hits
    # retrieve: questions naming two concepts
    names = [index.names[i] for _, i in rng.sample(sample_p, min(len(sample_p), 2 * (20 if quick else 60)))]
    questions = [f"How is {a} related to {b}?" for a, b in zip(names[::2], names[1::2])]
    link_ms = _times(lambda q: kg.link(q), questions)
    evidence: list[int] = []
    retrieve_ms = _times(lambda q: evidence.append(len(kg.retrieve(q).evidence)), questions)
    # last (it holds every label in memory): rapidfuzz over every label, no blocking, on some of the typos
    unblocked = kinds["fuzzy"][:10]
    every = index.all_sorted()[1]
    started = time.perf_counter()
    for text, _ in unblocked:
        process.extract(" ".join(sorted(fold(text).split())), every, scorer=fuzz.ratio, limit=10,
                        score_cutoff=linker.fuzzy_cutoff, processor=None)
    rows["fuzzy"]["baseline_per_s"] = len(unblocked) / (time.perf_counter() - started)
    store.close()  # closed: a store left open is keyed anew by the next process, whose caches then rebuild
    return {"labels": index.label_count, "entities": len(index), "from_cache": linker.index_from_cache,
            "open_s": open_s, "open_read_mib": open_io[0] / 2**20, "open_major_faults": open_io[1],
            "cold": cold, "index_mib": resident, "index_anon_mib": anon, "rss_mib": _rss_mib(), "rows": rows,
            "retrieve": retrieve_ms, "retrieve_link": link_ms, "questions": len(questions),
            "evidence_mean": statistics.fmean(evidence) if evidence else 0.0}


def child_scan(store_dir: str) -> dict[str, Any]:
    import pyoxigraph as ox

    store = ox.Store.read_only(store_dir)
    started = time.perf_counter()
    count = next(iter(store.query("SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }")))[0].value
    return {"seconds": time.perf_counter() - started, "quads": int(count)}


# --- stages ---------------------------------------------------------------------------------------------------------

def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(cmd: list[str]) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS in MiB, stdout and CPU seconds (user + system, every thread) of one child process:
    on a shared machine the wall time is mostly waiting for a core, and CPU seconds say what the work cost."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "MIRAGE_KG_PROGRESS": "0"})
    read: dict[str, bytes] = {}

    def drain(name: str, stream: Any) -> None:  # read while it runs: a full pipe would stall the child
        read[name] = stream.read()

    readers = [threading.Thread(target=drain, args=item) for item in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed: {read['err'].decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss // 1024, read["out"].decode().strip(), usage.ru_utime + usage.ru_stime


def stage_load(work: Path, release: Path, store: Path) -> dict[str, Any]:
    """Ours and the baseline each read their input cold: the release is dropped from the page cache before our
    load, the exported N-Triples before ``bulk_load`` (the export has just written them, so the baseline used to
    read its input from memory while ours read 4.7 GB from disk at S = 1.0)."""
    # the load alone: the indexes it would build next are measured by the query and link stages
    release_evicted = _evict(release)
    wall, rss, _, cpu = timed([sys.executable, "-m", "mirage_kg.cli", "load", str(release), "--format", "umls",
                          "--store", str(store), "--no-index"])
    nt = work / "umls.nt"
    exported, _ = run_json_child("export", str(store), str(nt))
    base_dir = work / "bulk-store"
    shutil.rmtree(base_dir, ignore_errors=True)
    nt_evicted = _evict(nt)
    # the baseline's wall is its whole process too (interpreter start and imports included), as ours is
    bulk_wall, base_rss, bulk_triples, bulk_cpu = timed([sys.executable, "-c", CHILD_BULK, str(base_dir), str(nt)])
    base = {"seconds": bulk_wall, "triples": int(bulk_triples)}
    result = {"wall_s": wall, "rss_mib": rss, "store_quads": exported["quads"], "triples": base["triples"],
              "disk_bytes": _du(store), "nt_bytes": nt.stat().st_size, "bulk_wall_s": base["seconds"],
              "bulk_rss_mib": base_rss, "bulk_disk_bytes": _du(base_dir),
              "cpu_s": cpu, "bulk_cpu_s": bulk_cpu, "inputs_cold": True, "release_evicted_bytes": release_evicted,
              "nt_evicted_bytes": nt_evicted}
    result["ratio"] = wall / base["seconds"]
    shutil.rmtree(base_dir, ignore_errors=True)
    nt.unlink()
    return result


#: the baseline of the first answer: a process that opens the store read-only and reads the node's edges raw
CHILD_RAW_ANCHOR = """
import sys, pyoxigraph as ox
store = ox.Store.read_only(sys.argv[1])
node = ox.NamedNode(sys.argv[2])
print(len(list(store.quads_for_pattern(node, None, None))) + len(list(store.quads_for_pattern(None, None, node))))
"""


def stage_first_answer(store: Path, concepts: int, runs: int = 3) -> dict[str, Any]:
    """Open to first answer: a new ``mirage-kg query anchor`` process on a typical concept, its caches already
    built (the query stage built them), against a process that opens the store with pyoxigraph and reads the
    concept's edges; each run alternates the two, the median kept."""
    cui = f"C{max(concepts // 2, 1):07d}"
    ours, raw = [], []
    for _ in range(runs):
        ours.append(timed([sys.executable, "-m", "mirage_kg.cli", "query", "anchor", f"UMLS:{cui}", "--store",
                           str(store), "-k", "10"])[0])
        raw.append(timed([sys.executable, "-c", CHILD_RAW_ANCHOR, str(store),
                          f"http://identifiers.org/umls/{cui}"])[0])
    return {"first_answer_s": statistics.median(ours), "first_answer_raw_s": statistics.median(raw)}


def stage_validate(store: Path) -> dict[str, Any]:
    wall, rss, out, cpu = timed([sys.executable, "-m", "mirage_kg.cli", "validate", "--store", str(store), "--json",
                            "--fail-on", "none", "--timings"])
    report = json.loads(out)  # the report's JSON object, with --timings' "timings" beside its findings
    scan, scan_rss = run_json_child("scan", str(store))
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": rss, "findings": len(report["findings"]),
            "scan_s": scan["seconds"], "scan_quads": scan["quads"], "scan_rss_mib": scan_rss,
            "ratio": wall / max(scan["seconds"], 1e-6), "timings": report["timings"]}


# --- the table ------------------------------------------------------------------------------------------------------

def _p(values: list[float]) -> tuple[float, float]:
    return pct(values, 0.5), pct(values, 0.95)


def table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measure: stage, what, ours, baseline (with its name), ratio, target."""
    rows: list[dict[str, Any]] = []

    def row(stage: str, what: str, ours: float, base: float | None = None, baseline: str = "", target: str = "",
            unit: str = "") -> None:
        ratio = ours / base if base not in (None, 0) and math.isfinite(base) else None  # type: ignore[operator]
        rows.append({"stage": stage, "what": what, "ours": ours, "baseline": base, "baseline_is": baseline,
                     "ratio": ratio, "target": target, "unit": unit})

    if "load" in result:
        r = result["load"]
        row("load", "wall", r["wall_s"], r["bulk_wall_s"],
            "bulk_load of the same N-Triples, both inputs read cold",
            "ratio <= 1.3, <= 15 min", "s")
        if "cpu_s" in r:
            row("load", "CPU (user + system)", r["cpu_s"], r["bulk_cpu_s"], "bulk_load", "", "s")
        row("load", "peak RSS", r["rss_mib"], r["bulk_rss_mib"], "bulk_load", "< 4096", "MiB")
        row("load", "disk per triple", r["disk_bytes"] / r["triples"], r["bulk_disk_bytes"] / r["triples"],
            "bulk_load's store", "", "B")
        row("load", "triples", r["triples"], None, "", "", "")
    if "query" in result:
        r = result["query"]
        for group in ("typical", "hub"):
            p50, p95 = _p(r[f"anchor_{group}"])
            b50, b95 = _p(r[f"anchor_{group}_raw"])
            row("query", f"anchor {group} p50", p50, b50, "raw quad fetch of its edges", "<= 1" if group == "typical" else "", "ms")
            row("query", f"anchor {group} p95", p95, b95, "raw quad fetch of its edges", "<= 10" if group == "typical" else "", "ms")
            if f"anchor_{group}_cpu" in r:  # CPU per call: the same figure with the machine's contention taken out
                c50, c95 = _p(r[f"anchor_{group}_cpu"])
                row("query", f"anchor {group} CPU p50", c50, None, "", "", "ms")
                row("query", f"anchor {group} CPU p95", c95, None, "", "", "ms")
            for hops in (2, 3):
                p50, p95 = _p(r[f"bridge{hops}_{group}"])
                base = _p(r["bridge2_typical_sparql"])[0] if hops == 2 and group == "typical" else None
                row("query", f"bridge h={hops} {group} p50", p50, base, "pyoxigraph SPARQL hop query" if base else "",
                    "<= 10" if hops == 3 else "", "ms")
                row("query", f"bridge h={hops} {group} p95", p95, None, "", "<= 100" if hops == 3 else "", "ms")
                if hops == 3 and f"bridge3_{group}_cpu" in r:
                    c50, c95 = _p(r[f"bridge3_{group}_cpu"])
                    row("query", f"bridge h=3 {group} CPU p50", c50, None, "", "", "ms")
                    row("query", f"bridge h=3 {group} CPU p95", c95, None, "", "", "ms")
        row("query", "degree index (once)", r["degree_index_s"], None, "", "", "s")
        row("query", "degree index (once), CPU", r["degree_index_cpu_s"], None, "", "", "s")
        if "first_answer_s" in r:
            row("query", "first answer of a new process", r["first_answer_s"], r["first_answer_raw_s"],
                "pyoxigraph open + raw edge fetch, own process", "", "s")
        row("query", "hub degree", r["hub_degree"], r["typical_degree_p50"], "typical node's degree", "", "")
        row("query", "RSS after the queries", r["rss_mib"], None, "", "", "MiB")  # read from /proc at the end
        row("query", "peak RSS (the whole process, any index build included)", r["peak_rss_mib"], None, "", "", "MiB")
    if "link" in result:
        r = result["link"]
        row("link", "index build", r["build_s"], None, "", "", "s")
        row("link", "index build peak RSS", r["build_rss_mib"], None, "", "", "MiB")
        row("link", "index on disk", r["index_disk_bytes"] / 2**20, None, "", "", "MiB")
        if "open_s" in r:
            row("link", "index open (from the cache)" + (", cold" if r.get("cold") else ""), r["open_s"], None, "",
                "", "s")
            if "open_read_mib" in r:
                row("link", "index open: read from disk", r["open_read_mib"], None, "", "", "MiB")
        row("link", "index resident (open, after the lookups)", r["index_mib"], None, "", "< 3072", "MiB")
        if "index_anon_mib" in r:
            row("link", "of which not mapped file pages", r["index_anon_mib"], None, "", "", "MiB")
        row("link", "labels indexed", r["labels"], None, "", "", "")
        for kind, target in (("exact", ">= 50000"), ("normalised", ""), ("synonym", ""), ("fuzzy", ">= 1000")):
            k = r["rows"][kind]
            base = k.get("baseline_per_s")
            row("link", f"{kind} mentions/s", k["per_s"], base,
                {"exact": "the index's lookup alone (LabelIndex.exact)",
                 "fuzzy": "rapidfuzz over every label"}.get(kind, ""), target, "/s")
            if "per_cpu_s" in k:
                row("link", f"{kind} mentions per CPU second", k["per_cpu_s"], None, "", "", "/s")
            if "read_bytes_per" in k:
                row("link", f"{kind}: read from disk per mention", k["read_bytes_per"], None, "", "", "B")
                row("link", f"{kind}: major page faults per mention", k["major_faults_per"], None, "", "", "")
            row("link", f"{kind} found@5", k["found_at_5"], None, "", "", "")
    if "validate" in result:
        r = result["validate"]
        row("validate", "wall", r["wall_s"], r["scan_s"], "COUNT over every quad", "", "s")
        if "cpu_s" in r:
            row("validate", "CPU (user + system)", r["cpu_s"], None, "", "", "s")
        row("validate", "peak RSS", r["rss_mib"], r["scan_rss_mib"], "COUNT over every quad", "", "MiB")
        row("validate", "findings", r["findings"], None, "", "", "")
    if "retrieve" in result:
        r = result["retrieve"]
        p50, p95 = _p(r["retrieve"])
        l50, l95 = _p(r["retrieve_link"])
        row("retrieve", "per question p50", p50, l50, "linking the question alone", "", "ms")
        row("retrieve", "per question p95", p95, l95, "linking the question alone", "", "ms")
        row("retrieve", "evidence facts (mean)", r["evidence_mean"], None, "", "", "")
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "timeout"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| stage | measure | ours | baseline | ratio | target | baseline is |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        unit = f" {r['unit']}" if r["unit"] else ""
        print(f"| {r['stage']} | {r['what']}{unit and ' (' + r['unit'] + ')'} | {_fmt(r['ours'])} | "
              f"{_fmt(r['baseline'])} | {_fmt(r['ratio'])} | {r['target']} | {r['baseline_is']} |")


# --- main -----------------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.01, help="1.0 = 3.4M concepts, 8M names, 45M MRREL rows")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--workdir", help="keep the release and the store in this folder (reused when present)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {','.join(STAGES)}")
    parser.add_argument("--quick", action="store_true", help="small query and mention samples")
    parser.add_argument("--cold", action="store_true",
                        help="query: drop the store's files from the page cache before every timed call; link: "
                             "drop the label index's files from it before the process that opens the index")
    parser.add_argument("--json", metavar="FILE", help="write the measurements and the table as JSON here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "export":
            answer = child_export(rest[0], rest[1])
        elif kind == "scan":
            answer = child_scan(rest[0])
        elif kind == "index":
            answer = child_index(rest[0], rest[1])
        elif kind == "query":
            answer = child_query(rest[0], int(rest[1]), int(rest[2]), rest[3] == "1", rest[4:] == ["cold"])
        else:
            answer = child_link(rest[0], int(rest[1]), rest[2] == "1", rest[3], rest[4:] == ["1"])
        print(json.dumps(answer))
        return
    stages = [s for s in args.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stage(s) {sorted(unknown)}; choose from {','.join(STAGES)}")
    concepts = sizes(args.scale)
    holder = tempfile.TemporaryDirectory(prefix="bench-scale-") if not args.workdir else None
    work = Path(args.workdir or holder.name)  # type: ignore[union-attr]
    work.mkdir(parents=True, exist_ok=True)
    release, store = work / f"umls-{args.scale:g}", work / f"store-{args.scale:g}"
    result: dict[str, Any] = {"scale": args.scale, "concepts": concepts, "load_average": os.getloadavg()}
    try:
        if not (release / "META" / "MRREL.RRF").is_file():
            print(f"generating S={args.scale:g}: {concepts:,} concepts ...", file=sys.stderr)
            started = time.perf_counter()
            result["release"] = write_release(release, concepts, args.seed)
            result["release"]["seconds"] = time.perf_counter() - started
            result["release"]["bytes"] = _du(release)
        if "load" in stages or not store.exists():
            shutil.rmtree(store, ignore_errors=True)
            print("load ...", file=sys.stderr)
            result["load"] = stage_load(work, release, store)
        quick = "1" if args.quick else "0"
        if "query" in stages:
            print("query ...", file=sys.stderr)
            result["query"], query_peak = run_json_child("query", str(store), str(concepts), str(args.seed), quick,
                                                         *(["cold"] if args.cold else []))
            result["query"]["peak_rss_mib"] = query_peak  # counts the index build, when this run built the files
            result["query"].update(stage_first_answer(store, concepts))
        if "link" in stages or "retrieve" in stages:
            print("link and retrieve ...", file=sys.stderr)
            cache = work / "linker-cache"
            shutil.rmtree(cache, ignore_errors=True)
            built, build_rss = run_json_child("index", str(store), str(cache))
            if args.cold:
                print(f"evicted {_evict(cache) / 2**20:,.0f} MiB of the index from the page cache", file=sys.stderr)
            linked, rss = run_json_child("link", str(store), str(args.seed), quick, str(cache),
                                         "1" if args.cold else "0")
            linked.update(build_s=built["build_s"], build_rss_mib=build_rss, index_disk_bytes=built["disk_bytes"],
                          choices=built["choices"], peak_rss_mib=rss)
            if "link" in stages:
                result["link"] = linked
            if "retrieve" in stages:
                result["retrieve"] = linked
        if "validate" in stages:
            print("validate ...", file=sys.stderr)
            result["validate"] = stage_validate(store)
    finally:
        if holder is not None:
            holder.cleanup()
    rows = table(result)
    rel = result.get("release", {})
    print(f"S={args.scale:g}: {concepts:,} concepts"
          + (f", {rel['names']:,} names, {rel['mrrel_rows']:,} MRREL rows ({rel['bytes'] / 1e6:,.0f} MB, generated in "
             f"{rel['seconds']:.0f} s)" if rel else "")
          + f"; load average at start {result['load_average'][0]:.1f}, at end {os.getloadavg()[0]:.1f}"
          + ("; query cold: the store's files dropped from the page cache before every timed call"
             if result.get("query", {}).get("cold") else ""))
    print_table(rows)
    if args.json:
        result["load_average_end"] = os.getloadavg()
        Path(args.json).write_text(json.dumps({"result": result, "table": rows}, indent=1, default=float))


if __name__ == "__main__":
    main()
