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
