"""One concept across sources, on a small default KG in the real formats (tests/fixtures/default_kg: an OBO slice
of HPO, phenotype.hpoa rows, cellxgene's MONDO JSON): label matches, merged anchor and bridge, specificity ranking,
and name resolution that says what it resolved to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage_kg.graph.concepts import ConceptGroups
from mirage_kg.graph.resolution import resolve_name
from mirage_kg.errors import AmbiguousNameError
from mirage_kg.kg import KnowledgeGraph
from mirage_kg.loaders.base import LoadOptions, LoadReport
from mirage_kg.model.records import Path as KgPath
from mirage_kg.build.default_kg import BuildStep, build_label_matches, mondo_lines
from mirage_kg.loaders.hpoa import HpoaLoader
from mirage_kg.build.label_matches import MATCH_KIND, find_label_matches
from mirage_kg.loaders.obo import OboLoader
from mirage_kg.model.namespaces import GRAPH, SKOS_CLOSE, SKOS_EXACT, compress, expand
from mirage_kg.graph.ranking import frequency_value
from mirage_kg.store import OxigraphStore, ensure_schema

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "default_kg"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> OxigraphStore:
    zstandard = pytest.importorskip("zstandard")
    folder = tmp_path_factory.mktemp("mondo")
    mondo = folder / "MONDO-ontology-v2099-01-01.json.zst"
    mondo.write_bytes(zstandard.ZstdCompressor().compress((FIX / "mondo-mini.json").read_bytes()))
    kg_store = OxigraphStore()
    ensure_schema(kg_store)
    OboLoader().load(kg_store, FIX / "hp-mini.obo", LoadOptions(), LoadReport())
    hpoa_graph = GRAPH + "hpoa/test"
    HpoaLoader().load(kg_store, FIX / "mini.hpoa", LoadOptions(graph=hpoa_graph), LoadReport())
    mondo_graph = GRAPH + "obo/mondo/test"
    kg_store.load(mondo_lines(mondo, mondo_graph, LoadOptions(), lambda n: None),
                  media_type="application/n-triples", graph=mondo_graph, source=str(mondo))
    steps = [BuildStep("hpoa", hpoa_graph, "loaded"), BuildStep("mondo", mondo_graph, "loaded")]
    done = build_label_matches(kg_store, steps)
    assert done.status == "loaded" and "exact" in done.note
    assert build_label_matches(kg_store, steps).status == "present"  # same releases: kept
    return kg_store


@pytest.fixture
def kg(store: OxigraphStore) -> KnowledgeGraph:
    return KnowledgeGraph(store, embedding_model="none")


def _iri(curie: str) -> str:
    return expand(curie)


def _mappings(store: OxigraphStore, predicate: str) -> set[tuple[str, str]]:
    return {tuple(sorted((compress(q.subject.value), compress(q.object.value))))  # type: ignore[misc]
            for q in store.quads(None, predicate, None)}


def test_label_matches_are_exact_only_when_the_label_picks_one_concept_per_source(store: OxigraphStore) -> None:
    exact = _mappings(store, SKOS_EXACT)
    assert {("MONDO:0007947", "OMIM:154700"), ("MONDO:0007947", "ORPHA:558"), ("OMIM:154700", "ORPHA:558"),
            ("MONDO:0007523", "OMIM:130020")} <= exact
    # two OMIM diseases are called "Shared name syndrome": MONDO's one matches both, closely, never exactly
    close = _mappings(store, SKOS_CLOSE)
    assert {("MONDO:0000999", "OMIM:910001"), ("MONDO:0000999", "OMIM:910002")} <= close
    assert not any("MONDO:0000999" in pair for pair in exact)
    # every mapping carries its provenance: a reified record naming the label and the kind of match
    kinds = {q.object.value for q in store.quads(None, MATCH_KIND, None)}
    assert kinds == {"prefLabel=prefLabel"}
    assert not any(compress(q.subject.value).startswith("HP:") or compress(q.object.value).startswith("HP:")
                   for q in store.quads(None, SKOS_EXACT, None))  # phenotypes are never matched to diseases


def test_label_matches_never_put_two_concepts_of_one_source_in_a_group() -> None:
    labels = {
        _iri("MONDO:1"): (["Alpha syndrome"], ["Beta syndrome"]),
        _iri("OMIM:1"): (["Alpha syndrome"], []),
        _iri("OMIM:2"): (["Beta syndrome"], []),
    }
    matches = {(compress(m.subject), compress(m.object)): m for m in find_label_matches(labels)}
    assert matches[("MONDO:1", "OMIM:1")].exact and matches[("MONDO:1", "OMIM:1")].kind == "prefLabel=prefLabel"
    # MONDO:1 is already OMIM:1's: its synonym cannot also make it OMIM:2
    assert not matches[("OMIM:2", "MONDO:1")].exact and matches[("OMIM:2", "MONDO:1")].kind == "prefLabel=altLabel"


def test_groups_from_exact_matches(kg: KnowledgeGraph) -> None:
    groups = kg.groups
    assert [compress(m) for m in groups.of(_iri("ORPHA:558"))] == ["MONDO:0007947", "OMIM:154700", "ORPHA:558"]
    assert groups.rep(_iri("OMIM:154700")) == _iri("MONDO:0007947")
    assert groups.of(_iri("HP:0001166")) == (_iri("HP:0001166"),)
    chain = [(f"x:{i}", f"x:{i + 1}") for i in range(40)]
    too_big = ConceptGroups.from_pairs(chain)
    assert too_big.too_large == 1 and not too_big.members
    assert not KnowledgeGraph(kg.store, embedding_model="none", merge_equivalents=False).groups.members


def test_a_shared_name_resolves_to_the_merged_concept_and_names_its_ids(kg: KnowledgeGraph) -> None:
    found = resolve_name(kg, "Marfan syndrome")
    assert found.entity.id == "MONDO:0007947" and found.method == "exact" and found.merged
    assert found.ids == ("MONDO:0007947", "OMIM:154700", "ORPHA:558")
    assert "merged concept: OMIM:154700 (Marfan syndrome), ORPHA:558 (Marfan syndrome)" in found.describe()
    assert json.loads(json.dumps(found.to_json()))["same_as"][0] == {"id": "OMIM:154700", "label": "Marfan syndrome"}
    by_id = resolve_name(kg, "OMIM:154700")
    assert by_id.method == "id" and by_id.entity.id == "OMIM:154700" and by_id.merged
    assert resolve_name(kg, "Dolichostenomelia").method == "synonym"
    with pytest.raises(AmbiguousNameError, match="OMIM:910001"):
        resolve_name(kg, "Shared name syndrome")  # two OMIM concepts and a close (not exact) MONDO one
    unmerged = KnowledgeGraph(kg.store, embedding_model="none", merge_equivalents=False)
    with pytest.raises(AmbiguousNameError, match="3 different concepts"):
        resolve_name(unmerged, "Marfan syndrome")


def test_merged_anchor_ranks_hallmarks_first_and_cites_stored_triples(kg: KnowledgeGraph) -> None:
    steps = kg.anchor("OMIM:154700", k=4, relations=["MKG:has_phenotype"])
    assert [s.end.label for s in steps] == ["Aortic root aneurysm", "Disproportionate tall stature",
                                            "Arachnodactyly", "Ectopia lentis"]
    assert all(kg.path_exists(KgPath((s,))) for s in steps)
    # the hubs (annotated to every synthetic disorder) lead by degree, and the rank option keeps that order
    by_degree = kg.anchor("OMIM:154700", k=2, relations=["MKG:has_phenotype"], rank="degree")
    assert {s.end.label for s in by_degree} == {"Scoliosis", "High palate"}
    # a merged concept's members all contribute: MONDO's Marfan has HPOA's phenotypes; exact matches are not facts
    from_mondo = kg.anchor("MONDO:0007947", k=10)
    assert {s.end.label for s in from_mondo if s.relation.id == "MKG:has_phenotype"} >= {"Arachnodactyly"}
    assert not any(s.relation.id == "skos:exactMatch" for s in from_mondo)
    assert any(s.relation.id == "skos:exactMatch" for s in
               KnowledgeGraph(kg.store, embedding_model="none", merge_equivalents=False).anchor("MONDO:0007947"))


def test_anchor_ranks_by_frequency_with_the_degree_index_on_disk(
        store: OxigraphStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The degree index's file says whether the store holds annotation records at all (a store with none needs
    no lookup at each anchor); this one does, so the file-backed ranking reads them, as the in-memory one does."""
    import mirage_kg.graph.limits as limits
    from mirage_kg.index.degree import DiskDegrees

    in_memory = KnowledgeGraph(store, embedding_model="none")
    expected = [in_memory.anchor(c, k=4, relations=["MKG:has_phenotype"]) for c in ("OMIM:154700", "MONDO:0007947")]
    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    on_disk = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    table = on_disk._degree_table()
    assert isinstance(table, DiskDegrees) and table.annotated
    assert [on_disk.anchor(c, k=4, relations=["MKG:has_phenotype"]) for c in ("OMIM:154700", "MONDO:0007947")] \
        == expected
    assert [s.end.label for s in expected[0]][0] == "Aortic root aneurysm"


