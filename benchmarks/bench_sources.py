"""Load speed and peak memory of the UMLS and SNOMED CT loaders against pyoxigraph's own ``bulk_load``.

Generates a UMLS-shaped release (MRCONSO, MRREL, MRSTY, MRSAB) and a SNOMED-shaped RF2 Snapshot of about 5M
triples each (fixed seed, synthetic strings, in a temporary folder), loads each with its loader into a fresh
on-disk store, exports the graph it filled as N-Triples, and bulk-loads that file into another fresh store: the
same triples, with no Python in the way. Each load runs in its own process, so its peak RSS (``ru_maxrss`` from
``wait4``) counts pyoxigraph's native memory too. Prints one table; targets: ratio <= 1.3, peak < 2 GB.

    python benchmarks/bench_sources.py                # ~5M triples per shape, several minutes
    python benchmarks/bench_sources.py --scale 0.05   # a quick look
    python benchmarks/bench_sources.py --repeat 2     # loader, bulk, bulk, loader: best of two each
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIPLES = 5_000_000
UMLS_TRIPLES_PER_CONCEPT = 9.6  # measured on the generated shape; sets the concept count for the target size
SNOMED_TRIPLES_PER_CONCEPT = 6.9

SYLLABLES = ["al", "be", "car", "dio", "en", "fa", "gas", "hep", "ic", "ju", "ki", "lo", "my", "neu", "os", "pa",
             "que", "ren", "sto", "tis", "ur", "vas", "xe", "yl", "zo", "ae", "mia", "pathy", "itis", "oma"]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))


def phrase(rng: random.Random) -> str:
    """A made-up name of one to four words, for a generated release's labels."""
    return " ".join(_word(rng) for _ in range(rng.randint(1, 4)))


# --- generators ------------------------------------------------------------------------------------------------
def write_umls(folder: Path, concepts: int, seed: int) -> None:
    """MRCONSO sorted by CUI (as released): a preferred MSH atom, SNOMED and MEDSYN synonyms, a suppressed atom,
    a French atom; MRSTY; MRREL with CHD/PAR and RO may_treat/may_be_treated_by mirror pairs and RB/RN rows."""
    rng = random.Random(seed)
    meta = folder / "META"
    meta.mkdir(parents=True)
    (folder / "release.dat").write_text("umls.release.name=2099AA\n")
    stys = [("T047", "Disease or Syndrome"), ("T184", "Sign or Symptom"), ("T121", "Pharmacologic Substance"),
            ("T023", "Body Part, Organ, or Organ Component"), ("T059", "Laboratory Procedure")]
    aui = 0
    with open(meta / "MRCONSO.RRF", "w", encoding="utf-8") as conso, open(meta / "MRSTY.RRF", "w") as sty:
        for n in range(1, concepts + 1):
            cui = f"C{n:07d}"
            name = phrase(rng)
            rows = [("ENG", "P", "PF", "Y", "MSH", "MH", f"D{n:06d}", name, "N"),
                    ("ENG", "S", "PF", "Y", "SNOMEDCT_US", "PT", str(100000000 + n), phrase(rng), "N"),
                    ("ENG", "S", "VO", "N", "MEDSYN", "SY", f"M{n}", phrase(rng), "N"),
                    ("ENG", "P", "PF", "N", "MTH", "PN", "NOCODE", name, "N")]
            if n % 5 == 0:
                rows.append(("ENG", "S", "PF", "N", "MEDSYN", "SY", f"O{n}", phrase(rng), "O"))
            if n % 4 == 0:
                rows.append(("FRE", "P", "PF", "Y", "MSHFRE", "MH", f"D{n:06d}", phrase(rng), "N"))
            rng.shuffle(rows)
            for lat, ts, stt, ispref, sab, tty, code, text, suppress in rows:
                aui += 1
                conso.write(f"{cui}|{lat}|{ts}|L{n:07d}|{stt}|S{aui:07d}|{ispref}|A{aui:08d}||||{sab}|{tty}|{code}|"
                            f"{text}|0|{suppress}||\n")
            tui, label = stys[n % len(stys)]
            sty.write(f"{cui}|{tui}|A1.2|{label}|AT{n:08d}||\n")
    with open(meta / "MRREL.RRF", "w") as rel:
        rui = 0

        def row(c1: int, r: str, c2: int, rela: str, sab: str) -> None:
            nonlocal rui
            rui += 1
            rel.write(f"C{c1:07d}|A{c1:08d}|AUI|{r}|C{c2:07d}|A{c2:08d}|AUI|{rela}|R{rui:08d}||{sab}|{sab}|||N||\n")

        for n in range(1, concepts + 1):
            if n > 10:
                parent = rng.randint(1, n - 1)
                row(parent, "CHD", n, "isa", "MSH")  # n is the child of parent
                row(n, "PAR", parent, "inverse_isa", "MSH")  # the mirror row
            if n % 3 == 0:
                disease = rng.randint(1, concepts)
                row(disease, "RO", n, "may_treat", "MED-RT")  # n may treat disease
                row(n, "RO", disease, "may_be_treated_by", "MED-RT")
            if n % 4 == 0:
                row(n, "RB", rng.randint(1, concepts), "", "MSH")
    sab_rows = [("MSH2099", "MSH"), ("SNOMEDCT_US_2099", "SNOMEDCT_US"), ("MEDSYN99", "MEDSYN"), ("MTH", "MTH"),
                ("MED-RT_2099", "MED-RT"), ("MSHFRE2099", "MSHFRE")]
    with open(meta / "MRSAB.RRF", "w") as sab:
        sab.writelines(f"C1|C2|{vsab}|{rsab}|{rsab}|{rsab}|2099|||2099AA||||0|1|1||||ENG|UTF-8|Y|Y|{rsab}|synthetic|\n"
                       for vsab, rsab in sab_rows)


