"""Release provenance, ``mirage-kg diff`` and ``load --update``: synthetic release pairs in the exact layouts,
each diff checked change by change, and each update checked equal (by export) to a fresh load of the new release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli.main import main
from mirage_kg.store.base import MANIFEST_GRAPH

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OBO = "http://purl.obolibrary.org/obo/"


def run(*args: str) -> object:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def data_export(store: Path) -> list[str]:
    """The store's quads minus the manifest (load times and hashes differ between two loads)."""
    lines = run("export", "--store", str(store), "--format", "nq").output.splitlines()
    return sorted(line for line in lines if f"<{MANIFEST_GRAPH}>" not in line)


def edit(path: Path, replace: dict[str, str | None], add: list[str] = ()) -> None:
    """Rewrite rows of a release file in place: a row starting with a key is replaced (None: dropped)."""
    newline = "\r\n" if b"\r\n" in path.read_bytes() else "\n"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for start, new in replace.items():
            if line.startswith(start):
                line = new
                break
        if line is not None:
            out.append(line)
    out.extend(add)
    path.write_text(newline.join(out) + newline, encoding="utf-8", newline="")


def graph_of(store: Path) -> str:
    stats = json.loads(run("stats", "--store", str(store), "--json").output)
    (graph,) = [g for g in stats["graphs"] if g["release"]]
    return graph["name"]


def check_update_equals_fresh_load(tmp_path: Path, old: Path, new: Path, *extra: str,
                                   fresh_release: Path | None = None) -> dict:
    """Load OLD, update to NEW, fresh-load NEW (or ``fresh_release``, the Snapshot a Delta leads to) into the
    same graph name; the two stores hold the same data."""
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), *extra)
    graph = graph_of(updated)
    output = run("load", "--update", str(new), "--store", str(updated), *extra).output
    assert "updated <" in output
    run("load", str(fresh_release or new), "--store", str(fresh), "--graph", graph, *extra)
    assert data_export(updated) == data_export(fresh)
    return json.loads(run("stats", "--store", str(updated), "--json").output)


# --- UMLS ---------------------------------------------------------------------------------------------------------
@pytest.fixture()
def umls_pair(tmp_path: Path) -> tuple[Path, Path]:
    """2099AA (the fixture) and 2099AB: C0000003 retired (its MRCONSO, MRSTY and MRREL rows gone), C0000004
    relabelled, one MRREL row added (C0000004 RO C0000001) and one relationship removed (the RB/RN pair between
    C0000004 and C0000001, stated once each way)."""
    old = tmp_path / "2099AA"
    shutil.copytree(FIXTURES / "umls", old)
    new = tmp_path / "2099AB"
    shutil.copytree(FIXTURES / "umls", new)
    meta = new / "META"
    edit(new / "release.dat", {"umls.release.name=": "umls.release.name=2099AB"})
    edit(meta / "MRCONSO.RRF", {
        "C0000003|": None,
        "C0000004|": 'C0000004|ENG|P|L0000060|PF|S0000060|Y|A0000060||||SNOMEDCT_US|PT|200000002|Deltapain, sharp|9|N||',
    })
    edit(meta / "MRSTY.RRF", {"C0000003|": None})
    edit(meta / "MRREL.RRF", {"C0000001|A0000012|AUI|RO|C0000003|": None, "C0000003|": None,
                               "C0000004|A0000060|AUI|RB|": None, "C0000001|A0000012|AUI|RN|": None},
         add=["C0000004|A0000060|AUI|RO|C0000001|A0000012|AUI||R0000012||MTH|MTH|||N||"])
    return old, new


def test_umls_diff_reports_exactly_the_changes(tmp_path: Path, umls_pair: tuple[Path, Path]) -> None:
    old, new = umls_pair
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))
    graph = graph_of(store)
    diff = json.loads(run("diff", graph, str(new), "--store", str(store), "--json").output)
    assert diff["concepts"]["added"] == {"count": 0, "examples": []}
    assert diff["concepts"]["retired"] == {"count": 1, "examples": ["UMLS:C0000003"]}
    assert diff["concepts"]["relabelled"]["examples"] == [
        {"id": "UMLS:C0000004", "lang": "en", "old": 'Deltapain "sharp"', "new": "Deltapain, sharp"}]
    assert {k: v["examples"] for k, v in diff["facts"]["added"].items()} == {
        "MKG:related_to": [["UMLS:C0000001", "UMLS:C0000004"]]}
    assert {k: v["examples"] for k, v in diff["facts"]["removed"].items()} == {
        "skos:broader": [["UMLS:C0000004", "UMLS:C0000001"]]}
    assert diff["synonyms"]["added"]["count"] == diff["synonyms"]["removed"]["count"] == 0
    assert diff["other"] == {"added": {}, "removed": {}}
    # the drug's relation and semantic type were used by the retired concept only
    assert diff["concepts"]["relations_removed"]["examples"] == ["MKG:may_treat"]
    assert diff["concepts"]["classes_removed"]["examples"] == ["STY:T121"]
    # the retired concept's own triples (type, labels, code, semantic type, its may_treat edge) went with it
    assert diff["concepts"]["their_triples"]["removed"] >= 4 and diff["concepts"]["their_triples"]["added"] == 0
    text = run("diff", graph, str(new), "--store", str(store), "--html", str(tmp_path / "d.html")).output
    assert "concepts retired: 1 (e.g. UMLS:C0000003)" in text and "Deltapain, sharp" in text
    assert "UMLS:C0000003" in (tmp_path / "d.html").read_text()


def test_umls_update_equals_fresh_load(tmp_path: Path, umls_pair: tuple[Path, Path]) -> None:
    stats = check_update_equals_fresh_load(tmp_path, *umls_pair)
    (graph,) = [g for g in stats["graphs"] if g["release"]]
    assert graph["release"]["release"] == "2099AB" and graph["release"]["history"] == ["2099AA"]
    assert graph["release"]["details"]["sources"]["MSH"]