def test_merged_bridge_reaches_through_an_equivalence(kg: KnowledgeGraph) -> None:
    paths = kg.bridge("MONDO:0020066", "HP:0001382", max_hops=2)
    assert paths and [n.id for n in paths[0].nodes][0] == "MONDO:0020066"
    assert paths[0].steps[-1].subject.id == "OMIM:130020"  # the stored phenotype edge, cited as stored
    assert all(all(kg.path_exists(KgPath((s,))) for s in p.steps) for p in paths)
    unmerged = KnowledgeGraph(kg.store, embedding_model="none", merge_equivalents=False)
    assert unmerged.bridge("MONDO:0020066", "HP:0001382", max_hops=2) == []
    assert unmerged.bridge("MONDO:0020066", "HP:0001382", max_hops=3)


def test_bridge_prefers_specific_intermediates_over_hubs(kg: KnowledgeGraph) -> None:
    paths = kg.bridge("OMIM:154700", "HP:0001166", max_hops=3, max_paths=50)
    assert paths[0].length == 1
    inner = [n.id for n in paths[1].nodes[1:-1]]
    assert "HP:0000006" not in inner  # not through "Autosomal dominant inheritance"
    by_degree = kg.bridge("OMIM:154700", "HP:0001166", max_hops=3, max_paths=50, rank="degree")
    assert sorted(map(str, by_degree)) == sorted(map(str, paths))  # the same paths, in another order
    assert "HP:0000006" in [n.id for n in by_degree[1].nodes]


def test_frequency_values() -> None:
    assert frequency_value("HP:0040281") == 0.9 and frequency_value("3/4") == 0.75
    assert frequency_value("40%") == 0.4 and frequency_value("") == 0.5 and frequency_value("often") == 0.5
