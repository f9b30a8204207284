"""The package layout's rules, read from the source: no module reaches into another's private names (``from x
import _name``, or ``module._name`` on an imported module), ``mirage_kg`` never imports ``mirage_reason``, no two
modules import each other round a circle, no module is over ``SIZE_BOUND`` lines, no function over
``FUNCTION_BOUND`` lines without the reason in its docstring, and docs/architecture.md names every package."""

from __future__ import annotations

import ast
import re
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


# -- import circles and the size bound ---------------------------------------------------------------------------

#: no module of the packages is longer than this (lines); a module that grows past it is split by job
SIZE_BOUND = 800


def _type_checking_only(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(module: str, path: Path, known: set[str] | frozenset[str], types: bool = False) -> set[str]:
    """The modules of ours ``module`` imports anywhere (at the top, in a function, in a ``try``), and under ``if
    TYPE_CHECKING:`` (types only, never run) with ``types``. ``from a import b`` names ``a.b`` when that is a module,
    else ``a``; the packages above an imported module, which Python imports on the way, are not counted."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking_only(node) and not types:
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, node, path)
                for alias in node.names:
                    if f"{source}.{alias.name}" in known:
                        found.add(f"{source}.{alias.name}")
                    elif source in known:
                        found.add(source)
            for field in ("body", "orelse", "finalbody"):  # functions, classes, try, with, for, if
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(inner)
            for handler in getattr(node, "handlers", ()):
                visit(handler.body)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
    found.discard(module)
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other round a circle (the strongly connected components of more than
    one module, by Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    circles.append(sorted(members))
    return circles


@pytest.mark.parametrize("packages, types", [(PACKAGES, False), (("mirage_kg",), True)],
                         ids=["run-time imports", "mirage_kg with its type-only imports"])
def test_no_import_circle(packages: tuple[str, ...], types: bool) -> None:
    """No circle among the modules' imports, counting those inside functions; in the KG layer, counting the
    imports made for types only too."""
    ours = {name: path for name, path in MODULES.items() if name.split(".")[0] in packages}
    graph = {name: imports_of(name, path, frozenset(ours), types) for name, path in ours.items()}
    circles = import_circles(graph)
    assert not circles, "modules that import each other (move the shared thing into a module both import):\n" + \
        "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    """The scanner and the search themselves: a circle through an import inside a function is found, one through
    ``if TYPE_CHECKING:`` is not, and a chain without a way back is no circle."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("from pkg import b\n", encoding="utf-8")
    b.write_text("def f():\n    from pkg.c import thing\n", encoding="utf-8")
    c.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
                 "try:\n    from pkg.b import x\nexcept ImportError:\n    pass\n", encoding="utf-8")
    known = frozenset({"pkg.a", "pkg.b", "pkg.c"})
    graph = {name: imports_of(name, path, known) for name, path in (("pkg.a", a), ("pkg.b", b), ("pkg.c", c))}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.b"}}
    assert import_circles(graph) == [["pkg.b", "pkg.c"]]
    assert imports_of("pkg.c", c, known, types=True) == {"pkg.a", "pkg.b"}
    assert import_circles({"x": {"y"}, "y": {"z"}, "z": set()}) == []


def oversized(paths: dict[str, Path], bound: int = SIZE_BOUND) -> list[str]:
    """``module: N lines`` for every module longer than ``bound``."""
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in paths.items()}
    return [f"{name}: {n} lines" for name, n in sorted(sizes.items()) if n > bound]


def test_no_module_over_the_size_bound() -> None:
    ours = {name: path for name, path in MODULES.items() if name.split(".")[0] in PACKAGES}
    too_long = oversized(ours)
    assert not too_long, f"modules over {SIZE_BOUND} lines (split them by job):\n" + "\n".join(too_long)


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * (SIZE_BOUND + 1), encoding="utf-8")
    short.write_text("x = 1\n" * SIZE_BOUND, encoding="utf-8")
    assert oversized({"long": long, "short": short}) == [f"long: {SIZE_BOUND + 1} lines"]


#: a function or method longer than this (lines, ``def`` to its end) says why it is one function: its docstring
#: holds ``Kept whole:`` and the reason (a hot loop where a call per row costs, one parser's state machine)
FUNCTION_BOUND = 80
KEPT_WHOLE = "Kept whole:"


def long_functions(path: Path, bound: int = FUNCTION_BOUND) -> Iterator[str]:
    """``file:line name (N lines)`` for every function of ``path`` over ``bound`` lines whose docstring gives no
    reason (``Kept whole:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > bound and KEPT_WHOLE not in (ast.get_docstring(node) or ""):
                yield f"{_shown(path)}:{node.lineno} {node.name} ({lines} lines)"


def test_no_long_function_without_a_reason() -> None:
    found = [hit for name, path in MODULES.items() if name.split(".")[0] in PACKAGES for hit in long_functions(path)]
    assert not found, (f"functions over {FUNCTION_BOUND} lines: split them, or say why not in the docstring "
                       f"('{KEPT_WHOLE} ...'):\n" + "\n".join(found))


def test_the_function_check_finds_a_long_function(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    body = "    x = 1\n" * FUNCTION_BOUND
    source.write_text(f"def long():\n{body}\n\ndef kept():\n    '''{KEPT_WHOLE} one state machine.'''\n{body}\n"
                      f"def short():\n    return 1\n", encoding="utf-8")
    assert [hit.split(" ", 1)[1] for hit in long_functions(source)] == [f"long ({FUNCTION_BOUND + 1} lines)"]


def test_the_architecture_page_names_every_package() -> None:
    """docs/architecture.md has a row for each package of the tree, and names none that is gone."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `((?:mirage_kg|mirage_reason)[\w.]*)` \|", page, re.M))
    packages = {".".join(p.relative_to(ROOT).parent.parts) for package in PACKAGES
                for p in (ROOT / package).rglob("__init__.py")}
    packages = {p for p in packages if not p.startswith("mirage_kg.validation.structural")}  # a family of checks
    assert named == packages, f"missing from the page: {sorted(packages - named)}; gone: {sorted(named - packages)}"