def write_snomed(folder: Path, concepts: int, seed: int) -> None:
    """An RF2 Snapshot: 2% inactive concepts, FSN + 2-3 synonyms each, US language refset, IS-A and attribute
    relationships (inferred, and some stated and inactive rows that a default load leaves out)."""
    rng = random.Random(seed)
    term = folder / "Snapshot" / "Terminology"
    lang = folder / "Snapshot" / "Refset" / "Language"
    term.mkdir(parents=True)
    lang.mkdir(parents=True)
    t, mod = "20990131", "900000000000207008"
    attributes = [str(200000000 + i) for i in range(20)]
    ids = [str(100000000 + n) for n in range(concepts)]
    with open(term / "sct2_Concept_Snapshot_INT_20990131.txt", "w", newline="") as out:
        out.write("id\teffectiveTime\tactive\tmoduleId\tdefinitionStatusId\r\n")
        for ident in ["116680003"] + attributes + ids:
            active = "0" if ident.endswith("37") else "1"
            out.write(f"{ident}\t{t}\t{active}\t{mod}\t900000000000074008\r\n")
    did = 0
    with open(term / "sct2_Description_Snapshot-en_INT_20990131.txt", "w", encoding="utf-8", newline="") as desc, \
            open(lang / "der2_cRefset_LanguageSnapshot-en_INT_20990131.txt", "w", newline="") as refset:
        desc.write("id\teffectiveTime\tactive\tmoduleId\tconceptId\tlanguageCode\ttypeId\tterm\tcaseSignificanceId\r\n")
        refset.write("id\teffectiveTime\tactive\tmoduleId\trefsetId\treferencedComponentId\tacceptabilityId\r\n")
        for ident in ["116680003"] + attributes + ids:
            name = phrase(rng)
            rows = [("900000000000003001", f"{name} (disorder)", "900000000000548007"),
                    ("900000000000013009", name, "900000000000548007")]
            rows += [("900000000000013009", phrase(rng), "900000000000549004") for _ in range(rng.randint(1, 2))]
            for kind, text, acceptability in rows:
                did += 1
                desc.write(f"{did}11\t{t}\t1\t{mod}\t{ident}\ten\t{kind}\t{text}\t900000000000448009\r\n")
                refset.write(f"{did:08x}-0000-4000-8000-000000000000\t{t}\t1\t{mod}\t900000000000509007\t{did}11\t"
                             f"{acceptability}\r\n")
    rid = 0
    with open(term / "sct2_Relationship_Snapshot_INT_20990131.txt", "w", newline="") as rel:
        rel.write("id\teffectiveTime\tactive\tmoduleId\tsourceId\tdestinationId\trelationshipGroup\ttypeId\t"
                  "characteristicTypeId\tmodifierId\r\n")

        def row(source: str, target: str, kind: str, char: str = "900000000000011006", active: str = "1") -> None:
            nonlocal rid
            rid += 1
            rel.write(f"{rid}21\t{t}\t{active}\t{mod}\t{source}\t{target}\t0\t{kind}\t{char}\t900000000000451002\r\n")

        for n, ident in enumerate(ids):
            if n:
                for _ in range(1 if rng.random() < 0.7 else 2):
                    row(ident, ids[rng.randrange(n)], "116680003")
            for _ in range(rng.choice((0, 1, 1, 2, 2))):
                row(ident, ids[rng.randrange(len(ids))], rng.choice(attributes))
            if n % 10 == 0 and n:
                row(ident, ids[rng.randrange(n)], "116680003", char="900000000000010007")  # stated
                row(ident, ids[rng.randrange(n)], "116680003", active="0")  # retired


