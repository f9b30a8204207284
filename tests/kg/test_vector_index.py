"""The nearest-neighbour index over label embeddings: recall against brute force, a build stopped half-way resuming
from its checkpoint, an index carried across a store change answering as a fresh build does, and brute force (with
a note) when usearch is not installed."""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path
from typing import Any

import pytest

from mirage_kg.linking import embedder as embedding, vectors as vector_index
from mirage_kg.linking.embedder import Embedder
from mirage_kg.linking.linker import Linker
from mirage_kg.store import OxigraphStore, ensure_schema

np = pytest.importorskip("numpy")
pytest.importorskip("usearch")


def clustered_unit_vectors(count: int, width: int, seed: int = 0) -> Any:
    """Unit vectors around a few hundred centres, as label embeddings are (names of one thing lie close)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(count // 20, 1), width))
    vectors = centres[rng.integers(0, len(centres), count)] + 0.35 * rng.standard_normal((count, width))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def recall_at_5(index: vector_index.VectorIndex, matrix: Any, queries: Any) -> float:
    found = 0
    for query in queries:
        exact, _ = vector_index.brute_force_top(matrix, query, 5)
        rows, _ = index.search(query, 5)
        found += len(set(exact.tolist()) & set(rows.tolist()))
    return found / (5 * len(queries))


def noisy_queries(matrix: Any, count: int, seed: int = 1) -> Any:
    rng = np.random.default_rng(seed)
    queries = matrix[rng.integers(0, len(matrix), count)] + 0.2 * rng.standard_normal((count, matrix.shape[1]))
    return (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)


def test_brute_force_top_is_exact_and_best_first() -> None:
    matrix = clustered_unit_vectors(500, 16)
    rows, sims = vector_index.brute_force_top(matrix, matrix[7], 5)
    assert rows[0] == 7 and abs(sims[0] - 1.0) < 1e-5
    assert list(sims) == sorted(sims, reverse=True)
    assert set(rows.tolist()) == set(np.argsort(-(matrix @ matrix[7]))[:5].tolist())


def test_nearest_neighbours_match_brute_force(tmp_path: Path) -> None:
    matrix = clustered_unit_vectors(6000, 32)
    path = tmp_path / "ann-x-fp.usearch"
    built = vector_index.VectorIndex.build(matrix, path)
    assert len(built) == len(matrix) and path.is_file() and vector_index.VectorIndex.rows_file(path).is_file()
    queries = noisy_queries(matrix, 200)
    assert recall_at_5(built, matrix, queries) >= 0.95
    reopened = vector_index.VectorIndex.open(path)  # memory-mapped from the cache
    assert [reopened.search(q, 5)[0].tolist() for q in queries[:20]] == \
        [built.search(q, 5)[0].tolist() for q in queries[:20]]


def unreachable_keys(index: vector_index.VectorIndex, matrix: Any, count: int | None = None) -> list[int]:
    """Rows that a search for their own vector does not find first, leaving out rows whose vector equals the one
    found: exact duplicates, either of which may come first."""
    missed = []
    for row, vector in enumerate(matrix[:count]):
        found, _ = index.search(vector, 1)
        if not len(found) or (found[0] != row and not np.array_equal(matrix[found[0]], vector)):
            missed.append(row)
    return missed


@pytest.mark.parametrize("seed", range(4))
def test_every_key_is_reachable_in_a_build_on_both_cores(tmp_path: Path, seed: int) -> None:
    """The build's two shards are added side by side; every vector must still be found by a search for itself
    (usearch's concurrent ``add`` into one graph strands some: issue #735). Random 32-d vectors with a few exact
    duplicates, in small batches so that the shards' threads overlap often."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((3000, 32)).astype(np.float32)
    matrix[2990:] = matrix[:10]  # exact duplicates: either copy may come first
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    built = vector_index.VectorIndex.build(matrix, tmp_path / "ann-x-fp.usearch", shards=2)
    assert built.shards == 2 and len(built) == len(matrix)
    assert unreachable_keys(built, matrix) == []
    reopened = vector_index.VectorIndex.open(tmp_path / "ann-x-fp.usearch")
    assert reopened.shards == 2 and unreachable_keys(reopened, matrix, 300) == []


def test_an_index_of_one_file_opens_as_one_shard(tmp_path: Path) -> None:
    """An index saved before shards (one file and its rows) still opens and answers; a later save with more shards
    replaces it whole, and one with fewer removes the extra shard files."""
    matrix = clustered_unit_vectors(2000, 16)
    path = tmp_path / "ann-x-fp.usearch"
    one = vector_index.VectorIndex.build(matrix, path, shards=1)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ann-x-fp.usearch", "ann-x-fp.usearch.rows.npy"]
    opened = vector_index.VectorIndex.open(path)
    assert opened.shards == 1 and opened.search(matrix[5], 1)[0].tolist() == [5]
    two = vector_index.VectorIndex.build(matrix, path, shards=2)
    assert (tmp_path / "ann-x-fp.usearch.shard1").is_file() and vector_index.VectorIndex.open(path).shards == 2
    one.save(path)
    assert not (tmp_path / "ann-x-fp.usearch.shard1").exists() and vector_index.VectorIndex.open(path).shards == 1
    assert two.search(matrix[9], 3)[0][0] == 9


def test_a_stopped_build_resumes_from_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = clustered_unit_vectors(5000, 16)
    path = tmp_path / "ann-x-fp.usearch"
    monkeypatch.setattr(vector_index, "BATCH", 500)
    batches: list[int] = []

    def stop_at_the_fifth_batch() -> int:
        if len(batches) == 4:
            raise KeyboardInterrupt  # killed half-way
        batches.append(1)
        return 1

    monkeypatch.setattr(vector_index, "_threads", stop_at_the_fifth_batch)
    with pytest.raises(KeyboardInterrupt):
        vector_index.VectorIndex.build(matrix, path, checkpoint_rows=1000)
    checkpoint = path.with_name(path.name + ".partial")
    assert checkpoint.is_file() and not path.exists()  # the checkpoint after 2,000 vectors, no finished index
    notes: list[str] = []
    batches.clear()
    monkeypatch.setattr(vector_index, "_threads", lambda: batches.append(1) or 1)
    resumed = vector_index.VectorIndex.build(matrix, path, checkpoint_rows=1000, note=notes.append)
    assert len(batches) == 6  # the 3,000 vectors after the checkpoint, in batches of 500
    assert "resuming after 2,000" in notes[0]
    assert len(resumed) == len(matrix) and path.is_file() and not checkpoint.exists()
    assert recall_at_5(resumed, matrix, noisy_queries(matrix, 100)) >= 0.95


# --- in the linker ------------------------------------------------------------------------------------------------

class HashEmbedder:
    """Stands in for the sentence-transformers model: a unit vector from each text's hash, so that a text keeps its
    vector across builds; counts what it encodes."""

    model_name = "hash"

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode_many(self, texts: list[str], batch_size: int = 256) -> Any:
        self.encoded.extend(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8).astype(np.float32) - 127.5
                for t in texts]
        vectors = np.stack(rows) if rows else np.zeros((0, 32), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-9)

    encode = encode_many