def _whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the RRF files the UMLS loader reads whole from now on (``read_byte_blocks``)."""
    import mirage_kg.loaders.umls as umls

    names: list[str] = []
    read_blocks = umls.read_byte_blocks
    monkeypatch.setattr(umls, "read_byte_blocks",
                        lambda path, *a, **k: names.append(path.name) or read_blocks(path, *a, **k))
    return names


def test_umls_update_parses_only_the_rows_of_the_changed_concepts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umls_pair: tuple[Path, Path]) -> None:
    old, new = umls_pair
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), "--no-index")
    whole = _whole_reads(monkeypatch)
    output = run("load", "--update", str(new), "--store", str(updated), "--no-index").output
    monkeypatch.undo()
    # C0000003's and C0000004's own rows changed; C0000003 went (every edge naming it re-read); 5 MRREL rows changed
    assert "compared: the rows that changed (9 of 27 rows changed; the 2 concepts of changed MRCONSO/MRSTY rows " \
           "re-read, 5 MRREL rows applied one by one, 1 concepts kept or dropped re-read with their edges)" in output
    assert not {"MRCONSO.RRF", "MRSTY.RRF", "MRREL.RRF"} & set(whole)  # only the rows naming C0000001/3/4
    run("load", str(new), "--store", str(fresh), "--graph", graph_of(updated), "--no-index")
    assert data_export(updated) == data_export(fresh)


def test_umls_update_follows_concepts_kept_or_dropped_and_new_declarations(tmp_path: Path) -> None:
    """C0000002 suppressed in every row (no longer kept: the unchanged edges of C0000001 and C0000004 into it go);
    C0000007 added with a semantic type and a relation nobody used before (both declared)."""
    old, new = tmp_path / "2099AA", tmp_path / "2099AB"
    shutil.copytree(FIXTURES / "umls", old)
    shutil.copytree(FIXTURES / "umls", new)
    meta = new / "META"
    conso = (meta / "MRCONSO.RRF").read_text(encoding="utf-8").splitlines()
    conso = [line.replace("|0|N||", "|0|O||") if line.startswith("C0000002|") else line for line in conso]
    (meta / "MRCONSO.RRF").write_text("\n".join(conso) + "\nC0000007|ENG|P|L0000090|PF|S0000090|Y|A0000090||||MSH|"
                                      "MH|D000007|Etaemia|0|N||\n", encoding="utf-8")
    edit(meta / "MRSTY.RRF", {}, add=["C0000007|T999|A9.9|Novel Type|AT0000007||"])
    edit(meta / "MRREL.RRF", {}, add=["C0000001|A0000012|AUI|RO|C0000007|A0000090|AUI|has_novelty|R0000012||MSH|"
                                      "MSH|||N||"])
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), "--no-index")
    output = run("load", "--update", str(new), "--store", str(updated), "--no-index").output
    assert "the 2 concepts of changed MRCONSO/MRSTY rows re-read, 1 MRREL rows applied one by one, 2 concepts " \
           "kept or dropped re-read with their edges" in output
    assert "concepts added: 1 (e.g. UMLS:C0000007)" in output and "concepts retired: 1 (e.g. UMLS:C0000002)" in output
    run("load", str(new), "--store", str(fresh), "--graph", graph_of(updated), "--no-index")
    assert data_export(updated) == data_export(fresh)


def _picked_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The RRF files whose rows an update picks by CUI from now on (``UmlsRows.picked``)."""
    from mirage_kg.loaders.umls import UmlsRows

    names: list[str] = []
    picked = UmlsRows.picked
    monkeypatch.setattr(UmlsRows, "picked", lambda self, name, *a, **k: names.append(name) or picked(self, name, *a, **k))
    return names


