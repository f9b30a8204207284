"""What every medical source loader promises, on every store: it loads its fixture into one graph, atomically;
each bad input (wrong column count, bad UTF-8 byte, missing file, unknown id, truncated last line) is one
``InputError`` naming file, line and problem with the store left as it was; ``--lenient`` loads the rest and
reports every skipped row. Also the shared helpers the per-format tests use."""

from __future__ import annotations

import json
import shutil
from fnmatch import fnmatch
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import InputError
from mirage_kg.loaders import LoadOptions, LoadReport, detect, get_loader
from mirage_kg.model.namespaces import SCHEMA_GRAPH, compress
from mirage_kg.store import OxigraphStore, Store, ensure_schema
from mirage_kg.store.base import MANIFEST_GRAPH

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SOURCES = {
    "umls": FIXTURES / "umls",
    "snomed": FIXTURES / "snomed",
    "obo": FIXTURES / "obo" / "mini.obo",
    "owl": FIXTURES / "owl" / "mini.owl",
    "hpoa": FIXTURES / "hpoa" / "mini.hpoa",
}


# --- helpers shared by the per-format tests --------------------------------------------------------------------
def load(store: Store, fmt: str, path: Path, lenient: bool = False, lang: str = "en",
         **extra: object) -> tuple[list, LoadReport]:
    options = LoadOptions(lenient=lenient, lang=lang)
    options.extra.update(extra)
    report = LoadReport()
    return get_loader(fmt).load(store, path, options, report), report


def triples(store: Store, graph: str | None = None) -> set[tuple[str, str, str]]:
    """The data triples (schema and manifest left out) as compact strings: CURIEs, ``"text"@lang`` literals."""
    where = f"GRAPH <{graph}> {{ ?s ?p ?o }}" if graph else (
        f"GRAPH ?g {{ ?s ?p ?o }} FILTER(?g NOT IN (<{SCHEMA_GRAPH}>, <{MANIFEST_GRAPH}>))")
    out = set()
    for row in store.select(f"SELECT DISTINCT ?s ?p ?o WHERE {{ {where} }}"):
        o = row["o"]
        obj = compress(o.value) if o.kind == "uri" else f'"{o.value}"' + (f"@{o.lang}" if o.lang else "")
        out.add((compress(row["s"].value), compress(row["p"].value), obj))
    return out


def objects(found: set[tuple[str, str, str]], subject: str, predicate: str) -> set[str]:
    return {o for s, p, o in found if s == subject and p == predicate}


def snapshot(store: OxigraphStore) -> set[str]:
    """Every quad of an embedded store, manifest included: 'unchanged' means this set is equal."""
    return {str(q) for q in store.raw}


def fresh_store(tmp_path: Path) -> OxigraphStore:
    store = OxigraphStore(tmp_path / "store")
    ensure_schema(store)
    return store


# --- every loader on every store -------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_each_loader_fills_one_graph_the_same_on_every_store(store: Store, fmt: str) -> None:
    receipts, _ = load(store, fmt, SOURCES[fmt])
    assert len(receipts) == 1 and receipts[0].added > 0
    graph = receipts[0].graph
    assert store.triple_count(graph) == receipts[0].added
    assert graph in store.loaded_graphs()
    # a second load of the same release adds nothing: RDF is a set, and the graph name is stable
    again, _ = load(store, fmt, SOURCES[fmt])
    assert again[0].graph == graph and again[0].added == 0


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_detect_picks_the_right_loader(fmt: str) -> None:
    assert detect(SOURCES[fmt]).name == fmt


def test_loaders_are_registered() -> None:
    from mirage_kg.loaders import loader_names

    assert {"umls", "snomed", "obo", "owl", "hpoa"} <= set(loader_names())


