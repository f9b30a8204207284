"""SNOMED CT RF2 on the synthetic releases in tests/fixtures/snomed (Snapshot) and snomed_full (Full):

- 100000002 Alpha disorder: US refset prefers "Alpha disorder", GB prefers "Alphaitis"; an inactive description;
  a Spanish one.
- 100000003 Beta disorder: IS-A Alpha; attribute 100000900 "Finding place" -> 100000005; an inactive IS-A row and
  a stated-only IS-A row to 100000001.
- 100000004 is inactive, with an active IS-A row from it; 100000006 has no preferred synonym.
- Full only: 100000007 active in 2020, inactive in 2099; 100000008 the other way round, renamed in 2099; its
  relationships retired and added; rows deliberately out of order."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_loaders_contract import FIXTURES, load, objects, triples

from mirage_kg.errors import InputError
from mirage_kg.loaders.snomed import GB_ENGLISH
from mirage_kg.store import OxigraphStore

SNAPSHOT = FIXTURES / "snomed"
FULL = FIXTURES / "snomed_full"


def loaded(path: Path = SNAPSHOT, **options: object) -> set[tuple[str, str, str]]:
    store = OxigraphStore()
    load(store, "snomed", path, **options)  # type: ignore[arg-type]
    return triples(store)


def test_language_refset_picks_the_preferred_synonym() -> None:
    found = loaded()
    assert objects(found, "SNOMEDCT:100000002", "skos:prefLabel") == {'"Alpha disorder"@en'}  # US English
    assert objects(found, "SNOMEDCT:100000002", "skos:altLabel") == {'"Alphaitis"@en'}
    assert objects(found, "SNOMEDCT:100000002", "MKG:fullySpecifiedName") == {'"Alpha disorder (disorder)"@en'}
    british = loaded(language_refset=GB_ENGLISH)
    assert objects(british, "SNOMEDCT:100000002", "skos:prefLabel") == {'"Alphaitis"@en'}


def test_inactive_descriptions_and_other_languages_are_left_out() -> None:
    found = loaded()
    labels = {o for s, _, o in found if s == "SNOMEDCT:100000002"}
    assert '"Retired alpha name"@en' not in labels
    assert '"Trastorno alfa"@es' not in labels
    assert '"Trastorno alfa"@es' in objects(loaded(lang="all"), "SNOMEDCT:100000002", "skos:altLabel")


def test_no_preferred_synonym_falls_back_to_the_fsn_without_its_tag() -> None:
    found = loaded()
    assert objects(found, "SNOMEDCT:100000006", "skos:prefLabel") == {'"Gamma finding"@en'}
    assert objects(found, "SNOMEDCT:100000006", "skos:altLabel") == {'"Gamma acceptable"@en'}


def test_is_a_and_attribute_relationships() -> None:
    found = loaded()
    assert ("SNOMEDCT:100000003", "rdfs:subClassOf", "SNOMEDCT:100000002") in found
    assert ("SNOMEDCT:100000003", "SNOMEDCT:100000900", "SNOMEDCT:100000005") in found
    # the attribute type is a declared relation labelled with its preferred term
    assert {"MKG:Relation", "owl:ObjectProperty"} <= objects(found, "SNOMEDCT:100000900", "rdf:type")
    assert objects(found, "SNOMEDCT:100000900", "rdfs:label") == {'"Finding place"'}
    assert not {t for t in found if t[1] == "SNOMEDCT:116680003"}  # IS-A is never a typed edge


def test_inferred_by_default_stated_on_request() -> None:
    inferred = loaded()
    assert ("SNOMEDCT:100000003", "rdfs:subClassOf", "SNOMEDCT:100000001") not in inferred  # inactive + stated rows
    stated = loaded(stated=True)
    assert ("SNOMEDCT:100000003", "rdfs:subClassOf", "SNOMEDCT:100000001") in stated
    assert ("SNOMEDCT:100000003", "rdfs:subClassOf", "SNOMEDCT:100000002") not in stated


def test_inactive_concepts_are_left_out_or_marked() -> None:
    found = loaded()
    assert not {t for t in found if "100000004" in t[0] or "100000004" in t[2]}
    kept = loaded(keep_inactive=True)
    assert objects(kept, "SNOMEDCT:100000004", "MKG:active") == {'"false"'}
    assert objects(kept, "SNOMEDCT:100000004", "skos:prefLabel") == {'"Old disorder"@en'}
    assert ("SNOMEDCT:100000004", "rdfs:subClassOf", "SNOMEDCT:100000002") in kept
    assert objects(kept, "SNOMEDCT:100000002", "MKG:active") == set()  # active concepts carry no flag


def test_full_release_latest_effective_time_wins() -> None:
    full = loaded(FULL)
    assert not {t for t in full if "100000007" in t[0] or "100000007" in t[2]}  # inactive now, and its edge
    assert objects(full, "SNOMEDCT:100000008", "skos:prefLabel") == {'"Eight disorder new name"@en'}
    assert '"Eight disorder old name"@en' not in {o for _, _, o in full}
    assert ("SNOMEDCT:100000008", "rdfs:subClassOf", "SNOMEDCT:100000002") in full  # added in 2099
    assert ("SNOMEDCT:100000008", "rdfs:subClassOf", "SNOMEDCT:100000001") not in full  # retired in 2099
    # everything the Snapshot says, the Full release says too (the rows they share are the latest ones)
    snapshot = {t for t in loaded() if t[1] != "MKG:sourceVersion"}
    assert snapshot <= full


def test_graph_names_name_edition_and_date() -> None:
    store = OxigraphStore()
    assert load(store, "snomed", SNAPSHOT)[0][0].graph.endswith("/snomedct/INT_20990131")
    assert load(store, "snomed", FULL)[0][0].graph.endswith("/snomedct/INT_20990131/full")
    assert load(store, "snomed", SNAPSHOT, stated=True)[0][0].graph.endswith("/snomedct/INT_20990131/stated")


def test_a_snapshot_with_two_rows_for_one_id_is_an_error(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "snomed"
    shutil.copytree(SNAPSHOT, copy)
    concepts = copy / "Snapshot" / "Terminology" / "sct2_Concept_Snapshot_INT_20990131.txt"
    with open(concepts, "ab") as handle:
        handle.write(b"100000002\t20990131\t0\t900000000000207008\t900000000000074008\r\n")
    with pytest.raises(InputError, match="duplicate id") as caught:
        load(OxigraphStore(), "snomed", copy)
    assert caught.value.line == 11


def test_text_definitions_become_skos_definition(tmp_path: Path) -> None:
    import shutil

    release = tmp_path / "snomed"
    shutil.copytree(SNAPSHOT, release)
    header = "id\teffectiveTime\tactive\tmoduleId\tconceptId\tlanguageCode\ttypeId\tterm\tcaseSignificanceId\r\n"
    row = ("9000011\t20990131\t1\t900000000000207008\t100000002\ten\t900000000000550004\t"
           "A synthetic disorder of the alpha kind.\t900000000000448009\r\n")
    (release / "Snapshot" / "Terminology" / "sct2_TextDefinition_Snapshot-en_INT_20990131.txt").write_text(
        header + row, encoding="utf-8", newline="")
    found = loaded(release)
    assert objects(found, "SNOMEDCT:100000002", "skos:definition") == {'"A synthetic disorder of the alpha kind."@en'}