def test_umls_update_applies_changed_relation_rows_one_by_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only MRREL changes, so no concept's own rows are read: one row of the isa mirror pair goes (its edge stays,
    the other row still makes it), then the other (the edge goes); a suppressed row is no longer suppressed (its
    relation, never used before, is declared); both rows of the only may_treat pair go (the relation's last use:
    its declaration goes); a row's SAB changes and a new row repeats an edge (the edge stays as it was); an inverse
    pair of new rows lands on one edge.
    Each update equals a fresh load of its release by export."""
    v1, v2, v3 = tmp_path / "2099AA", tmp_path / "2099AB", tmp_path / "2099AC"
    for release in (v1, v2, v3):
        shutil.copytree(FIXTURES / "umls", release)
        edit(release / "release.dat", {"umls.release.name=": f"umls.release.name={release.name}"})
    mirror = "C0000004|A0000060|AUI|RO|C0000002|A0000040|AUI|manifestation_of|R0000013||MSH|MSH|||N||"
    inverse = "C0000002|A0000040|AUI|RO|C0000004|A0000060|AUI|has_manifestation|R0000014||MSH|MSH|||N||"
    changes = {"C0000001|A0000012|AUI|CHD|": None,  # its mirror row (PAR) stays
               "C0000001|A0000012|AUI|RO|C0000004|A0000060|AUI|has_manifestation|": "C0000001|A0000012|AUI|RO|"
               "C0000004|A0000060|AUI|has_manifestation|R0000009||MEDSYN|MEDSYN|||N||",  # no longer suppressed
               "C0000001|A0000012|AUI|RO|C0000003|": None, "C0000003|A0000050|AUI|RO|C0000001|": None,
               "C0000002|A0000040|AUI|RO|C0000004|": "C0000002|A0000040|AUI|RO|C0000004|A0000060|AUI||R0000007||MSH|"
               "MSH|||N||"}  # SAB MTH -> MSH
    again = "C0000004|A0000060|AUI|RB|C0000001|A0000012|AUI||R0000015||MSH|MSH|||N||"  # an edge the graph holds
    edit(v2 / "META" / "MRREL.RRF", changes, add=[mirror, inverse, again])
    edit(v3 / "META" / "MRREL.RRF", {**changes, "C0000002|A0000040|AUI|PAR|": None}, add=[mirror, inverse, again])
    updated = tmp_path / "updated"
    run("load", str(v1), "--store", str(updated), "--no-index")
    graph = graph_of(updated)
    picked = _picked_files(monkeypatch)
    output = run("load", "--update", str(v2), "--store", str(updated), "--no-index").output
    assert "the 0 concepts of changed MRCONSO/MRSTY rows re-read, 10 MRREL rows applied one by one, 0 concepts " \
           "kept or dropped re-read with their edges" in output
    assert "MRCONSO.RRF" not in picked and "MRSTY.RRF" not in picked  # no concept's own rows read
    assert "relations added: 1 (e.g. MKG:has_manifestation)" in output
    assert "relations removed: 1 (e.g. MKG:may_treat)" in output
    assert "facts - MKG:may_treat: 1 (UMLS:C0000003 -> UMLS:C0000001)" in output
    assert "facts + MKG:has_manifestation: 2" in output  # C0000004 -> C0000001 (unsuppressed), -> C0000002 (pair)
    assert "subClassOf" not in output  # the isa edge stays: the PAR row still makes it
    assert "related_to" not in output and "broader" not in output  # the SAB change, the repeated edge: as they were
    monkeypatch.undo()
    fresh = tmp_path / "fresh"
    run("load", str(v2), "--store", str(fresh), "--graph", graph, "--no-index")
    assert data_export(updated) == data_export(fresh)
    output = run("load", "--update", str(v3), "--store", str(updated), "--no-index").output
    assert "facts - rdfs:subClassOf: 1 (UMLS:C0000002 -> UMLS:C0000001)" in output  # its last row went
    assert "1 MRREL rows applied one by one" in output
    fresh = tmp_path / "fresh3"
    run("load", str(v3), "--store", str(fresh), "--graph", graph, "--no-index")
    assert data_export(updated) == data_export(fresh)


def test_umls_update_of_a_row_naming_an_unknown_concept_fails_as_a_fresh_load(tmp_path: Path) -> None:
    """An added MRREL row naming a CUI that MRCONSO lacks is the same error a fresh load gives (and the graph
    stays as it was); lenient, the row is skipped and the update equals the lenient fresh load."""
    old, new = tmp_path / "2099AA", tmp_path / "2099AB"
    shutil.copytree(FIXTURES / "umls", old)
    shutil.copytree(FIXTURES / "umls", new)
    edit(new / "META" / "MRREL.RRF", {}, add=["C0000001|A0000012|AUI|RO|C0000099|A0000099|AUI||R0000099||MSH|MSH|||N||"])
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), "--no-index")
    before = data_export(updated)
    for store, args in ((fresh, ["load", str(new)]), (updated, ["load", "--update", str(new)])):
        result = CliRunner().invoke(main, [*args, "--store", str(store), "--no-index"])
        assert result.exit_code != 0 and "C0000099 is not a CUI of MRCONSO.RRF" in result.output
    assert data_export(updated) == before
    lenient = tmp_path / "lenient"
    run("load", str(old), "--store", str(lenient), "--no-index", "--lenient")
    output = run("load", "--update", str(new), "--store", str(lenient), "--no-index", "--lenient").output
    assert "1 MRREL rows applied one by one" in output and "no changes" in output
    run("load", str(new), "--store", str(fresh), "--graph", graph_of(lenient), "--no-index", "--lenient")
    assert data_export(lenient) == data_export(fresh)


def test_a_remembered_hash_stands_only_for_the_bytes_it_was_made_from(tmp_path: Path) -> None:
    """``load --update`` records the SHA-256 its diff read made (``hashes_remembered``); a file that changed since
    is hashed again, and outside an update nothing is remembered."""
    import hashlib

    from mirage_kg.releases.line_scope import line_digests
    from mirage_kg.releases.provenance import file_hashes, hashes_remembered, remember_hash

    file = tmp_path / "MRREL.RRF"
    file.write_bytes(b"a|\nb|\n")
    with hashes_remembered():
        assert line_digests(file).sha256 == hashlib.sha256(b"a|\nb|\n").hexdigest() == file_hashes(file)["MRREL.RRF"]
        remember_hash(file, "not this file's hash")
        assert file_hashes(file)["MRREL.RRF"] == "not this file's hash"  # read once: not read again
        file.write_bytes(b"a|\nb|\nc|\n")
        assert file_hashes(file)["MRREL.RRF"] == hashlib.sha256(b"a|\nb|\nc|\n").hexdigest()
    remember_hash(file, "not this file's hash")  # no update in course: nothing kept
    assert file_hashes(file)["MRREL.RRF"] == hashlib.sha256(b"a|\nb|\nc|\n").hexdigest()


def test_row_changes_finds_the_lines_one_file_lacks_in_file_order(tmp_path: Path) -> None:
    """The digest compare (sorted arrays): a line only in the old file is removed, only in the new one added,
    each with its line number, in file order; a repeated or moved line is no change; ``kept`` flags new lines."""
    from mirage_kg.releases.line_scope import row_changes

    old, new, empty = tmp_path / "old.rrf", tmp_path / "new.rrf", tmp_path / "empty.rrf"
    old.write_bytes(b"a|\nb|\nc|\nd|\nb|\n")
    new.write_bytes(b"d|\nx|\na|\na|\ny|\nlast|")  # moved and repeated lines, a last line without its break
    empty.write_bytes(b"")
    changes = row_changes(old, new)
    assert changes.removed == [(2, b"b|\n"), (3, b"c|\n"), (5, b"b|\n")]
    assert changes.added == [(2, b"x|\n"), (5, b"y|\n"), (6, b"last|")]
    assert changes.kept == bytearray([1, 0, 1, 1, 0, 0]) and changes.lines == 6
    assert row_changes(old, old).removed == row_changes(old, old).added == []
    from_nothing = row_changes(empty, new)
    assert from_nothing.removed == [] and len(from_nothing.added) == 6 and not any(from_nothing.kept)
    to_nothing = row_changes(old, empty)
    assert len(to_nothing.removed) == 5 and to_nothing.added == [] and to_nothing.lines == 0


def test_umls_update_with_an_edited_previous_release_compares_the_whole_release(
        tmp_path: Path, umls_pair: tuple[Path, Path]) -> None:
    old, new = umls_pair
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), "--no-index")
    edit(old / "META" / "MRCONSO.RRF", {"C0000006|": None})  # the graph no longer matches these files
    output = run("load", "--update", str(new), "--store", str(updated), "--no-index").output
    assert "compared: whole release regenerated and compared with the graph (the previous release's " \
           "META/MRCONSO.RRF changed since it was loaded (SHA-256))" in output
    run("load", str(new), "--store", str(fresh), "--graph", graph_of(updated), "--no-index")
    assert data_export(updated) == data_export(fresh)


@pytest.mark.parametrize("case", ["folder moved", "other options", "inverses changed", "too many rows"])
def test_umls_update_falls_back_to_the_whole_release_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umls_pair: tuple[Path, Path], case: str) -> None:
    """Each reason the per-CUI scope cannot stand for the graph sends the update to the whole-release compare,
    named in the output; the result is a fresh load's either way."""
    import mirage_kg.releases.umls_scope as umls_scope

    old, new = umls_pair
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated), "--no-index")
    options: list[str] = []
    if case == "folder moved":
        old.rename(tmp_path / "moved")
        reason = "the previous release's folder"
    elif case == "other options":
        options = ["--sab", "MSH"]
        reason = "the previous release was loaded with other options"
    elif case == "inverses changed":
        edit(new / "META" / "MRDOC.RRF", {}, add=["RELA|has_novelty|rela_inverse|novelty_of|",
                                                  "RELA|novelty_of|rela_inverse|has_novelty|"])
        reason = "MRDOC's relation inverses changed"
    else:
        monkeypatch.setattr(umls_scope, "MAX_CHANGED_SHARE", 0.0)
        monkeypatch.setattr(umls_scope, "MAX_CHANGED_IN_MEMORY", 0)
        reason = "rows of MRCONSO.RRF and the files before it changed"
    output = run("load", "--update", str(new), "--store", str(updated), "--no-index", *options).output
    assert "compared: whole release regenerated and compared with the graph (" in output and reason in output
    run("load", str(new), "--store", str(fresh), "--graph", graph_of(updated), "--no-index", *options)
    assert data_export(updated) == data_export(fresh)


def test_citations_name_the_release(tmp_path: Path, umls_pair: tuple[Path, Path]) -> None:
    from mirage_kg.model.namespaces import expand
    from mirage_kg.releases import citations, release_of
    from mirage_kg.store import open_store

    old, new = umls_pair
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))
    graph = expand(graph_of(store))
    with open_store(store) as opened:
        assert citations(opened)[graph] == "UMLS 2099AA"
        assert release_of(opened, graph).files["META/MRCONSO.RRF"]  # a SHA-256 per release file
    run("load", "--update", str(new), "--store", str(store))
    with open_store(store) as opened:
        assert citations(opened)[graph] == "UMLS 2099AB"


