"""HPO disease annotations on the synthetic tests/fixtures/hpoa/mini.hpoa: one edge per positive row (the aspect
picks the relation), a reified annotation node per row with its provenance, NOT rows never as edges."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_loaders_contract import FIXTURES, load, objects, triples

from mirage_kg.errors import InputError
from mirage_kg.store import OxigraphStore, ensure_schema

HPOA = FIXTURES / "hpoa" / "mini.hpoa"
NODE = "KG:annotation/hpoa/2099-01-16/"


def loaded(path: Path = HPOA, store: OxigraphStore | None = None, **options: object) -> set[tuple[str, str, str]]:
    store = store or OxigraphStore()
    load(store, "hpoa", path, **options)  # type: ignore[arg-type]
    return triples(store)


def test_edges_by_aspect_and_not_rows_are_no_edges() -> None:
    found = loaded()
    assert objects(found, "OMIM:900001", "MKG:has_phenotype") == {"HP:0001945", "HP:0001250"}  # not HP:0002315 (NOT)
    assert objects(found, "OMIM:900001", "MKG:has_mode_of_inheritance") == {"HP:0000006"}  # aspect I
    assert objects(found, "ORPHA:9001", "MKG:has_phenotype") == {"HP:0001945"}
    assert objects(found, "DECIPHER:91", "MKG:has_phenotype") == {"HP:0001250"}
    assert not {t for t in found if t[2] == "HP:0002315" and t[1].startswith("MKG:has_")}


def test_each_row_is_an_annotation_node_with_its_provenance() -> None:
    found = loaded()
    row8 = NODE + "8"  # OMIM:900001 HP:0001250 with onset, frequency, sex and a modifier
    assert objects(found, row8, "rdf:subject") == {"OMIM:900001"}
    assert objects(found, row8, "rdf:predicate") == {"MKG:has_phenotype"}
    assert objects(found, row8, "rdf:object") == {"HP:0001250"}
    assert objects(found, row8, "MKG:evidence") == {'"TAS"'}
    assert objects(found, row8, "MKG:frequency") == {'"3/7"'}
    assert objects(found, row8, "MKG:onset") == {'"HP:0003577"'}
    assert objects(found, row8, "MKG:sex") == {'"female"'}
    assert objects(found, row8, "MKG:modifier") == {'"HP:0012828"'}
    assert objects(found, NODE + "5", "MKG:reference") == {'"PMID:1"', '"OMIM:900001"'}  # ';'-separated
    assert objects(found, NODE + "5", "MKG:frequency") == {'"HP:0040283"'}
    assert objects(found, NODE + "9", "MKG:frequency") == {'"35%"'}
    negated = NODE + "7"
    assert objects(found, negated, "MKG:negated") == {'"true"'}
    assert objects(found, negated, "rdf:object") == {"HP:0002315"}


def test_diseases_are_named_and_typed() -> None:
    found = loaded()
    assert objects(found, "OMIM:900001", "skos:prefLabel") == {'"Synthetic syndrome A"@en'}
    assert objects(found, "OMIM:900001", "skos:altLabel") == {'"SYNTHETIC SYNDROME A, TYPE 1"@en'}
    assert objects(found, "ORPHA:9001", "rdf:type") == {"MKG:Concept", "MKG:Disease"}
    assert objects(found, "GRAPH:hpoa/2099-01-16", "MKG:sourceVersion") == {'"2099-01-16"'}


def test_the_old_header_style_is_read(tmp_path: Path) -> None:
    old = tmp_path / "old.hpoa"
    text = HPOA.read_text(encoding="utf-8").replace(
        "database_id\tdisease_name\tqualifier\thpo_id\treference\tevidence\tonset\tfrequency\tsex\tmodifier\t"
        "aspect\tbiocuration",
        "#DatabaseID\tDiseaseName\tQualifier\tHPO_ID\tReference\tEvidence\tOnset\tFrequency\tSex\tModifier\t"
        "Aspect\tBiocuration")
    old.write_text(text, encoding="utf-8")
    assert objects(loaded(old), "OMIM:900001", "MKG:has_phenotype") == {"HP:0001945", "HP:0001250"}


def test_unknown_hpo_term_is_an_error_when_the_store_holds_the_hpo(tmp_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    hp = tmp_path / "hp.obo"
    terms = "".join(f"[Term]\nid: {t}\nname: term {t}\n\n" for t in ("HP:0001945", "HP:0000006", "HP:0002315"))
    hp.write_text(f"format-version: 1.2\ndata-version: hp/releases/2099-01-01\nontology: hp\n\n{terms}",
                  encoding="utf-8")
    load(store, "obo", hp)
    with pytest.raises(InputError, match="HP:0001250 is not a current term") as caught:
        load(store, "hpoa", HPOA)
    assert caught.value.line == 8
    # without the HPO in the store there is nothing to check against
    assert objects(loaded(), "DECIPHER:91", "MKG:has_phenotype") == {"HP:0001250"}
