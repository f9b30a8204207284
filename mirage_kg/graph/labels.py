"""Label text: which of a node's labels it shows (English, then untagged, then any), the label predicates read, and
a relation's fallback name, inverse reading and sentence templates when its declaration gives none."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_PREF, compress


def label_rank(lang: str | None) -> tuple[int, str]:
    """How a label's language ranks (smaller first): English, then untagged, then any, by tag; then the text."""
    low = (lang or "").lower()
    return (0 if low == "en" or low.startswith("en-") else 1 if not low else 2), low


def pick_label(values: Iterable[tuple[str, str | None]]) -> str | None:
    """The preferred one of several ``(text, language)`` labels: English, then untagged, then any; ties by text."""
    best = min(values, key=lambda item: (*label_rank(item[1]), item[0]), default=None)
    return best[0] if best is not None else None


#: the label predicates ``Graph.labels`` reads, first that a node has (its values then chosen by ``pick_label``)
LABEL_PREDICATES = (SKOS_PREF, RDFS_LABEL)


def readable_name(iri: str) -> str:
    """A relation's fallback label: its local name with ``_`` and camelCase spaced, or its CURIE."""
    curie = compress(iri)
    local = curie.split(":", 1)[1] if curie != iri else re.split(r"[#/]", iri.rstrip("/#"))[-1]
    if not re.search(r"[A-Za-z]{2}", local):
        return curie
    local = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", local.replace("_", " ").replace("-", " "))
    return " ".join(local.split()).lower() if local.strip() else curie


def safe_template(template: str | None) -> str | None:
    """A template is used only if its placeholders are exactly ``{subject}``/``{object}``: data must not steer
    ``str.format`` (attribute access, positional fields) or make it raise."""
    if not template:
        return None
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return None
    if any(name not in ("subject", "object") or spec or conv for name, spec, conv in fields):
        return None
    return template


def guess_inverse(label: str) -> str | None:
    """An inverse reading for a label with no declared one: "has part" -> "is part of", "part of" -> "has part"."""
    words = label.split()
    if len(words) >= 2 and words[0].lower() == "has":
        return "is " + " ".join(words[1:]) + " of"
    if len(words) >= 3 and words[0].lower() == "is" and words[-1].lower() == "of":
        return "has " + " ".join(words[1:-1])
    if len(words) >= 2 and words[-1].lower() == "of" and words[0].lower() not in ("is", "are"):
        return "has " + " ".join(words[:-1])
    return None