def labels_ttl(names: list[str]) -> str:
    lines = ["@prefix skos: <http://www.w3.org/2004/02/skos/core#> ."]
    lines += [f'<urn:e:{i}> skos:prefLabel "{name}"@en .' for i, name in enumerate(names)]
    return "\n".join(lines)


def linker_for(store: OxigraphStore, cache: Path | None = None) -> Linker:
    linker = Linker(store, cache_dir=cache)
    linker.embedder = HashEmbedder()  # type: ignore[assignment]
    linker.ann_min_labels = 0  # the index even for a handful of labels
    linker.threshold = -1.0  # every neighbour counts, so that answers compare whole
    return linker


def answers(linker: Linker, queries: Any) -> list[list[str]]:
    found = []
    for query in queries:
        scores: dict[int, tuple[float, str]] = {}
        linker._embedding(query, scores)
        found.append(sorted(linker.index.entity(i).id for i in scores))
    return found


def test_an_updated_store_carries_the_index_and_answers_as_a_fresh_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Embedder, "installed", staticmethod(lambda: True))
    names = [f"finding number {i}" for i in range(300)]
    store = OxigraphStore(tmp_path / "kg")  # on disk: the caches live beside it, whatever its fingerprint
    ensure_schema(store)
    store.load(io.BytesIO(labels_ttl(names).encode()), media_type="text/turtle", graph="urn:g:1", source="t")
    first = linker_for(store)
    assert first.vectors is not None and first.vectors_status == "built"
    assert first.embedding_top == 3
    # a release update: some labels gone, some new (the fingerprint changes with the store)
    store.update('DELETE WHERE { GRAPH <urn:g:1> { <urn:e:5> ?p ?o } } ; '
                 'DELETE WHERE { GRAPH <urn:g:1> { <urn:e:6> ?p ?o } }')
    store.load(io.BytesIO(labels_ttl([f"new finding {i}" for i in range(400, 410)]).encode()),
               media_type="text/turtle", graph="urn:g:2", source="t")
    updated = linker_for(store)
    assert updated.vectors is not None and updated.vectors_status == "carried"
    assert sorted(updated.embedder.encoded) == sorted(f"new finding {i}" for i in range(400, 410))  # type: ignore[union-attr]
    fresh = linker_for(store, tmp_path / "fresh")
    assert fresh.vectors is not None and fresh.vectors_status == "built"
    queries = HashEmbedder().encode_many([*names[:40], "new finding 403", "finding number 5", "something else"])
    assert answers(updated, queries) == answers(fresh, queries)
    # and both agree with brute force over the same matrix
    brute = linker_for(store, tmp_path / "fresh")
    brute.ann_min_labels = 10**9
    assert brute.vectors is None and answers(brute, queries) == answers(fresh, queries)
    # one index file per model beside the store's caches: the old fingerprint's is gone
    assert len(list(updated._folder().glob("ann-*.usearch"))) == 1  # type: ignore[union-attr]
    again = linker_for(store)
    assert again.vectors is not None and again.vectors_status == "cached"