# --- child processes ---------------------------------------------------------------------------------------------
def child_loader(shape: str, source: Path, store_dir: Path, export: Path) -> dict[str, object]:
    """Load with the loader (timed), then export the graph as N-Triples for the baseline (not timed; once)."""
    os.environ["MIRAGE_KG_PROGRESS"] = "0"
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
    from mirage_kg.store import OxigraphStore

    store = OxigraphStore(store_dir)
    started = time.perf_counter()
    receipt = get_loader(shape).load(store, source, LoadOptions(), LoadReport())[0]
    seconds = time.perf_counter() - started
    import pyoxigraph as ox

    if not export.exists():
        store.raw.dump(output=str(export), format=ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(receipt.graph))
    store.close()
    return {"seconds": seconds, "triples": receipt.added, "graph": receipt.graph}


def child_bulk(nt: Path, store_dir: Path, graph: str) -> dict[str, object]:
    import pyoxigraph as ox

    store = ox.Store(str(store_dir))
    started = time.perf_counter()
    store.bulk_load(path=str(nt), format=ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(graph))
    store.flush()
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "triples": len(store)}


def run_child(args: list[str]) -> tuple[dict[str, object], float]:
    """Run this script as a child; returns its JSON answer and its peak RSS in MiB."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"child {args} failed with exit code {proc.returncode}")
    return json.loads(output), usage.ru_maxrss / 1024  # Linux: KiB


def measure(shape: str, concepts: int, seed: int, work: Path, repeat: int) -> dict[str, object]:
    """Loader, then bulk_load; with ``repeat`` 2 the order is loader, bulk, bulk, loader (so a machine getting
    busier or quieter during the run favours neither) and each side keeps its best time and worst memory."""
    source = work / f"{shape}-release"
    started = time.perf_counter()
    (write_umls if shape == "umls" else write_snomed)(source, concepts, seed)
    generated = time.perf_counter() - started
    size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    nt = work / f"{shape}.nt"
    order = ["loader", "bulk"] + (["bulk", "loader"] if repeat > 1 else [])
    runs: dict[str, list[tuple[dict[str, object], float]]] = {"loader": [], "bulk": []}
    graph = ""
    for i, kind in enumerate(order):
        store = work / f"{shape}-{kind}-{i}"
        if kind == "loader":
            runs[kind].append(run_child(["loader", shape, str(source), str(store), str(nt)]))
            graph = str(runs[kind][-1][0]["graph"])
        else:
            runs[kind].append(run_child(["bulk", str(nt), str(store), graph]))
        shutil.rmtree(store, ignore_errors=True)
    loader_s = min(float(r["seconds"]) for r, _ in runs["loader"])  # type: ignore[arg-type]
    bulk_s = min(float(r["seconds"]) for r, _ in runs["bulk"])  # type: ignore[arg-type]
    return {"shape": shape, "concepts": concepts, "source_mb": size / 1e6, "generate_s": generated,
            "triples": runs["loader"][0][0]["triples"], "bulk_triples": runs["bulk"][0][0]["triples"],
            "loader_s": loader_s, "bulk_s": bulk_s, "ratio": loader_s / bulk_s,
            "loader_runs_s": [r["seconds"] for r, _ in runs["loader"]],
            "bulk_runs_s": [r["seconds"] for r, _ in runs["bulk"]],
            "loader_rss_mb": max(m for _, m in runs["loader"]), "bulk_rss_mb": max(m for _, m in runs["bulk"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = about 5M triples per shape")
    parser.add_argument("--seed", type=int, default=20250818)
    parser.add_argument("--shapes", default="umls,snomed")
    parser.add_argument("--repeat", type=int, choices=(1, 2), default=1,
                        help="2: loader, bulk, bulk, loader, keeping the best time of each (slower, fairer on a busy machine)")
    parser.add_argument("--workdir", help="make the temporary folder here")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = child_loader(rest[0], Path(rest[1]), Path(rest[2]), Path(rest[3])) if kind == "loader" \
            else child_bulk(Path(rest[0]), Path(rest[1]), rest[2])
        print(json.dumps(result))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sources-", dir=args.workdir) as tmp:
        for shape in args.shapes.split(","):
            per = UMLS_TRIPLES_PER_CONCEPT if shape == "umls" else SNOMED_TRIPLES_PER_CONCEPT
            concepts = max(50, int(TRIPLES * args.scale / per))
            rows.append(measure(shape, concepts, args.seed, Path(tmp), args.repeat))
    print(f"{'shape':8} {'triples':>11} {'source MB':>10} {'loader s':>9} {'bulk_load s':>12} {'ratio':>6} "
          f"{'loader peak MB':>15} {'bulk peak MB':>13}")
    for r in rows:
        print(f"{r['shape']:8} {r['triples']:>11,} {r['source_mb']:>10.0f} {r['loader_s']:>9.1f} {r['bulk_s']:>12.1f} "
              f"{r['ratio']:>6.2f} {r['loader_rss_mb']:>15.0f} {r['bulk_rss_mb']:>13.0f}")
    print("baseline: pyoxigraph Store.bulk_load of the same triples pre-written as N-Triples, fresh on-disk store; "
          "targets: ratio <= 1.3, loader peak < 2048 MB")
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