def test_update_of_the_same_release_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    run("load", str(FIXTURES / "umls"), "--store", str(store))
    before = data_export(store)
    output = run("load", "--update", str(FIXTURES / "umls"), "--store", str(store)).output
    assert "no changes" in output
    assert data_export(store) == before


# --- OBO ----------------------------------------------------------------------------------------------------------
@pytest.fixture()
def obo_pair(tmp_path: Path) -> tuple[Path, Path]:
    """tst 2099-01-31 (the fixture) and 2099-02-28: TST:0000005 obsoleted, a synonym added to TST:0000004."""
    old = tmp_path / "old" / "mini.obo"
    old.parent.mkdir()
    shutil.copy(FIXTURES / "obo" / "mini.obo", old)
    text = old.read_text(encoding="utf-8")
    text = text.replace("data-version: tst/releases/2099-01-31", "data-version: tst/releases/2099-02-28")
    text = text.replace("id: TST:0000005\nname: fast heart rate\n", "id: TST:0000005\nname: fast heart rate\n"
                        "is_obsolete: true\n")
    text = text.replace("id: TST:0000004\nname: heart\n", "id: TST:0000004\nname: heart\n"
                        'synonym: "cardiac organ" EXACT []\n')
    new = tmp_path / "new" / "mini.obo"
    new.parent.mkdir()
    new.write_text(text, encoding="utf-8")
    return old, new


def test_obo_diff_reports_exactly_the_changes(tmp_path: Path, obo_pair: tuple[Path, Path]) -> None:
    old, new = obo_pair
    diff = json.loads(run("diff", str(old), str(new), "--json").output)
    assert diff["versions"] == {"old": ["tst/releases/2099-01-31"], "new": ["tst/releases/2099-02-28"]}
    assert diff["concepts"]["retired"]["examples"] == [OBO + "TST_0000005"]
    assert diff["concepts"]["added"]["count"] == 0 and diff["concepts"]["relabelled"]["count"] == 0
    assert diff["synonyms"]["added"]["examples"] == [[OBO + "TST_0000004", "cardiac organ"]]
    assert diff["synonyms"]["removed"]["count"] == 0
    assert diff["facts"] == {"added": {}, "removed": {}}
    assert diff["other"] == {"added": {}, "removed": {}}


def test_obo_update_equals_fresh_load(tmp_path: Path, obo_pair: tuple[Path, Path]) -> None:
    check_update_equals_fresh_load(tmp_path, *obo_pair)


# --- triple files: only the changed rows ------------------------------------------------------------------------
_TRIPLES_V1 = ("Panic_disorder\thas_symptom\tDizziness\n"
               "# a comment row\n"
               "Panic_disorder\thas_symptom\tPalpitations\n"
               "Flu\thas_symptom\tFever\n"
               "Flu\thas_symptom\tFever \n"          # the same fact spelled with a trailing space
               "Gout\tpossible_drug\tColchicine\n"
               "Old_thing\tonly_relation\tGone_too\n"
               "Asthma\thas_symptom\tWheeze\n")


def _triples_v2(text: str) -> str:
    text = text.replace("Flu\thas_symptom\tFever\n", "")  # its other spelling keeps the fact
    text = text.replace("Old_thing\tonly_relation\tGone_too\n", "")  # entities and relation used nowhere else
    text = text.replace("Panic_disorder\thas_symptom\tPalpitations\n", "")  # Palpitations still named below
    text = text.replace("Asthma\thas_symptom\tWheeze", "Asthma\thas_symptom\tDyspnoea")
    return text + "Heart_attack\thas_symptom\tPalpitations\nGout\tnew_relation\tUric acid\n"


def test_plain_triple_file_update_equals_fresh_load(tmp_path: Path) -> None:
    """ASCII without spaces: the scan of unchanged rows takes its fast way."""
    plain = _TRIPLES_V1.replace("Fever \n", "Fever\n")
    old, new = tmp_path / "v1" / "facts.tsv", tmp_path / "v2" / "facts.tsv"
    old.parent.mkdir()
    new.parent.mkdir()
    old.write_text(plain + "Cough\thas_symptom\tPalpitations\n", encoding="utf-8")
    new.write_text(_triples_v2(plain).replace(" ", "_"), encoding="utf-8")
    run("load", str(old), "--store", str(tmp_path / "updated"))
    graph = graph_of(tmp_path / "updated")
    assert "compared: source lines" in run("load", "--update", str(new), "--store", str(tmp_path / "updated")).output
    run("load", str(new), "--store", str(tmp_path / "fresh"), "--graph", graph)
    assert data_export(tmp_path / "updated") == data_export(tmp_path / "fresh")


def test_triple_file_update_parses_only_the_changed_rows(tmp_path: Path) -> None:
    old, new = tmp_path / "v1" / "facts.tsv", tmp_path / "v2" / "facts.tsv"
    old.parent.mkdir()
    new.parent.mkdir()
    old.write_text(_TRIPLES_V1, encoding="utf-8")
    new.write_text(_triples_v2(_TRIPLES_V1), encoding="utf-8")
    store = tmp_path / "updated"
    run("load", str(old), "--store", str(store))
    graph = graph_of(store)
    output = run("load", "--update", str(new), "--store", str(store)).output
    assert "compared: source lines: 4 rows removed and 3 added of 7" in output
    run("load", str(new), "--store", str(tmp_path / "fresh"), "--graph", graph)
    assert data_export(store) == data_export(tmp_path / "fresh")
    # each update starts from the file recorded last; one edited since its load is compared whole
    releases = [tmp_path / f"v{n}.tsv" for n in (3, 4, 5)]
    releases[0].write_text(_TRIPLES_V1, encoding="utf-8")
    releases[1].write_text(_TRIPLES_V1.replace("Gout", "Gouty arthritis"), encoding="utf-8")
    releases[2].write_text(_TRIPLES_V1, encoding="utf-8")
    for release in releases[:2]:
        assert "compared: source lines" in run("load", "--update", str(release), "--store", str(store)).output
    releases[1].write_text("changed after its load\tr\tx\n", encoding="utf-8")
    output = run("load", "--update", str(releases[2]), "--store", str(store)).output
    assert "whole release regenerated" in output and "changed since it was loaded" in output
    run("load", str(releases[2]), "--store", str(tmp_path / "fresh5"), "--graph", graph)
    assert data_export(store) == data_export(tmp_path / "fresh5")


_NT_V1 = """<http://example.org/Asthma> <http://example.org/has_symptom> <http://example.org/Wheeze> .
<http://example.org/Asthma> <http://www.w3.org/2004/02/skos/core#prefLabel> "Asthma"@EN .
<http://example.org/Flu> <http://example.org/has_symptom> <http://example.org/Fever> .
<http://example.org/Caf\\u00E9> <http://example.org/near> <http://example.org/Flu> .
# a comment row
<http://example.org/Gout> <http://example.org/possible_drug> <http://example.org/Colchicine> .
"""