# --- bad input -------------------------------------------------------------------------------------------------
def _edit_line(path: Path, number: int, edit: Callable[[bytes], bytes]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path.write_bytes(b"".join(lines))


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _cut_last_line(path: Path) -> None:
    data = path.read_bytes().rstrip(b"\r\n")
    path.write_bytes(data[:-7])


MRCONSO = "META/MRCONSO.RRF"
MRREL = "META/MRREL.RRF"
SCT_DESC = "Snapshot/Terminology/sct2_Description_Snapshot-en_INT_20990131.txt"
SCT_REL = "Snapshot/Terminology/sct2_Relationship_Snapshot_INT_20990131.txt"
SCT_LANG = "Snapshot/Refset/Language/der2_cRefset_LanguageSnapshot-en_INT_20990131.txt"

# case -> (format, fixture, file to damage, damage, expected line or None, words the message must hold)
BAD_INPUTS: dict[str, tuple[str, str, str, Callable[[Path], None], int | None, str]] = {
    "umls wrong column count": ("umls", "umls", MRCONSO,
                                lambda p: _edit_line(p, 3, lambda b: b.replace(b"|MSH|", b"|", 1)), 3,
                                "wrong column count"),
    "umls bad UTF-8": ("umls", "umls", MRCONSO, lambda p: _edit_line(p, 5, lambda b: b.replace(b"Alphite", b"Alph\xffte")),
                       5, "invalid UTF-8"),
    "umls unknown id": ("umls", "umls", MRREL,
                        lambda p: _append(p, b"C0000001|A1|AUI|RO|C0999999|A2|AUI||R99||MTH|MTH|||N||\n"), 12,
                        "C0999999"),
    "umls truncated last line": ("umls", "umls", MRREL, _cut_last_line, 11, "truncated last line"),
    "umls missing file": ("umls", "umls", MRCONSO, lambda p: p.unlink(), None, "missing required file MRCONSO.RRF"),
    "snomed wrong column count": ("snomed", "snomed", SCT_REL,
                                  lambda p: _edit_line(p, 4, lambda b: b.replace(b"\t0\t116680003", b"\t116680003")),
                                  4, "wrong column count"),
    "snomed bad UTF-8": ("snomed", "snomed", SCT_DESC,
                         lambda p: _edit_line(p, 12, lambda b: b.replace(b"Alpha", b"Alph\xe9")), 12, "invalid UTF-8"),
    "snomed unknown id": ("snomed", "snomed", SCT_REL,
                          lambda p: _append(p, b"2999999\t20990131\t1\t900000000000207008\t100000002\t100999999\t0\t"
                                               b"116680003\t900000000000011006\t900000000000451002\r\n"),
                          13, "100999999"),
    "snomed truncated last line": ("snomed", "snomed", SCT_DESC, _cut_last_line, 23, "truncated last line"),
    "snomed missing file": ("snomed", "snomed", SCT_LANG, lambda p: p.unlink(), None, "missing required file"),
    "obo unknown id": ("obo", "obo/mini.obo", "",
                       lambda p: _edit_line(p, 42, lambda b: b"is_a: TST:0999999\n" + b), 42, "TST:0999999"),
    "obo bad UTF-8": ("obo", "obo/mini.obo", "", lambda p: _edit_line(p, 10, lambda b: b.replace(b"phenotypic", b"ph\xc3notypic")),
                      10, "invalid UTF-8"),
    "obo syntax error": ("obo", "obo/mini.obo", "", lambda p: _edit_line(p, 11, lambda b: b"def: \"unclosed\n"), 11,
                         "syntax"),
    "hpoa wrong column count": ("hpoa", "hpoa/mini.hpoa", "",
                                lambda p: _edit_line(p, 6, lambda b: b.replace(b"\tIEA\t", b"\t", 1)), 6,
                                "wrong column count"),
    "hpoa bad UTF-8": ("hpoa", "hpoa/mini.hpoa", "",
                       lambda p: _edit_line(p, 7, lambda b: b.replace(b"Synthetic", b"Synth\x80tic")), 7, "invalid UTF-8"),
    "hpoa truncated last line": ("hpoa", "hpoa/mini.hpoa", "", _cut_last_line, 10, "truncated last line"),
    "hpoa missing file": ("hpoa", "hpoa/mini.hpoa", "", lambda p: p.unlink(), None, "no such file"),
}


def _damaged_copy(tmp_path: Path, case: str) -> tuple[str, Path, Path]:
    fmt, fixture, target, damage, _, _ = BAD_INPUTS[case]
    source = FIXTURES / fixture
    copy = tmp_path / "input" / source.name
    if source.is_dir():
        shutil.copytree(source, copy)
    else:
        copy.parent.mkdir(parents=True)
        shutil.copy(source, copy)
    damaged = copy / target if target else copy
    damage(damaged)
    return fmt, copy, damaged


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_error_naming_file_and_line_and_the_store_is_unchanged(tmp_path: Path, case: str) -> None:
    fmt, path, damaged = _damaged_copy(tmp_path, case)
    *_, line, words = BAD_INPUTS[case]
    store = fresh_store(tmp_path)
    load(store, "hpoa", SOURCES["hpoa"])  # something already there, which must survive
    before = snapshot(store)
    with pytest.raises(InputError) as caught:
        load(store, fmt, path)
    error = caught.value
    assert words.lower() in str(error).lower()
    assert error.path is not None and fnmatch(damaged.name, Path(error.path).name)  # a glob for a missing RF2 file
    assert error.line == line
    if line is not None:
        assert f"{damaged.name}:{line}:" in str(error)
    assert snapshot(store) == before
    assert not store.select(f"SELECT ?g WHERE {{ GRAPH <{MANIFEST_GRAPH}> {{ ?g <https://w3id.org/mirage-kg/schema#pendingLoad> ?t }} }}")


@pytest.mark.parametrize("case", sorted(c for c, v in BAD_INPUTS.items() if v[4] is not None))
def test_lenient_loads_the_rest_and_reports_each_skipped_row(tmp_path: Path, case: str) -> None:
    fmt, path, damaged = _damaged_copy(tmp_path, case)
    *_, line, _ = BAD_INPUTS[case]
    store = fresh_store(tmp_path)
    receipts, report = load(store, fmt, path, lenient=True)
    assert receipts[0].added > 0
    data = report.to_json()
    assert data["skipped"] >= 1
    example = next(e for r in data["reasons"] for e in r["examples"] if e["line"] == line)
    assert Path(example["file"]).name == damaged.name


def test_cli_strict_error_and_lenient_report(tmp_path: Path) -> None:
    _, path, _ = _damaged_copy(tmp_path, "umls unknown id")
    runner = CliRunner()
    strict = runner.invoke(main, ["load", str(path), "--format", "umls", "--store", str(tmp_path / "kg")])
    assert strict.exit_code == 1
    assert "MRREL.RRF:12: unknown id" in strict.output and "Traceback" not in strict.output
    report = tmp_path / "report.json"
    lenient = runner.invoke(main, ["load", str(path), "--format", "umls", "--store", str(tmp_path / "kg"),
                                   "--lenient", "--report", str(report)])
    assert lenient.exit_code == 0, lenient.output
    reasons = {r["reason"]: r for r in json.loads(report.read_text())["reasons"]}
    assert reasons["unknown id"]["count"] == 1
    assert reasons["unknown id"]["examples"][0]["line"] == 12
    # the atom-level self relation is reported too: nothing is left out silently
    assert any("itself" in r for r in reasons)
