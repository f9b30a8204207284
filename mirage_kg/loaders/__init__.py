"""Source loaders, one module per format, found by name or by asking each whether it can read a path."""

from __future__ import annotations

from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport
from mirage_kg.loaders.rdf import RdfLoader
from mirage_kg.loaders.triples import TriplesLoader

_REGISTRY: dict[str, type[Loader]] = {}


def register(loader: type[Loader]) -> type[Loader]:
    _REGISTRY[loader.name] = loader
    return loader


for _loader in (TriplesLoader, RdfLoader):
    register(_loader)


def _register_optional() -> None:
    """Loaders for medical sources live in their own modules; import whichever exist."""
    import importlib

    for module, cls in (("umls", "UmlsLoader"), ("snomed", "SnomedLoader"), ("obo", "OboLoader"),
                        ("owl", "OwlLoader"), ("hpoa", "HpoaLoader")):
        try:
            mod = importlib.import_module(f"mirage_kg.loaders.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"mirage_kg.loaders.{module}":
                continue
            raise
        register(getattr(mod, cls))


_register_optional()


def loader_names() -> list[str]:
    return sorted(_REGISTRY)


def get_loader(name: str) -> Loader:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise InputError(f"unknown format {name!r}; known: auto, {', '.join(loader_names())}") from None


def detect(path: Path) -> Loader:
    """The first loader that says it can read ``path`` (folders are asked with an empty head)."""
    if not path.exists():
        raise InputError("no such file or folder", path)
    head = b""
    if path.is_file():
        with open(path, "rb") as handle:
            head = handle.read(4096)
    # Specific formats first, generic RDF and triples last.
    order = [n for n in _REGISTRY if n not in ("rdf", "triples")] + ["rdf", "triples"]
    for name in order:
        if _REGISTRY[name].can_load(path, head):
            return _REGISTRY[name]()
    raise InputError(f"cannot tell the format; use --format with one of: {', '.join(loader_names())}", path)


__all__ = ["LoadOptions", "LoadReport", "Loader", "detect", "get_loader", "loader_names", "register"]
