"""The package layout's rules, read from the source: no module reaches into another's private names (``from x
import _name``, or ``module._name`` on an imported module), and ``mirage_kg`` never imports ``mirage_reason``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mirage_kg", "mirage_reason")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages and the benchmark scripts (which import each
    other by their bare names)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        found[path.stem] = path
    return found


MODULES = _modules()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(module: str, node: ast.ImportFrom, path: Path) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def private_imports(module: str, path: Path) -> Iterator[str]:
    """Where ``module`` uses another module's private name: ``from other import _name``, or ``alias._name`` where
    ``alias`` is bound to another module of ours."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}  # local name -> a module of ours it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, path)
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif _private(alias.name) and source != module and (source in MODULES or
                                                                    source.split(".")[0] in PACKAGES):
                    yield f"{_shown(path)}:{node.lineno}: from {source} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    aliases[alias.asname or alias.name.split(".")[0]] = \
                        alias.name if alias.asname else alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            if target is not None and target != module:
                yield f"{_shown(path)}:{node.lineno}: {node.value.id}.{node.attr} ({target})"


def test_no_module_imports_another_modules_private_names() -> None:
    found = [hit for module, path in MODULES.items() for hit in private_imports(module, path)]
    assert not found, "private names used across modules (make them public, or move the shared thing):\n" + \
        "\n".join(found)


def test_the_check_finds_a_private_import(tmp_path: Path) -> None:
    """The scanner itself: each way of reaching into another module's private names is caught, and a module's
    own private names, public names and dunders are not."""
    source = tmp_path / "probe.py"
    source.write_text("from mirage_kg.store.oxigraph import _OPEN_WRITERS, to_term\n"
                      "from mirage_kg.store import oxigraph\n"
                      "import mirage_kg.graph.core as g\n"
                      "from . import _sibling\n"
                      "from mirage_kg import __version__\n"
                      "oxigraph._pump\ng._private_thing\ng.KnowledgeGraph\n_own = 1\n", encoding="utf-8")
    hits = list(private_imports("mirage_kg.store.probe", source))
    assert [hit.split(": ", 1)[1] for hit in hits] == [
        "from mirage_kg.store.oxigraph import _OPEN_WRITERS", "from mirage_kg.store import _sibling",
        "oxigraph._pump (mirage_kg.store.oxigraph)", "g._private_thing (mirage_kg.graph.core)"]


@pytest.mark.parametrize("module", sorted(name for name in MODULES if name.startswith("mirage_kg")))
def test_mirage_kg_imports_no_reasoner(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    named = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level] + \
        [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [name for name in named if name.split(".")[0] == "mirage_reason"], module
