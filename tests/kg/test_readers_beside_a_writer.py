"""A reader beside a running writer (``build-default``, ``load``, ``index`` in another process): it reads what is
committed, names that content with the writer's own key (so it finds the indexes the writer built for it, not a
second set keyed by files), says a writer is at work rather than blaming "an older mirage-kg or another tool",
and leaves a label-embedding build under way to the process doing it instead of starting its own from zero."""

from __future__ import annotations

import fcntl
import io
import os
import warnings
from pathlib import Path

import pytest

from mirage_kg.store import OxigraphStore, ensure_schema
from mirage_kg.store.checkpoints import writer_active

from tests.kg.test_linking import CountingEmbedder

TTL = b"""@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/rel/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
KG:Fever skos:prefLabel "Fever"@en ; ex:sign_of KG:Flu . KG:Flu skos:prefLabel "Influenza"@en .
"""


def _writer(path: Path) -> OxigraphStore:
    store = OxigraphStore(path)
    ensure_schema(store)
    store.load(io.BytesIO(TTL), media_type="text/turtle", graph="https://w3id.org/mirage-kg/graph/t", source="t")
    return store


def test_a_reader_beside_a_writer_shares_its_content_key_and_says_a_writer_is_at_work(tmp_path: Path) -> None:
    path = tmp_path / "store"
    writer = _writer(path)  # the first build of this store: no writer has closed it yet
    try:
        key = writer.content_key().key  # what the writer's index step keys its caches by
        assert writer_active(path)
        reader = OxigraphStore(path, read_only=True)
        found = reader.content_key()
        assert found.key == key  # the reader finds what the writer builds, not a second set
        assert "older mirage-kg" not in found.note
        reader.close()
        writer.load(io.BytesIO(TTL.replace(b"Flu", b"Cold")), media_type="text/turtle",
                    graph="https://w3id.org/mirage-kg/graph/u", source="u")  # the writer goes on writing
        later = OxigraphStore(path, read_only=True)
        note = later.content_key().note
        later.close()
        assert "older mirage-kg or another tool" not in note
        if note:  # its files moved on since the writer named them: say who is writing
            assert "another mirage-kg process is writing to it" in note
    finally:
        writer.close()
    assert not writer_active(path)


def test_an_embedding_build_under_way_elsewhere_is_not_started_again(tmp_path: Path) -> None:
    """The parts folder of a build under way is locked by its builder: a second process neither encodes the
    labels from zero nor writes into those parts; it links without embeddings meanwhile and says why."""
    from mirage_kg.linking.embedder import EmbeddingsBeingBuilt, encode_resumable
    from mirage_kg.linking.linker import Linker

    parts = tmp_path / "embeddings-x.parts"
    texts = [f"label {i}" for i in range(25)]
    lock = os.open(tmp_path / "embeddings-x.parts.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process's build
    try:
        idle = CountingEmbedder()
        with pytest.raises(EmbeddingsBeingBuilt):
            encode_resumable(idle, texts, parts, chunk=10)  # type: ignore[arg-type]
        assert idle.calls == []
    finally:
        os.close(lock)
    assert len(encode_resumable(CountingEmbedder(), texts, parts, chunk=10)) == 25  # type: ignore[arg-type]

    store = _writer(tmp_path / "kg")
    linker = Linker(store, embedding_model="none", cache_dir=tmp_path / "cache")
    linker.embedder = CountingEmbedder()  # type: ignore[assignment]
    folder = linker._folder()
    assert folder is not None
    name = f"embeddings-{linker._model_key()}-{linker.fingerprint}.parts.lock"
    held = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert linker.matrix is None
        assert any("being built by another process" in str(w.message) for w in caught)
        assert linker.embedder.calls == []  # type: ignore[union-attr]  # a CountingEmbedder
        assert [m.text for m in linker.link("Fever")] == ["Fever"]  # lexical linking goes on
    finally:
        os.close(held)
        store.close()
