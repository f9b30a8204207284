"""``GET /v1/differential``: the same JSON as ``mirage-kg query differential --json``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")

from click.testing import CliRunner  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from mirage_kg import KnowledgeGraph, demo_store  # noqa: E402
from mirage_kg.cli import main  # noqa: E402
from mirage_reason.service import create_app  # noqa: E402


def test_differential_route_matches_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRAGE_KG_STORE", raising=False)
    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    text = "cough, haemoptysis and night sweats"
    with TestClient(create_app(kg)) as client:
        reply = client.get("/v1/differential", params={"findings": text, "top": 3})
        assert reply.status_code == 200, reply.text
        data = reply.json()
        assert data["candidates"][0]["entity"] == {"id": "KG:Tuberculosis", "label": "Tuberculosis"}
        assert "/v1/differential" in client.get("/openapi.json").json()["paths"]
        assert client.get("/v1/differential", params={"findings": text, "top": 0}).status_code == 422
    cli = CliRunner().invoke(main, ["query", "differential", text, "--top", "3", "--embedding-model", "none",
                                    "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.output) == data
