"""Entity kinds and clinical roles from the ontology (mirage_kg.model.kinds): UMLS semantic types, SNOMED CT FSN tags
and hierarchies, the schema's domain/range, HPO's branches, a custom mapping in the store or in a --kinds file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_loaders_contract import FIXTURES, load

from mirage_kg import InputError, KnowledgeGraph, expand
from mirage_kg.model.kinds import ROLES, ClinicalVocabulary, vocabulary
from mirage_kg.store import OxigraphStore, ensure_schema


def store_with(fmt: str, path: Path) -> OxigraphStore:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, fmt, path)
    return store


def kinds(vocab: ClinicalVocabulary, *curies: str) -> list[str]:
    found = vocab.kinds(expand(c) for c in curies)
    return [found[expand(c)] for c in curies]


def test_umls_semantic_types_give_kinds() -> None:
    vocab = vocabulary(store_with("umls", FIXTURES / "umls"))
    # MRSTY: C0000001 T047 Disease or Syndrome, C0000003 T121 Pharmacologic Substance, C0000004 T184 Sign or Symptom
    assert kinds(vocab, "UMLS:C0000001", "UMLS:C0000003", "UMLS:C0000004") == ["disease", "drug", "finding"]
    assert vocab.role(expand("MKG:may_treat")) == "treats"
    assert vocab.role(expand("MKG:contraindicated_with_disease")) == "contraindicated_in"


def test_snomed_fsn_tags_and_hierarchy() -> None:
    vocab = vocabulary(store_with("snomed", FIXTURES / "snomed"))
    # 100000003 Beta disorder (disorder) is-a 100000002 (disorder): the FSN tag decides (no top-level concept here)
    assert kinds(vocab, "SNOMEDCT:100000003", "SNOMEDCT:100000005") == ["disease", "anatomy"]


def test_schema_domain_and_range_type_emckg_entities() -> None:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, "triples", FIXTURES / "core" / "small.tsv")
    vocab = vocabulary(store)
    kg = KnowledgeGraph(store)
    flu, fever = kg.entity("Flu").iri, kg.entity("Fever").iri  # Flu has_symptom Fever; Fever possible_disease Flu
    assert (vocab.kind(flu), vocab.kind(fever)) == ("disease", "finding")
    assert vocab.end_kinds(expand("MKG:has_symptom")) == ("disease", "finding")
    assert vocab.role(expand("MKG:need_medication")) == "treated_by"
    assert ROLES["treated_by"].inverse == "treats"


CUSTOM = """@prefix MKG: <https://w3id.org/mirage-kg/schema#> .
@prefix ex: <http://example.org/onto#> .
ex:Ailment MKG:entityKind "disease" .
ex:Remedy MKG:entityKind "drug" .
ex:soothes MKG:clinicalRole "treats" .
"""
DATA = """@prefix ex: <http://example.org/onto#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
ex:Grumps a ex:Ailment . ex:Sulks rdfs:subClassOf ex:Grumps . ex:Honey a ex:Remedy . ex:Honey ex:soothes ex:Sulks .
"""


def test_a_custom_mapping_from_a_kinds_file_or_the_store(tmp_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    store.load(io.BytesIO(DATA.encode()), media_type="text/turtle", graph="urn:data", source="data")
    plain = vocabulary(store)
    assert plain.kind("http://example.org/onto#Sulks") == "concept"
    kinds_file = tmp_path / "kinds.ttl"
    kinds_file.write_text(CUSTOM, encoding="utf-8")
    extended = vocabulary(store, [kinds_file])
    assert extended.kind("http://example.org/onto#Sulks") == "disease"  # subClassOf ex:Grumps, a ex:Ailment
    assert extended.kind("http://example.org/onto#Honey") == "drug"
    assert extended.role("http://example.org/onto#soothes") == "treats"
    # the same mapping loaded into the store works without the file; the cache notices the load
    store.load(io.BytesIO(CUSTOM.encode()), media_type="text/turtle", graph="urn:kinds", source="kinds")
    assert vocabulary(store).kind("http://example.org/onto#Sulks") == "disease"


def test_bad_kinds_files_are_named(tmp_path: Path) -> None:
    store = OxigraphStore()
    with pytest.raises(InputError, match="does not exist"):
        ClinicalVocabulary(store, [tmp_path / "missing.ttl"])
    broken = tmp_path / "broken.ttl"
    broken.write_text("this is not turtle", encoding="utf-8")
    with pytest.raises(InputError, match="broken.ttl"):
        ClinicalVocabulary(store, [broken])
    odd = tmp_path / "odd.ttl"
    odd.write_text('<http://x/p> <https://w3id.org/mirage-kg/schema#clinicalRole> "heals" .', encoding="utf-8")
    with pytest.raises(InputError, match="heals"):
        ClinicalVocabulary(store, [odd])