def test_without_usearch_the_search_is_brute_force_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Embedder, "installed", staticmethod(lambda: True))
    monkeypatch.setattr(vector_index, "installed", lambda: False)
    monkeypatch.setattr(embedding, "_warned", set())
    store = OxigraphStore()
    ensure_schema(store)
    store.load(io.BytesIO(labels_ttl([f"sign {i}" for i in range(50)]).encode()), media_type="text/turtle",
               graph="urn:g:1", source="t")
    linker = linker_for(store, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert linker.vectors is None
        found = answers(linker, HashEmbedder().encode_many(["sign 7"]))
        linker.vectors  # noqa: B018 (said once)
    assert [str(w.message) for w in caught if "usearch" in str(w.message)] == [
        "usearch is not installed: embedding search scans all 50 label vectors by brute force "
        "(pip install 'mirage-kg[ann]')"]
    assert "urn:e:7" in found[0]
    assert not list(tmp_path.rglob("ann-*"))


def test_load_update_carries_the_index_for_the_changed_labels_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: ``load`` builds the index after the embeddings, ``load --update`` carries both, encoding
    and indexing only the new labels; the carried index answers as a fresh build of the updated store does."""
    from click.testing import CliRunner

    from mirage_kg.cli.main import main
    from mirage_kg.store import open_store

    encoded: list[str] = []

    def encode_many(self: Embedder, texts: list[str], batch_size: int = 256) -> Any:
        encoded.extend(texts)
        return HashEmbedder().encode_many(texts)

    monkeypatch.setattr(Embedder, "installed", staticmethod(lambda: True))
    monkeypatch.setattr(Embedder, "encode_many", encode_many)
    monkeypatch.setattr(vector_index, "ANN_MIN_LABELS", 0)
    monkeypatch.setenv("MIRAGE_KG_INDEX", "1")  # the test session turns the index step off
    monkeypatch.setenv("MIRAGE_KG_INDEX_EMBEDDINGS", "1")
    facts = tmp_path / "facts.tsv"
    rows = [f"Disease_{i}\thas_symptom\tSymptom_{i % 40}" for i in range(120)]
    facts.write_text("\n".join(rows) + "\n", encoding="utf-8")

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    store = tmp_path / "kg"
    run("load", str(facts), "--store", str(store))
    cache = store / ".mirage-cache"
    assert len(list(cache.glob("ann-*.usearch"))) == 1
    first = len(encoded)
    facts.write_text("\n".join([*rows[5:], "Disease_900\thas_symptom\tSymptom_900"]) + "\n", encoding="utf-8")
    run("load", "--update", str(facts), "--store", str(store))
    assert sorted(encoded[first:]) == ["Disease 900", "Symptom 900"]  # only the new labels encoded
    (ann,) = cache.glob("ann-*.usearch")
    rows_of_keys = np.load(vector_index.VectorIndex.rows_file(ann))
    assert len(rows_of_keys) == first + 2 and int((rows_of_keys < 0).sum()) == 5  # 5 keys removed, 2 added
    with open_store(store) as opened:
        updated = Linker(opened)
        fresh = Linker(opened, cache_dir=tmp_path / "fresh")
        for linker in (updated, fresh):
            linker.threshold = -1.0
        assert updated.vectors is not None and updated.vectors_status == "cached"
        assert fresh.vectors is not None and fresh.vectors_status == "built"
        queries = HashEmbedder().encode_many(["Disease 900", "Disease 3", "Symptom 7", "Disease 77", "fever"])
        assert answers(updated, queries) == answers(fresh, queries)


@pytest.mark.slow
def test_bench_ann_runs_on_saved_vectors(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    vectors = tmp_path / "vectors.npy"
    np.save(vectors, clustered_unit_vectors(1200, 24))
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_ann.py"), "--vectors", str(vectors),
                          "--labels", "1000", "--queries", "100", "--grow", "1500", "--workdir", str(tmp_path / "w"),
                          "--json", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["rows"] == 1500 and report["real_labels"] == 1000
    assert report["recall_at_5"] >= 0.9 and report["carried_recall_at_5"] >= 0.9
    assert "recall@5" in out.stdout and "queries/s ANN" in out.stdout