def test_n_triples_update_parses_only_the_changed_rows(tmp_path: Path) -> None:
    old, new = tmp_path / "v1" / "kg.nt", tmp_path / "v2" / "kg.nt"
    old.parent.mkdir()
    new.parent.mkdir()
    old.write_text(_NT_V1, encoding="utf-8")
    changed = _NT_V1.replace("<http://example.org/Wheeze>", "<http://example.org/Dyspnoea>")
    changed = changed.replace("<http://example.org/Caf\\u00E9>", "<http://example.org/Caf\u00e9>")  # same IRI
    changed = changed.replace('"Asthma"@EN', '"Asthma"@en')  # the same literal
    new.write_text(changed.replace("<http://example.org/Gout> <http://example.org/possible_drug> "
                                   "<http://example.org/Colchicine> .\n", ""), encoding="utf-8")
    store = tmp_path / "updated"
    run("load", str(old), "--store", str(store))
    graph = graph_of(store)
    output = run("load", "--update", str(new), "--store", str(store)).output
    assert "compared: source lines: 4 rows removed and 3 added of 5" in output and "triples: -2 +1" in output
    run("load", str(new), "--store", str(tmp_path / "fresh"), "--graph", graph)
    assert data_export(store) == data_export(tmp_path / "fresh")
    # a changed row with a blank node: its label is the file's own, so the whole release is compared
    newer = tmp_path / "v3.nt"
    newer.write_text(changed + "_:b1 <http://example.org/near> <http://example.org/Flu> .\n", encoding="utf-8")
    assert "blank node" in run("load", "--update", str(newer), "--store", str(store)).output


def test_triple_file_update_with_a_bad_new_row_names_its_line(tmp_path: Path) -> None:
    old, new = tmp_path / "v1.tsv", tmp_path / "v2.tsv"
    old.write_text(_TRIPLES_V1, encoding="utf-8")
    new.write_text(_TRIPLES_V1 + "Flu\tonly two fields\n", encoding="utf-8")
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))
    before = data_export(store)
    result = CliRunner().invoke(main, ["load", "--update", str(new), "--store", str(store)])
    assert result.exit_code == 1 and "v2.tsv:9" in result.output
    assert "wrong column count" in result.output
    assert data_export(store) == before


# --- atomicity ----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_update_leaves_the_previous_release(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    def release(path: Path, changed: int) -> None:
        with open(path, "w") as handle:
            for i in range(0, 250_000, 1000):
                handle.write("".join(f"E{j}\tr{j % 7}\tE{(j * 7919 + (j < changed)) % 100_000}\n"
                                     for j in range(i, i + 1000)))

    old, new = tmp_path / "v1" / "facts.tsv", tmp_path / "v2" / "facts.tsv"
    old.parent.mkdir()
    new.parent.mkdir()
    release(old, 0)
    release(new, 2_500)
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))
    before = sorted(run("export", "--store", str(store), "--format", "nq").output.splitlines())
    shutil.copytree(store, tmp_path / "kg-copy")  # to finish the same update on, should the kill come late
    # without the previous file the whole release is regenerated: slow enough to be watched and killed
    old.unlink()
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "mirage_kg.cli", "load", "--update", str(new), "--store",
                             str(store)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)
    # while the update works, readers (another process, read-only) still see the previous release
    during = subprocess.run([sys.executable, "-m", "mirage_kg.cli", "export", "--store", str(store), "--format",
                             "nq"], env=env, capture_output=True, text=True, check=True).stdout
    assert proc.poll() is None, "the update finished before it could be watched; use a bigger file"
    assert sorted(during.splitlines()) == before
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the update finished before it could be killed; use a bigger file"
    after = sorted(run("export", "--store", str(store), "--format", "nq").output.splitlines())
    if after != before:
        # on a busy machine the kill can come after the update committed (while it carries the indexes): then
        # the store must hold the whole new release, never a mix (the manifest's load times aside)
        run("load", "--update", str(new), "--store", str(tmp_path / "kg-copy"))
        whole = data_export(store) == data_export(tmp_path / "kg-copy")  # a bool: a 250k-line diff takes minutes
        assert whole, "a killed update left neither the previous release nor the new one"


# --- SNOMED CT ----------------------------------------------------------------------------------------------------
_SNOMED_HEADERS = {
    "Terminology/sct2_Concept_{kind}_INT_20990228.txt": "id\teffectiveTime\tactive\tmoduleId\tdefinitionStatusId",
    "Terminology/sct2_Description_{kind}-en_INT_20990228.txt": "id\teffectiveTime\tactive\tmoduleId\tconceptId\t"
                                                                "languageCode\ttypeId\tterm\tcaseSignificanceId",
    "Terminology/sct2_Relationship_{kind}_INT_20990228.txt": "id\teffectiveTime\tactive\tmoduleId\tsourceId\t"
                                                             "destinationId\trelationshipGroup\ttypeId\t"
                                                             "characteristicTypeId\tmodifierId",
    "Refset/Language/der2_cRefset_Language{kind}-en_INT_20990228.txt": "id\teffectiveTime\tactive\tmoduleId\t"
                                                                       "refsetId\treferencedComponentId\tacceptabilityId",
}
_M, _US, _GB = "900000000000207008", "900000000000509007", "900000000000508004"
# The Delta of 2099-02-28, file by file: Gamma finding inactivated; a new IS-A (Kidney place IS-A Clinical thing);
# the description "Beta disorder" reworded; in the US refset "Alphaitis" becomes preferred and "Alpha disorder"
# acceptable.
_DELTA_ROWS = [
    [f"100000006\t20990228\t0\t{_M}\t900000000000074008"],
    ["1000062\t20990228\t1\t{m}\t100000003\ten\t900000000000013009\tBeta disease\t900000000000448009".format(m=_M)],
    [f"2000012\t20990228\t1\t{_M}\t100000005\t100000001\t0\t116680003\t900000000000011006\t900000000000451002"],
    [f"00000000-0000-4000-8000-000000000018\t20990228\t1\t{_M}\t{_US}\t1000052\t900000000000548007",
     f"00000000-0000-4000-8000-000000000010\t20990228\t1\t{_M}\t{_US}\t1000053\t900000000000549004"],
]


def make_snomed_releases(tmp_path: Path, delta_rows: list[list[str]]) -> tuple[Path, Path, Path]:
    """The fixture Snapshot (20990131), a Delta to 20990228 holding ``delta_rows`` (concept, description,
    relationship and language rows), and the Snapshot of 20990228 they lead to, for comparison."""
    old = tmp_path / "SnomedCT_20990131" / "Snapshot"
    shutil.copytree(FIXTURES / "snomed" / "Snapshot", old)
    delta = tmp_path / "SnomedCT_20990228_delta" / "Delta"
    snapshot = tmp_path / "SnomedCT_20990228" / "Snapshot"
    for (name, header), rows in zip(_SNOMED_HEADERS.items(), delta_rows):
        target = delta / name.format(kind="Delta")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(("\r\n".join([header, *rows]) + "\r\n").encode("utf-8"))
        base = next(old.rglob(name.format(kind="Snapshot").replace("20990228", "20990131")))
        lines = base.read_bytes().decode("utf-8").split("\r\n")[:-1]
        by_id = {row.split("\t")[0]: row for row in rows}
        merged = [by_id.pop(line.split("\t")[0], line) for line in lines] + list(by_id.values())
        target = snapshot / name.format(kind="Snapshot")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(("\r\n".join(merged) + "\r\n").encode("utf-8"))
    return old, delta, snapshot


