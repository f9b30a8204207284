"""The differential diagnosis (``mirage_kg.retrieval.differential``) on each kind of ontology: the demo KG and EMCKG
(has_symptom), HPO with its HPOA frequencies (the small default-KG fixture), and UMLS RRF (has_manifestation), all
through the clinical roles of ``ontologies/`` -- plus the ordering it promises and its CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg import KnowledgeGraph
from mirage_kg import differential_diagnosis as differential
from mirage_kg.cli import main
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.loaders.hpoa import HpoaLoader
from mirage_kg.loaders.obo import OboLoader
from mirage_kg.model.namespaces import GRAPH
from mirage_kg.store import OxigraphStore, demo_store, ensure_schema

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _labels(result: object) -> list[str]:
    return [c.entity.label for c in result.candidates]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def demo() -> KnowledgeGraph:
    return KnowledgeGraph(demo_store(), embedding_model="none")


def _hpo_store() -> OxigraphStore:
    store = OxigraphStore()
    ensure_schema(store)
    OboLoader().load(store, FIXTURES / "default_kg" / "hp-mini.obo", LoadOptions(), LoadReport())
    HpoaLoader().load(store, FIXTURES / "default_kg" / "mini.hpoa", LoadOptions(graph=GRAPH + "hpoa/test"),
                      LoadReport())
    return store


@pytest.fixture(scope="module")
def hpo() -> KnowledgeGraph:
    return KnowledgeGraph(_hpo_store(), embedding_model="none")


def test_demo_kg_ranks_by_specific_coverage(demo: KnowledgeGraph) -> None:
    result = differential(demo, ["KG:Fever", "KG:Cough", "KG:Haemoptysis", "KG:Night_sweats"], top=5)
    top = result.candidates[0]
    assert top.entity.label == "Tuberculosis"
    assert {e.label for e in top.explains} == {"Fever", "Cough", "Haemoptysis", "Night sweats"}
    assert top.unexplained == () and top.coverage == pytest.approx(1.0)
    # every explained finding has its supporting fact, read from the candidate, and it is a fact of the KG
    assert len(top.paths) == 4 and all(demo.path_exists(p) for p in top.paths)
    assert all(p.nodes[0].iri == top.entity.iri for p in top.paths)
    # the others explain fewer findings and say which they leave out
    for other in result.candidates[1:]:
        assert other.score < top.score and other.unexplained
        assert {e.iri for e in other.explains} | {e.iri for e in other.unexplained} == \
            {f.entity.iri for f in result.findings}


def test_a_specific_finding_outweighs_a_common_one(demo: KnowledgeGraph) -> None:
    """Fever and fatigue are shared by many conditions, haemoptysis by one: the candidate explaining the specific
    finding ranks above those explaining only the common one, and a candidate explaining more beats one explaining
    fewer of equal specificity."""
    result = differential(demo, ["KG:Fatigue", "KG:Haemoptysis"], top=20)
    weights = {f.entity.label: f.weight for f in result.findings}
    assert weights["Haemoptysis"] > weights["Fatigue"]
    assert result.candidates[0].entity.label == "Tuberculosis"  # explains both
    fatigue_only = [c for c in result.candidates if [e.label for e in c.explains] == ["Fatigue"]]
    assert fatigue_only and all(c.score < result.candidates[0].score for c in fatigue_only)
    # the score is monotone in what is explained: more findings (all else equal) -> higher coverage
    more = differential(demo, ["KG:Wheezing", "KG:Chest_tightness", "KG:Sputum_production"], top=3)
    assert more.candidates[0].entity.label == "Chronic obstructive pulmonary disease"
    assert more.candidates[0].coverage > more.candidates[1].coverage


def test_free_text_is_linked_and_a_named_condition_explains_itself(demo: KnowledgeGraph) -> None:
    result = differential(demo, "I have type 2 diabetes and blurred vision", top=3)
    roles = {f.entity.label: f.role for f in result.findings}
    assert roles == {"Type 2 diabetes mellitus": "condition", "Blurred vision": "finding"}
    assert result.candidates[0].entity.label == "Type 2 diabetes mellitus"
    assert result.candidates[0].unexplained == ()
    data = result.to_json()
    assert data["candidates"][0]["entity"] == {"id": "KG:Type_2_diabetes_mellitus",
                                               "label": "Type 2 diabetes mellitus"}


def test_hpo_frequencies_and_hallmarks(hpo: KnowledgeGraph) -> None:
    """HPO's has_phenotype with HPOA frequencies: Marfan syndrome (arachnodactyly in 124/197, ectopia lentis in
    119/251 of its OMIM cases) comes first for arachnodactyly + ectopia lentis, above the synthetic disorders that
    list arachnodactyly only; an inheritance annotation (aspect I) is no finding."""
    result = differential(hpo, ["HP:0001166", "HP:0001083"], top=5)
    assert result.candidates[0].entity.label == "Marfan syndrome"
    assert {e.label for e in result.candidates[0].explains} == {"Arachnodactyly", "Ectopia lentis"}
    # OMIM's and Orphanet's Marfan syndrome (not merged without MONDO) both lead
    assert [c.entity.label for c in result.candidates[:2]] == ["Marfan syndrome"] * 2
    rest = result.candidates[2:]
    assert rest and all([e.label for e in c.explains] == ["Arachnodactyly"] for c in rest)
    assert all(c.score < result.candidates[0].score for c in rest)
    assert all(hpo.path_exists(p) for c in result.candidates for p in c.paths)


def test_hpo_excluded_annotation_explains_nothing(tmp_path: Path) -> None:
    """An HPOA row with frequency HP:0040285 (excluded, 0%) says the disease does *not* have the feature."""
    store = OxigraphStore()
    ensure_schema(store)
    OboLoader().load(store, FIXTURES / "default_kg" / "hp-mini.obo", LoadOptions(), LoadReport())
    header = ("#description: test\n#date: 2099-01-01\ndatabase_id\tdisease_name\tqualifier\thpo_id\treference\t"
              "evidence\tonset\tfrequency\tsex\tmodifier\taspect\tbiocuration\n")
    rows = ["OMIM:900101\tExcluding disorder\t\tHP:0001166\tOMIM:900101\tTAS\t\tHP:0040285\t\t\tP\tHPO:t[2099-01-01]",
            "OMIM:900102\tPlain disorder\t\tHP:0001166\tOMIM:900102\tTAS\t\t\t\t\tP\tHPO:t[2099-01-01]"]
    hpoa = tmp_path / "x.hpoa"
    hpoa.write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
    HpoaLoader().load(store, hpoa, LoadOptions(graph=GRAPH + "hpoa/x"), LoadReport())
    kg = KnowledgeGraph(store, embedding_model="none")
    assert _labels(differential(kg, ["HP:0001166"])) == ["Plain disorder"]


def test_umls_rrf_has_manifestation() -> None:
    """UMLS MRREL's has_manifestation (read CUI2 -RELA-> CUI1): Migraine disorder has headache, nausea and
    photophobia; tension-type headache headache and photophobia."""
    store = OxigraphStore()
    ensure_schema(store)
    get_loader("umls").load(store, FIXTURES / "e2e" / "umls", LoadOptions(), LoadReport())
    kg = KnowledgeGraph(store, embedding_model="none")
    result = differential(kg, "headache, nausea and light sensitivity", top=5)
    assert [f.entity.label for f in result.findings] == ["Headache", "Nausea", "Photophobia"]
    assert _labels(result)[:2] == ["Migraine disorder", "Tension-type headache"]
    assert [e.label for e in result.candidates[1].unexplained] == ["Nausea"]
    assert all(kg.path_exists(p) for c in result.candidates for p in c.paths)


def test_emckg(emckg_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, emckg_path, LoadOptions(), LoadReport())
    kg = KnowledgeGraph(store, embedding_model="none")
    result = differential(kg, ["KG:Abdominal_distention", "KG:Stomach_bloating", "KG:Melena"], top=3)
    top = result.candidates[0]
    assert top.entity.label == "Cirrhosis" and not top.unexplained
    assert all(kg.path_exists(p) for p in top.paths)
    assert result.conditions > 50  # the specificity is counted over EMCKG's diseases


def test_no_finding_role_says_so() -> None:
    store = OxigraphStore()
    store.load(io.BytesIO(b"<urn:x:a> <urn:x:likes> <urn:x:b> ."), media_type="application/n-triples",
               graph="urn:test:g")
    kg = KnowledgeGraph(store, embedding_model="none")
    result = differential(kg, ["urn:x:b"])
    assert result.candidates == () and "no condition" in result.notes[0]


def test_cli_json_and_text() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["query", "differential", "cough, haemoptysis and night sweats",
                               "--embedding-model", "none", "--json", "--top", "3"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    best = data["candidates"][0]
    assert best["entity"] == {"id": "KG:Tuberculosis", "label": "Tuberculosis"}
    assert {e["label"] for e in best["explains"]} == {"Cough", "Haemoptysis", "Night sweats"}
    assert best["unexplained"] == [] and best["paths"] and best["score"] > data["candidates"][1]["score"]
    text = runner.invoke(main, ["query", "differential", "cough, haemoptysis",
                                "--embedding-model", "none"])
    assert text.exit_code == 0 and "1. Tuberculosis" in text.output


def test_a_phenotypes_diseases_rank_hallmark_first(hpo: KnowledgeGraph) -> None:
    """Seen from arachnodactyly, the diseases where the sources give it often (Marfan syndrome: 124/197 in OMIM,
    "very frequent" in Orphanet) come before the synthetic disorders that list it with no frequency and few other
    features (which the neighbour's specificity alone put first)."""
    steps = hpo.anchor("HP:0001166", k=10, direction="backward")
    order = [s.subject.label for s in steps]
    assert order[:2] == ["Marfan syndrome", "Marfan syndrome"]
    assert set(order[2:]) == {"Synthetic disorder 1", "Synthetic disorder 2"}


def test_a_name_shared_by_a_phenotype_and_a_disease_reads_as_the_finding() -> None:
    """MONDO names diseases as HPO names phenotypes ("obesity", "macroglossia"): a mention linking both is the
    finding the differential explains, not a condition the patient named."""
    store = _hpo_store()
    store.load(io.BytesIO(b'<https://w3id.org/mirage-kg/entity/Scoliosis_disease> '
                          b'<http://www.w3.org/1999/02/22-rdf-syntax-ns#type> '
                          b'<https://w3id.org/mirage-kg/schema#Disease> .\n'
                          b'<https://w3id.org/mirage-kg/entity/Scoliosis_disease> '
                          b'<http://www.w3.org/2004/02/skos/core#prefLabel> "Scoliosis"@en .\n'),
               media_type="application/n-triples", graph="urn:test:scoliosis")
    kg = KnowledgeGraph(store, embedding_model="none")
    result = differential(kg, "scoliosis and arachnodactyly", top=3)
    assert {f.entity.id: f.role for f in result.findings} == {"HP:0002650": "finding", "HP:0001166": "finding"}
    assert result.candidates[0].entity.label == "Marfan syndrome"


def _triples_kg(tmp_path: Path, lines: list[str]) -> KnowledgeGraph:
    source = tmp_path / "triples.tsv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, source, LoadOptions(), LoadReport())
    return KnowledgeGraph(store, embedding_model="none")


def test_conditions_tied_past_the_pool_are_all_scored(tmp_path: Path) -> None:
    """A finding forty conditions share ties them all on coverage: the best attested among every one of them (the
    largest profile) comes first, not the best among the first thirty by id."""
    lines = [f"Disease_{i:02d}\thas_symptom\tFatigue" for i in range(40)]
    lines += [f"Disease_{i:02d}\thas_symptom\tOther_{i}_{j}" for i in range(40) for j in range(6 if i == 39 else 2)]
    kg = _triples_kg(tmp_path, lines)
    result = differential(kg, ["KG:Fatigue"], top=3)
    assert result.candidates[0].entity.label == "Disease 39" and result.candidates[0].profile == 7
    assert all(c.coverage == pytest.approx(1.0) for c in result.candidates)


def test_a_soft_match_of_a_named_condition_is_not_swapped_for_a_finding_it_resembles(tmp_path: Path) -> None:
    """"Really bad sinus problems" links chronic sinusitis at 0.79 by likeness and painful sinuses at 0.77: the
    condition the patient names stands (a likeness names nothing alike), so it leads before the sick sinus syndrome
    that the bare word "sinus" resembles less; an exact name shared by a finding and a condition still reads as the
    finding (test_a_name_shared_by_a_phenotype_and_a_disease_reads_as_the_finding)."""
    from mirage_kg.linking.linker import Candidate, Mention

    kg = _triples_kg(tmp_path, ["Chronic_sinusitis\thas_symptom\tPainful_sinuses",
                                "Acute_sinusitis\thas_symptom\tPainful_sinuses",
                                "Sick_sinus_syndrome\thas_symptom\tFainting"])

    def soft(text: str, *scored: tuple[str, float]) -> Mention:
        return Mention(text, 0, len(text), tuple(Candidate(kg.entity(i), s, "embedding") for i, s in scored))

    mentions = [soft("really bad sinus problems", ("KG:Chronic_sinusitis", 0.786), ("KG:Painful_sinuses", 0.766)),
                soft("sinus", ("KG:Sick_sinus_syndrome", 0.744), ("KG:Painful_sinuses", 0.739))]
    result = differential(kg, "really bad sinus problems", mentions=mentions, top=3)
    assert {f.entity.label: f.role for f in result.findings} == {"Chronic sinusitis": "condition",
                                                                "Sick sinus syndrome": "condition"}
    assert _labels(result) == ["Chronic sinusitis", "Sick sinus syndrome"]
