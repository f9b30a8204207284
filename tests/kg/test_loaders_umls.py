"""UMLS RRF on the synthetic release in tests/fixtures/umls (every CUI, code and string made up):

- C0000001 Alphaitis: its preferred atom (TS=P, STT=PF, ISPREF=Y) is the third ENG row; a French atom; an O- and a
  Y-suppressed synonym (left out) and an N one (kept); codes from MSH, SNOMEDCT_US, MEDSYN.
- C0000002 Betaosis: child of Alphaitis by a CHD row and its PAR mirror; HPO and ICD10CM codes.
- C0000003 gammadrug: MRREL says (C0000001, RO, C0000003, may_treat): read CUI2 -> CUI1, the drug treats.
- C0000004 Deltapain: RB/RN rows make Alphaitis its broader concept; RO rows both ways with C0000002.
- C0000005 only E-suppressed atoms; C0000006 only French atoms."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from test_loaders_contract import FIXTURES, load, objects, triples

from mirage_kg.errors import InputError

from mirage_kg.store import OxigraphStore, ensure_schema

UMLS = FIXTURES / "umls"


def loaded(**options: object) -> set[tuple[str, str, str]]:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, "umls", UMLS, **options)  # type: ignore[arg-type]
    return triples(store)


def test_mrrel_reads_cui2_to_cui1() -> None:
    found = loaded()
    # (C0000001, RO, C0000003, may_treat): gammadrug may treat Alphaitis, never the reverse
    assert ("UMLS:C0000003", "MKG:may_treat", "UMLS:C0000001") in found
    assert ("UMLS:C0000001", "MKG:may_treat", "UMLS:C0000003") not in found
    # (C0000001, CHD, C0000002): Betaosis is the child
    assert ("UMLS:C0000002", "rdfs:subClassOf", "UMLS:C0000001") in found
    assert ("UMLS:C0000001", "rdfs:subClassOf", "UMLS:C0000002") not in found
    # (C0000004, RB, C0000001): Alphaitis is broader than Deltapain
    assert ("UMLS:C0000004", "skos:broader", "UMLS:C0000001") in found
    assert ("UMLS:C0000001", "skos:broader", "UMLS:C0000004") not in found


def test_mirror_rows_give_one_edge_and_no_inverse_duplicates() -> None:
    found = loaded()
    predicates = {p for _, p, _ in found}
    assert "MKG:may_be_treated_by" not in predicates and "MKG:inverse_isa" not in predicates
    between = {(s, p, o) for s, p, o in found if {s, o} == {"UMLS:C0000002", "UMLS:C0000004"}}
    assert between == {("UMLS:C0000002", "MKG:related_to", "UMLS:C0000004")}  # symmetric RO: once, lower CUI first
    # the relation reads right both ways
    assert objects(found, "MKG:may_treat", "rdfs:label") == {'"may treat"'}
    assert objects(found, "MKG:may_treat", "MKG:inverseLabel") == {'"may be treated by"'}
    assert objects(found, "MKG:may_treat", "rdf:type") == {"MKG:Relation", "owl:ObjectProperty"}


def test_preferred_label_is_ts_p_stt_pf_ispref_y() -> None:
    found = loaded()
    assert objects(found, "UMLS:C0000001", "skos:prefLabel") == {'"Alphaitis"@en'}
    assert objects(found, "UMLS:C0000001", "skos:altLabel") == {'"Alpha disease"@en', '"ALPHAITIS"@en',
                                                                 '"Alpha condition"@en'}
    everything = loaded(lang="all")
    assert objects(everything, "UMLS:C0000001", "skos:prefLabel") == {'"Alphaitis"@en', '"Alphite"@fr'}
    assert objects(everything, "UMLS:C0000006", "skos:prefLabel") == {'"Zêta française"@fr'}


def test_one_preflabel_per_language_even_when_mrconso_is_unsorted(tmp_path: Path) -> None:
    copy = tmp_path / "umls"
    shutil.copytree(UMLS, copy)
    conso = copy / "META" / "MRCONSO.RRF"
    lines = conso.read_text(encoding="utf-8").splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    conso.write_text("".join(lines), encoding="utf-8")
    store = OxigraphStore()
    load(store, "umls", copy, lang="all")
    found = triples(store)
    for cui in ("UMLS:C0000001", "UMLS:C0000002", "UMLS:C0000003", "UMLS:C0000004"):
        langs = [o.rsplit("@", 1)[1] for o in objects(found, cui, "skos:prefLabel")]
        assert len(langs) == len(set(langs)) >= 1


def test_suppressed_atoms_and_concepts_are_left_out_unless_asked() -> None:
    found = loaded()
    labels = {o for s, p, o in found if s == "UMLS:C0000001"}
    assert '"Old alphaitis"@en' not in labels and '"Alpha syndrome"@en' not in labels  # SUPPRESS O, Y
    assert '"Alpha condition"@en' in labels  # SUPPRESS N is kept
    assert not {t for t in found if "C0000005" in t[0] or "C0000005" in t[2]}  # only E atoms
    assert ("UMLS:C0000001", "MKG:has_manifestation", "UMLS:C0000004") not in found  # a suppressed MRREL row
    everything = loaded(include_suppressed=True)
    assert '"Old alphaitis"@en' in objects(everything, "UMLS:C0000001", "skos:altLabel")
    assert objects(everything, "UMLS:C0000005", "skos:prefLabel") == {'"Epsilon obsolete"@en'}
    # has_manifestation is the canonical name of the pair: CUI2 (C0000004) has_manifestation CUI1
    assert ("UMLS:C0000004", "MKG:has_manifestation", "UMLS:C0000001") in everything


def test_sab_filter_keeps_only_those_sources() -> None:
    found = loaded(sab=["MSH"])
    assert objects(found, "UMLS:C0000001", "skos:prefLabel") == {'"Alphaitis"@en'}
    assert objects(found, "UMLS:C0000001", "skos:altLabel") == {'"ALPHAITIS"@en'}
    assert not {t for t in found if "C0000003" in t[0]}  # gammadrug has only an RXNORM atom
    assert ("UMLS:C0000002", "rdfs:subClassOf", "UMLS:C0000001") in found  # an MSH relation
    assert not {t for t in found if t[1] == "MKG:may_treat"}  # MED-RT relations are out
    graph = next(s for s, p, _ in found if p == "MKG:sourceVersion")
    assert graph == "GRAPH:umls/2099AA/MSH2099_2099_01_01"
    assert objects(found, graph, "MKG:sourceVersion") == {'"MSH2099_2099_01_01"'}


def test_relation_filter() -> None:
    found = loaded(relations=["CHD", "PAR"])
    edges = {(s, p, o) for s, p, o in found if s.startswith("UMLS:") and o.startswith("UMLS:")}
    assert edges == {("UMLS:C0000002", "rdfs:subClassOf", "UMLS:C0000001")}


def test_codes_semantic_types_and_release_graph() -> None:
    found = loaded()
    assert objects(found, "UMLS:C0000001", "skos:exactMatch") == {"MESH:D000001", "SNOMEDCT:100000001"}
    assert objects(found, "UMLS:C0000002", "skos:exactMatch") == {"MESH:D000002", "HP:0000123", "ICD10CM:Q99.1"}
    assert objects(found, "UMLS:C0000001", "skos:notation") == {'"MEDSYN:X3"'}  # no NOCODE, no suppressed codes
    assert objects(found, "UMLS:C0000003", "skos:notation") == {'"RXNORM:99999"'}
    assert objects(found, "UMLS:C0000001", "rdf:type") == {"MKG:Concept", "STY:T047"}
    assert objects(found, "STY:T184", "rdfs:label") == {'"Sign or Symptom"'}
    assert objects(found, "UMLS:C0000004", "skos:prefLabel") == {'"Deltapain "sharp""@en'}  # quotes escaped
    versions = objects(found, "GRAPH:umls/2099AA", "MKG:sourceVersion")
    assert '"MSH2099_2099_01_01"' in versions and '"MSH2098_2098_01_01"' not in versions  # CURVER=Y only


def test_release_folder_or_meta_folder(tmp_path: Path) -> None:
    store = OxigraphStore()
    receipts, _ = load(store, "umls", UMLS / "META")
    assert receipts[0].graph.endswith("/umls/2099AA")  # release.dat one level up


@pytest.mark.parametrize("breakage", ["symlink loop", "folder", "unreadable"])
def test_a_broken_optional_file_is_an_error_not_absent(tmp_path: Path, breakage: str) -> None:
    """An MRREL.RRF that is there but cannot be read must not load as a release without relations."""
    release = tmp_path / "umls"
    shutil.copytree(UMLS, release)
    mrrel = release / "META" / "MRREL.RRF"
    mrrel.unlink()
    if breakage == "symlink loop":
        mrrel.symlink_to(mrrel)
    elif breakage == "folder":
        mrrel.mkdir()
    else:
        if os.geteuid() == 0:
            pytest.skip("running as root: file modes do not stop reads")
        mrrel.write_text("x")
        mrrel.chmod(0)
    store = OxigraphStore()
    with pytest.raises(InputError, match="MRREL.RRF") as caught:
        load(store, "umls", release)
    assert "cannot read" in str(caught.value) or "not a regular file" in str(caught.value)
    assert store.triple_count() == 0


def _mrrel_rows(rng: random.Random, rows: int) -> list[str]:
    """MRREL lines over C0000001-C0000060: every kind of REL/RELA the loader maps (PAR/CHD with and without isa,
    isa under RO, RB/RN, inverse pairs, symmetric relations, a RELA with no known inverse), mirror rows, every
    SUPPRESS flag."""
    pairs = [("PAR", ""), ("CHD", ""), ("PAR", "isa"), ("CHD", "inverse_isa"), ("RO", "isa"), ("RO", "inverse_isa"),
             ("RB", ""), ("RN", ""), ("RO", "may_treat"), ("RO", "may_be_treated_by"), ("SY", ""), ("SIB", ""),
             ("RO", ""), ("RQ", "mapped_to"), ("RO", "has_novelty"), ("RL", "")]
    lines = []
    for number in range(rows):
        a, b = rng.sample(range(1, 61), 2)
        rel, rela = rng.choice(pairs)
        flag = rng.choice("NNNNOEY") if rng.random() < 0.3 else "N"
        for cui1, cui2 in ((a, b), (b, a)) if rng.random() < 0.5 else ((a, b),):
            lines.append(f"C{cui1:07d}|A1|AUI|{rel}|C{cui2:07d}|A2|AUI|{rela}|R{number}||MSH|MSH|||{flag}||\n")
    return lines


@pytest.mark.parametrize("damage", ["none", "self", "unknown", "short", "suppressed"])
def test_mrrel_blocks_in_numpy_make_the_triples_rows_make(monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """``umls_edges.block_edges`` (a block of MRREL at once, numpy) writes the triples the row-by-row reader
    writes, and a block holding a row it does not take (a concept related to itself, a CUI MRCONSO lacks, a
    short row) goes row by row, reported with its line, and still makes the same triples."""
    import mirage_kg.loaders.rows.umls_edges as umls_edges
    from mirage_kg.loaders.base import LoadOptions, LoadReport, Problem
    from mirage_kg.loaders.umls import UmlsFilters, UmlsLoader, _Relations, read_inverses

    lines = _mrrel_rows(random.Random(14), 400)
    if damage == "self":
        lines.insert(100, "C0000007|A1|AUI|RO|C0000007|A2|AUI|may_treat|R9||MSH|MSH|||N||\n")
    elif damage == "unknown":
        lines.insert(100, "C0000007|A1|AUI|RO|C0000099|A2|AUI|may_treat|R9||MSH|MSH|||N||\n")
    elif damage == "short":
        lines.insert(100, "C0000007|A1|AUI|RO|C0000008|A2|AUI|may_treat|R9||MSH|MSH|||N|\n")
    elif damage == "suppressed":  # a suppressed row is dropped before its CUIs are looked up
        lines.insert(100, "C0000007|A1|AUI|RO|C0000099|A2|AUI|may_treat|R9||MSH|MSH|||O||\n")
    data = "".join(lines).encode()
    state = bytearray(64)
    for cui in range(1, 61):
        state[cui] = 1 if cui % 9 == 0 else 3  # every ninth concept seen but filtered out (not kept)

    def edges(numpy: bool) -> tuple[list[str], dict[str, object]]:
        if not numpy:
            monkeypatch.setattr(umls_edges, "block_edges", lambda *args: None)
        report = LoadReport()
        options = LoadOptions(lenient=True)
        relations = _Relations(options.relation_namespace, read_inverses({}, Problem(options, report)))
        blocks = [(1, data[:len(data) // 2 + data[len(data) // 2:].index(b"\n") + 1])]
        blocks.append((1 + blocks[0][1].count(b"\n"), data[len(blocks[0][1]):]))
        made = "".join(UmlsLoader()._relations(Path("MRREL.RRF"), UmlsFilters.from_options(options),
                                               Problem(options, report), report, bytearray(state), relations, blocks))
        monkeypatch.undo()
        return made.splitlines(), report.to_json()

    whole, by_rows = edges(True), edges(False)
    assert set(whole[0]) == set(by_rows[0]) and whole[1] == by_rows[1]
    if damage in ("none", "suppressed"):  # both blocks in numpy: a row and its mirror make one line
        assert len(whole[0]) - len(set(whole[0])) <= 10 < len(by_rows[0]) - len(whole[0])
    assert len(set(whole[0])) > 300
    if damage in ("self", "unknown", "short"):
        assert whole[1]["skipped"] == 1 and whole[1]["reasons"][0]["examples"][0]["line"] == 101