@pytest.fixture()
def snomed_releases(tmp_path: Path) -> tuple[Path, Path, Path]:
    return make_snomed_releases(tmp_path, _DELTA_ROWS)


def test_snomed_delta_diff_reports_exactly_the_changes(tmp_path: Path, snomed_releases: tuple[Path, ...]) -> None:
    old, delta, snapshot = snomed_releases
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))
    graph = graph_of(store)
    for new in (delta, snapshot):  # the Delta read over the loaded release, and the later Snapshot: one diff
        diff = json.loads(run("diff", graph, str(new), "--store", str(store), "--json").output)
        assert diff["versions"] == {"old": ["sct2_Concept_Snapshot_INT_20990131"],
                                    "new": ["sct2_Concept_Snapshot_INT_20990228"]}
        assert diff["concepts"]["retired"]["examples"] == ["SNOMEDCT:100000006"]
        assert diff["concepts"]["added"]["count"] == 0
        assert diff["concepts"]["relabelled"]["examples"] == [
            {"id": "SNOMEDCT:100000002", "lang": "en", "old": "Alpha disorder", "new": "Alphaitis"},
            {"id": "SNOMEDCT:100000003", "lang": "en", "old": "Beta disorder", "new": "Beta disease"}]
        assert {k: v["examples"] for k, v in diff["facts"]["added"].items()} == {
            "rdfs:subClassOf": [["SNOMEDCT:100000005", "SNOMEDCT:100000001"]]}
        assert diff["facts"]["removed"] == {}
        assert diff["synonyms"]["added"]["examples"] == [["SNOMEDCT:100000002", "Alpha disorder"]]
        assert diff["synonyms"]["removed"]["examples"] == [["SNOMEDCT:100000002", "Alphaitis"]]
        assert diff["other"] == {"added": {}, "removed": {}}


def test_snomed_delta_update_equals_fresh_load_of_the_later_snapshot(
        tmp_path: Path, snomed_releases: tuple[Path, ...]) -> None:
    old, delta, snapshot = snomed_releases
    stats = check_update_equals_fresh_load(tmp_path, old, delta, fresh_release=snapshot)
    (graph,) = [g for g in stats["graphs"] if g["release"]]
    assert graph["release"]["details"]["kind"] == "Delta"
    assert graph["release"]["options"]["snomed_base_chain"] == [str(old), str(delta)]
    # the later Snapshot over the same start gives the same graph too
    again = tmp_path / "again"
    run("load", str(old), "--store", str(again))
    run("load", "--update", str(snapshot), "--store", str(again))
    assert data_export(again) == data_export(tmp_path / "fresh")


def test_a_delta_row_that_moves_a_component_updates_both_concepts(tmp_path: Path) -> None:
    """Regression: a Delta row superseding a relationship with another source (ids are never reused in SNOMED CT,
    but generated data did it) must take the edge from the old source too."""
    moved = f"2000004\t20990228\t1\t{_M}\t100000002\t100000005\t1\t100000900\t900000000000011006\t" \
            "900000000000451002"
    old, delta, snapshot = make_snomed_releases(tmp_path, [[], [], [moved], []])
    check_update_equals_fresh_load(tmp_path, old, delta, fresh_release=snapshot)


@pytest.mark.parametrize("refsets", [(_US, _GB), (_GB, _GB), ("999000000000000011", "999000000000000021")],
                         ids=["US", "GB only", "neither: largest wins"])
def test_a_delta_update_parses_only_the_base_rows_of_the_concepts_it_touches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refsets: tuple[str, str]) -> None:
    """The base Snapshot's rows are picked by id at byte level: none is read whole, and only the rows of the
    concepts the Delta touches are decoded; the result equals a fresh load of the later Snapshot. When the
    language refset the whole file chooses cannot be told from a count (the largest wins), that file is read
    whole."""
    import mirage_kg.loaders.rows.hygiene as hygiene
    import mirage_kg.loaders.snomed as snomed

    old, delta, snapshot = make_snomed_releases(tmp_path, _DELTA_ROWS)
    for release in (old, snapshot):  # concepts the Delta does not touch, in both Snapshots
        _add_rows(release, "sct2_Concept", [f"30000{i:03d}\t20990131\t1\t{_M}\t900000000000074008" for i in range(100)])
        _add_rows(release, "sct2_Description", [
            f"50{i:03d}{n}\t20990131\t1\t{_M}\t30000{i:03d}\ten\t{kind}\tFiller {i} {n}\t900000000000448009"
            for i in range(100) for n, kind in ((1, "900000000000003001"), (2, "900000000000013009"))])
        _add_rows(release, "sct2_Relationship", [f"60{i:03d}1\t20990131\t1\t{_M}\t30000{i:03d}\t138875005\t0\t"
                                                 "116680003\t900000000000011006\t900000000000451002"
                                                 for i in range(100)])
        _add_rows(release, "der2_cRefset", [f"00000000-0000-4000-9000-{i:012d}\t20990131\t1\t{_M}\t{_US}\t50{i:03d}2"
                                            "\t900000000000548007" for i in range(100)])
    for language in (*old.rglob("der2_*"), *delta.rglob("der2_*"), *snapshot.rglob("der2_*")):
        text = language.read_bytes().decode("utf-8")
        language.write_bytes(text.replace(f"\t{_US}\t", "\tUS\t").replace(f"\t{_GB}\t", f"\t{refsets[1]}\t")
                             .replace("\tUS\t", f"\t{refsets[0]}\t").encode("utf-8"))
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated))
    whole, decoded = [], []
    read_lines, decoded_row = snomed.read_lines, hygiene.decoded_row  # picked rows are decoded in hygiene
    monkeypatch.setattr(snomed, "read_lines", lambda path, *a, **k: whole.append(path) or read_lines(path, *a, **k))
    monkeypatch.setattr(hygiene, "decoded_row", lambda raw, number, path, *a: decoded.append(path)
                        or decoded_row(raw, number, path, *a))
    output = run("load", "--update", str(delta), "--store", str(updated)).output
    monkeypatch.undo()
    assert "compared: the 5 concepts the Delta touches" in output
    base_whole = [path.name for path in whole if old in path.parents]
    assert base_whole == ([] if refsets[0] in (_US, _GB) else ["der2_cRefset_LanguageSnapshot-en_INT_20990131.txt"])
    base_rows = sum(len(path.read_bytes().splitlines()) - 1 for path in old.rglob("*.txt"))
    assert 0 < sum(1 for path in decoded if old in path.parents) < base_rows / 4
    run("load", str(snapshot), "--store", str(fresh), "--graph", graph_of(updated))
    assert data_export(updated) == data_export(fresh)


