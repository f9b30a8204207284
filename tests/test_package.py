"""Package-level promises: importing is light, the public API is what it should be."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mirage_kg


def test_import_pulls_in_no_llm_stack() -> None:
    code = ("import sys, mirage_kg, mirage_kg.cli, mirage_kg.store, mirage_kg.loaders; "
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'mirage_reason') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_public_api() -> None:
    for name in mirage_kg.__all__:
        assert getattr(mirage_kg, name) is not None, name
    assert {"Store", "OxigraphStore", "SparqlStore", "KnowledgeGraph", "MirageError", "open_store"} <= set(mirage_kg.__all__)


def test_reasoner_uses_only_the_public_kg_api() -> None:
    """mirage_reason reaches the graph only through names ``mirage_kg`` (and its ``loaders`` package) export."""
    import ast
    from pathlib import Path

    allowed = {"mirage_kg", "mirage_kg.loaders"}
    root = Path(__file__).resolve().parent.parent / "mirage_reason"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("mirage_kg") and n not in allowed]
    assert offenders == []


def test_kg_layer_never_imports_the_reasoner_at_module_level() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "mirage_kg"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: the CLI's lazy command table may name the reasoner
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for mod in mods:
                    assert not mod.startswith(("mirage_reason", "torch", "transformers", "sentence_transformers")), \
                        f"{path}: imports {mod} at module level"


def test_only_the_store_package_knows_store_classes() -> None:
    """Upper layers use the Store contract; no ``isinstance`` on a store class outside mirage_kg/store."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "mirage_kg"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if "store" not in p.relative_to(root).parts[:1]
                 and re.search(r"isinstance\([^)]*(OxigraphStore|SparqlStore)", p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_ruff_finds_nothing() -> None:
    """The tree passes ``ruff check`` with the rules of pyproject.toml (pyflakes' F and E9: undefined names, unused
    imports and variables, syntax errors)."""
    import shutil
    from pathlib import Path

    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        import pytest

        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    root = Path(__file__).resolve().parent.parent
    found = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(root)], cwd=root,
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stdout + found.stderr


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    """mypy passes over ``mirage_kg`` and ``mirage_reason`` with pyproject.toml's ``[tool.mypy]`` (every def annotated,
    bodies checked, no unused or code-less ``type: ignore``)."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    root = Path(__file__).resolve().parent.parent
    found = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True)
    assert found.returncode == 0, found.stdout + found.stderr


def test_type_ignores_say_why() -> None:
    """A ``type: ignore`` in the packages names its error code and says why on the same line
    (``# type: ignore[arg-type]  # the parser calls only read()``)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    said = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S")
    offenders = [f"{path.relative_to(root)}:{number}: {line.strip()}"
                 for package in ("mirage_kg", "mirage_reason") for path in sorted((root / package).rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"#\s*type:\s*ignore", line) and not said.search(line)]
    assert offenders == [], "\n".join(offenders)
