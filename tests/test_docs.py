"""Every Python example in the docs runs: each ```python block of README.md and docs/*.md is executed as written,
in a folder holding what it names (a triple file, a store of the demo KG, a shapes file, a check), or is listed
below with the reason it cannot run here (a model to load, a server to start)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mirage_kg.model.namespaces import ontologies_dir
from mirage_kg.store import OxigraphStore, ensure_schema
from mirage_kg.store.opening import DEMO_GRAPH

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

#: "file:line" of a block that is not run, and why
NOT_RUN = {
    "docs/evaluation.md": "an evaluation with SmolLM2 over a dataset of ../shared/data: minutes of a real model "
                          "(the eval tests run the same API on a scripted model)",
    "docs/reasoner.md": "loads SmolLM2 in llama.cpp and answers two questions with two samples each: minutes "
                        "(tests/reason/test_coordinator.py runs Mirage on the demo KG)",
    "docs/serve.md": "a client of a running `mirage-kg serve` (tests/reason/test_service_clients.py runs these "
                     "clients against one)",
}


def blocks(language: str) -> list[tuple[str, int, str]]:
    """(file, line, code) of every block of ``language`` in README.md and docs/*.md."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(1) == language:
                found.append((str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, m.group(2)))
    return found


@pytest.fixture(scope="module")
def demo_kg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of the demo KG on disk, made once and copied where an example opens one."""
    folder = tmp_path_factory.mktemp("docs") / "demo"
    store = OxigraphStore(folder)
    ensure_schema(store)
    with open(ontologies_dir() / "demo.ttl", "rb") as handle:
        store.load(handle, media_type="text/turtle", graph=DEMO_GRAPH, source="mirage-kg demo KG")
    store.close()
    return folder


def _prepare(where: Path, demo: Path) -> None:
    """What the examples name: ``triples.tsv``, the demo KG in ``my-store`` and ``kg/``, ``my-shapes.ttl``, and
    ``no-orphans.rq`` (the check query docs/validation.md shows)."""
    shutil.copy(FIXTURES / "core" / "small.tsv", where / "triples.tsv")
    shutil.copytree(demo, where / "my-store")
    shutil.copytree(demo, where / "kg")
    shutil.copy(FIXTURES / "validation" / "extra-shapes.ttl", where / "my-shapes.ttl")
    (where / "no-orphans.rq").write_text(blocks("sparql")[0][2], encoding="utf-8")


PYTHON = blocks("python")


#: an example that builds a ``KnowledgeGraph`` links with the default embedding model: it loads the model and
#: embeds the demo KG's labels, tens of seconds on two cores
RUN = [pytest.param(f, n, code, id=f"{f}:{n}", marks=[pytest.mark.slow] if "KnowledgeGraph(" in code else [])
       for f, n, code in PYTHON if f not in NOT_RUN]


@pytest.mark.parametrize("file,line,code", RUN)
def test_python_example_runs(file: str, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             demo_kg: Path) -> None:
    if file == "docs/user-guide.md":  # it makes its store itself, where kg/ must not exist yet
        shutil.copy(FIXTURES / "core" / "small.tsv", tmp_path / "triples.tsv")
    else:
        _prepare(tmp_path, demo_kg)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{file}:{line}", "exec"), {"__name__": "__docs__"})


def test_every_python_example_is_run_or_says_why_not() -> None:
    files = {f for f, _, _ in PYTHON}
    assert set(NOT_RUN) <= files, f"NOT_RUN names a file without a Python example: {set(NOT_RUN) - files}"
    run = [f for f in files if f not in NOT_RUN]
    assert "docs/user-guide.md" in run and "docs/queries.md" in run and "docs/validation.md" in run
    assert blocks("sparql") and "SELECT" in blocks("sparql")[0][2]  # the check the validation example runs