def _add_rows(release: Path, prefix: str, rows: list[str]) -> None:
    (path,) = release.rglob(f"{prefix}*.txt")
    path.write_bytes(path.read_bytes() + ("\r\n".join(rows) + "\r\n").encode("utf-8"))


def test_a_delta_without_a_base_release_is_refused(tmp_path: Path, snomed_releases: tuple[Path, ...]) -> None:
    _, delta, _ = snomed_releases
    result = CliRunner().invoke(main, ["load", str(delta), "--store", str(tmp_path / "kg")])
    assert result.exit_code == 1 and "load --update" in result.output


def test_a_delta_update_without_plain_concept_flags_reads_the_concepts_in_python(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snomed_releases: tuple[Path, ...]) -> None:
    """The C-speed read of every concept's flag gives up on a row that is not plain (a duplicate or malformed id, a
    bad flag, a short row): the loader's own pass then reads the concepts, and the update still equals a fresh
    load."""
    import mirage_kg.loaders.snomed as snomed

    (concepts,) = (FIXTURES / "snomed" / "Snapshot").rglob("sct2_Concept*.txt")
    header, first, *_ = concepts.read_bytes().splitlines(keepends=True)
    plain = tmp_path / "plain.txt"
    plain.write_bytes(header + first)
    assert snomed._concept_flags([plain]) == {first.split(b"\t")[0].decode(): snomed._ACTIVE_CONCEPT}
    for bad in (first + first, first.replace(b"\t1\t", b"\t2\t", 1), b"12x4\t" + first.split(b"\t", 1)[1],
                b"123\n"):
        (tmp_path / "bad.txt").write_bytes(header + bad)
        assert snomed._concept_flags([tmp_path / "bad.txt"]) is None, bad
    old, delta, snapshot = snomed_releases
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    run("load", str(old), "--store", str(updated))
    monkeypatch.setattr(snomed, "_concept_flags", lambda paths: None)
    output = run("load", "--update", str(delta), "--store", str(updated)).output
    monkeypatch.undo()
    assert "compared: the 5 concepts the Delta touches" in output
    run("load", str(snapshot), "--store", str(fresh), "--graph", graph_of(updated))
    assert data_export(updated) == data_export(fresh)


def test_a_delta_is_compared_on_the_concepts_it_touches(snomed_releases: tuple[Path, ...]) -> None:
    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.loaders.snomed import SnomedLoader

    old, delta, _ = snomed_releases
    options = LoadOptions()
    options.extra["snomed_base"] = [str(old)]
    scope = SnomedLoader().update_scope(delta, options, LoadReport())
    ns = "http://snomed.info/id/"
    # the inactivated concept; the new IS-A's source and type; the reworded description's concept; the concept
    # whose descriptions changed acceptability (found through the base's description file)
    assert scope == {ns + c for c in ("100000006", "100000005", "116680003", "100000003", "100000002")}
    assert SnomedLoader().update_scope(old, LoadOptions(), LoadReport()) is None


# --- validation across releases -----------------------------------------------------------------------------------
_PREFIXES = """@prefix MKG: <https://w3id.org/mirage-kg/schema#> .
@prefix KG: <https://w3id.org/mirage-kg/entity/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
"""


@pytest.fixture()
def validation_releases(tmp_path: Path) -> tuple[Path, Path]:
    """The clean validation fixture twice, both with an undeclared relation: the old release with a dangling
    reference, the new one without it but with a concept that has two English prefLabels."""
    clean = (FIXTURES / "validation" / "clean.ttl").read_text(encoding="utf-8") + "\n" + _PREFIXES + \
        'KG:Cold_air a MKG:Concept ; skos:prefLabel "Cold air"@en .\nKG:Asthma KG:worsened_by KG:Cold_air .\n'

    old, new = tmp_path / "old.ttl", tmp_path / "new.ttl"
    old.write_text(clean + "\n" + _PREFIXES + "KG:Asthma MKG:has_symptom KG:Ghost .\n", encoding="utf-8")
    new.write_text(clean + "\n" + _PREFIXES + 'KG:Dyspnoea a MKG:Symptom ; skos:prefLabel "Dyspnoea"@en , '
                   '"Shortness of breath"@en ; MKG:possible_disease KG:Asthma .\n', encoding="utf-8")
    return old, new


def test_validate_against_a_store_reports_only_new_and_fixed(tmp_path: Path,
                                                             validation_releases: tuple[Path, Path]) -> None:
    old, new = validation_releases
    run("load", str(old), "--store", str(tmp_path / "old-kg"))
    run("load", str(new), "--store", str(tmp_path / "new-kg"))
    result = CliRunner().invoke(main, ["validate", "--store", str(tmp_path / "new-kg"), "--against",
                                       str(tmp_path / "old-kg"), "--json", "--no-shipped-shapes"])
    assert result.exit_code == 1, result.output  # the new release introduced an error
    data = json.loads(result.output)
    introduced = {c["check"]: c for c in data["introduced"]}
    fixed = {c["check"]: c for c in data["fixed"]}
    assert "multiple-preflabels" in introduced and "dangling-reference" not in introduced
    assert [e["id"] for e in introduced["multiple-preflabels"]["new"]] == ["KG:Dyspnoea"]
    assert "dangling-reference" in fixed and [e["id"] for e in fixed["dangling-reference"]["fixed"]] == ["KG:Ghost"]
    # a check that found the same thing in both releases is not reported at all
    everything = CliRunner().invoke(main, ["validate", "--store", str(tmp_path / "new-kg"), "--json",
                                           "--no-shipped-shapes"]).output
    assert "undeclared-relation" in everything
    assert "undeclared-relation" not in introduced and "undeclared-relation" not in fixed


def test_validate_against_a_graph_of_the_same_store(tmp_path: Path, validation_releases: tuple[Path, Path]) -> None:
    old, new = validation_releases
    store = str(tmp_path / "kg")
    run("load", str(old), "--store", store, "--graph", "release-1")
    run("load", str(new), "--store", store, "--graph", "release-2")
    result = CliRunner().invoke(main, ["validate", "--store", store, "--against", "release-1",
                                       "--no-shipped-shapes"])
    assert result.exit_code == 1
    assert "new   error   multiple-preflabels: 0 -> 1 (e.g. KG:Dyspnoea)" in result.output
    assert "fixed error   dangling-reference: 1 -> 0 (e.g. KG:Ghost)" in result.output


# --- caches follow ------------------------------------------------------------------------------------------------
class _CountingEmbedder:
    """Deterministic vectors from the text, counting what it is asked to encode."""

    model_name = "counting-test-embedder"

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode_many(self, texts: list[str], batch_size: int = 128) -> object:
        import hashlib

        import numpy as np

        self.encoded.extend(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8).astype(np.float32)
                for t in texts]
        return np.stack(rows)

    encode = encode_many


def test_label_embeddings_are_encoded_again_only_for_changed_labels(
        tmp_path: Path, umls_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage_kg.linking.embedder import Embedder
    from mirage_kg.linking.linker import Linker
    from mirage_kg.store import open_store

    monkeypatch.setattr(Embedder, "installed", staticmethod(lambda: True))
    old, new = umls_pair
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store))

    def build() -> tuple[Linker, _CountingEmbedder]:
        with open_store(store) as opened:
            linker = Linker(opened)
            linker.embedder = _CountingEmbedder()  # type: ignore[assignment]
            assert linker.matrix is not None
        return linker, linker.embedder  # type: ignore[return-value]

    first, embedder = build()
    assert set(embedder.encoded) == set(first.index.texts)
    run("load", "--update", str(new), "--store", str(store))
    second, embedder = build()
    assert embedder.encoded == ["Deltapain, sharp"]  # the relabelled concept; the retired one's labels just go
    assert second.embeddings_encoded == 1 and "gammadrug" not in second.index.texts
    expected = _CountingEmbedder().encode_many(second.index.texts)
    assert (second.matrix == expected).all()


def test_a_load_commits_its_release_record_with_its_data(tmp_path: Path) -> None:
    """The release record goes in the update that commits the graph's manifest record (no second update)."""
    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.loaders.triples import TriplesLoader
    from mirage_kg.releases import release_of
    from mirage_kg.releases.provenance import RELEASE, load_recorded
    from mirage_kg.store import OxigraphStore
    from mirage_kg.store.base import LOADED_FROM

    release = tmp_path / "facts-2025.tsv"
    release.write_text(_TRIPLES_V1, encoding="utf-8")
    store = OxigraphStore()
    updates: list[str] = []
    plain_update = store.update
    store.update = lambda text: (updates.append(text), plain_update(text))[1]  # type: ignore[method-assign]
    (receipt,) = load_recorded(store, TriplesLoader(), release, LoadOptions(), LoadReport())
    assert release_of(store, receipt.graph).release == "facts-2025.tsv"
    writes = [u for u in updates if RELEASE in u]
    assert len(writes) == 1 and LOADED_FROM in writes[0]
    assert store._recording is None  # only loads inside load_recorded carry a record


def test_release_files_are_hashed_beside_the_load_and_recorded_the_same(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_recorded`` hashes the release in a thread while the loader runs: the record holds the SHA-256 of
    every file, and hashing began before the loader ended (a hash run after the load would never be seen)."""
    import hashlib
    import threading

    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.loaders.triples import TriplesLoader
    from mirage_kg.releases import provenance, release_of
    from mirage_kg.releases.provenance import load_recorded
    from mirage_kg.store import OxigraphStore

    release = tmp_path / "facts-2025.tsv"
    release.write_text(_TRIPLES_V1, encoding="utf-8")
    hashing = threading.Event()
    plain_hashes = provenance.file_hashes

    def signalling(path: Path, stop: threading.Event | None = None) -> dict[str, str]:
        hashing.set()
        return plain_hashes(path, stop)

    monkeypatch.setattr(provenance, "file_hashes", signalling)
    seen: list[bool] = []

    class Watching(TriplesLoader):
        def load(self, store, path, options, report):  # type: ignore[no-untyped-def]
            seen.append(hashing.wait(10))
            return super().load(store, path, options, report)

    store = OxigraphStore()
    (receipt,) = load_recorded(store, Watching(), release, LoadOptions(), LoadReport())
    assert release_of(store, receipt.graph).files == {"facts-2025.tsv": hashlib.sha256(release.read_bytes()).hexdigest()}
    assert seen == [True]  # hashing ran while the loader did
    assert not any(t.name == "mirage-kg-hash" for t in threading.enumerate())  # and joined after


def test_a_release_that_cannot_be_hashed_fails_the_load_and_a_failed_load_stops_the_hash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing's error reaches the caller (as when it hashed in its own thread); a load that fails first stops
    the hash within a block and joins its thread."""
    import threading

    from mirage_kg.releases import provenance
    from mirage_kg.releases.provenance import HashesAhead

    folder = tmp_path / "release"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"x" * (3 << 20))
    with HashesAhead(folder) as ahead:
        assert set(ahead.result()) == {"a.txt"}

    def unreadable(path: Path, stop: threading.Event | None = None) -> dict[str, str]:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(provenance, "file_hashes", unreadable)
    with HashesAhead(folder) as ahead, pytest.raises(PermissionError):
        ahead.result()
    monkeypatch.undo()

    blocks: list[int] = []
    go = threading.Event()
    real_open = open

    class Slow:
        def __init__(self, handle):  # type: ignore[no-untyped-def]
            self.handle = handle

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self.handle.close()

        def read(self, size: int) -> bytes:
            blocks.append(size)
            go.wait(10)  # the first block is held until the load has failed
            return self.handle.read(size)

    monkeypatch.setattr(provenance, "open", lambda path, mode: Slow(real_open(path, mode)), raising=False)
    with pytest.raises(RuntimeError, match="the load failed"):
        with HashesAhead(folder) as ahead:
            try:
                raise RuntimeError("the load failed")
            finally:
                threading.Timer(0.2, go.set).start()  # the block's read ends while __exit__ waits
    assert ahead._future is not None and ahead._future.done()  # stopped and waited for on the way out
    assert ahead._future.result() is None and len(blocks) == 1  # gave up after the first block, no hash kept


def test_update_carries_the_label_index_over_for_the_changed_concepts(
        tmp_path: Path, umls_pair: tuple[Path, Path]) -> None:
    from mirage_kg.graph.core import Graph
    from mirage_kg.linking.label_index import LabelIndex
    from mirage_kg.linking.linker import Linker
    from mirage_kg.store import open_store

    old, new = umls_pair
    store = tmp_path / "kg"
    run("load", str(old), "--store", str(store), "--no-index")
    run("index", "--store", str(store), "--no-embeddings")
    output = run("load", "--update", str(new), "--store", str(store), "--no-index").output
    assert "label index: carried over" in output
    assert len(list((store / ".mirage-cache").glob("labels-*.sqlite"))) == 1  # the old one went
    with open_store(store) as opened:
        linker = Linker(opened)
        carried = linker.index
        assert linker.index_from_cache  # found under the updated store's fingerprint: nothing rebuilt
        fresh = LabelIndex.build(Graph(opened))
        assert sorted(carried.texts) == sorted(fresh.texts)
        assert "Deltapain, sharp" in carried.texts and 'Deltapain "sharp"' not in carried.texts
        assert [m.candidates[0].entity.id for m in linker.link("Deltapain, sharp")][:1] == ["UMLS:C0000004"]


@pytest.mark.slow
def test_update_benchmark_runs_and_its_updates_match_fresh_loads() -> None:
    """bench_update.py on tiny releases: only its bookkeeping is checked, never a time."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "benchmarks/bench_update.py", "--triples", "3000", "--json"], cwd=root,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert [r["shape"] for r in rows] == ["snomed", "triples", "umls"]
    for row in rows:
        assert row["same_count"] and row["triples"] > 1000 and row["update_s"] > 0 and row["fresh_s"] > 0
        assert row["diff"].startswith("triples: -")
        assert "whole release" not in row["compared"]  # each shape's own scope ran
