"""``load --update`` for line-based sources: only the rows that changed between the previous release's file and
the new one are parsed and applied, instead of regenerating the whole release.

One pass over each file hashes its lines (a 64-bit digest a line in memory, never the text); the lines of one file
whose digest the other lacks are the changed rows. A loader opts in with ``row_triples`` (a graph is the union of
its rows' triples), ``triple_keys`` and ``rows_naming``: the triples of the removed and added rows are the
candidates, and since an unchanged row may make a candidate too (an entity still named elsewhere), the unchanged
rows that may make one (a cheap test of names) run through the loader as well and cancel it. The result
is the difference a whole-release compare finds, as long as the graph holds what the previous file loaded into it
(checked by the file's recorded SHA-256 and load options); otherwise the caller compares the whole release."""

from __future__ import annotations

import hashlib
import io
import os
from array import array
from collections.abc import Iterable, Iterator
from itertools import accumulate, compress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import LoadOptions, LoadReport, Problem, RowsNeedWholeRelease
from mirage_kg.loaders.rows.hygiene import MAX_LINE_BYTES, UTF8_BOM, check_encoding, decoded_row
from mirage_kg.releases.diff import TripleDifference, parse_lines
from mirage_kg.releases.provenance import ReleaseInfo, file_hashes, remember_hash
from mirage_kg.index.sorted_arrays import held_in

#: past this share of changed rows (and this many: the changed rows' triples are held in memory) the
#: whole-release compare (bounded memory, sorted runs) is the better way
MAX_CHANGED_SHARE = 0.2
MAX_CHANGED_IN_MEMORY = 200_000


@dataclass(frozen=True)
class Scope:
    """How an update's difference was found, for the user: ``source lines`` or ``whole release`` (and why)."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def supports_rows(loader: Any, path: Path | None = None, options: LoadOptions | None = None) -> bool:
    """Whether ``loader`` can say what rows make (and, for ``path``, whether its rows stand for triples)."""
    if not all(hasattr(loader, name) for name in ("row_triples", "triple_keys", "rows_naming")):
        return False
    applies = getattr(loader, "rows_apply", None)
    return applies is None or path is None or options is None or applies(path, options)


def previous_file(previous: ReleaseInfo | None, path: Path, options: LoadOptions,
                  recorded: dict[str, Any], loader: Any = None) -> tuple[Path | None, str]:
    """The previous release's file when a row difference can stand for the graph's: still where it was loaded
    from, unchanged since (its recorded SHA-256), loaded with the same options; else None and why not."""
    if previous is None:
        return None, "the graph has no release record"
    old = Path(previous.path)
    if not path.is_file():
        return None, f"{path} is not a single file"
    if not old.is_file():
        return None, f"the previous release's file {old} is not there any more"
    applies = getattr(loader, "rows_apply", None) if loader is not None else None
    if applies is not None and not applies(old, options):
        return None, f"the previous release's file {old} is not line-based"
    if previous.options != recorded:
        return None, "the previous release was loaded with other options"
    digest = previous.files.get(old.name)
    if digest is None or file_hashes(old).get(old.name) != digest:
        return None, f"the previous release's file {old} changed since it was loaded (SHA-256)"
    return old, ""


@dataclass
class RowChanges:
    removed: list[tuple[int, bytes]]
    added: list[tuple[int, bytes]]
    kept: bytearray  #: one flag per line of the new file: 1 when the old file has the same line
    lines: int


@dataclass(frozen=True)
class LineDigests:
    """One read of a file: a 64-bit digest of each line (8 bytes a line, never the text), where each line starts
    (and the file's end), and the file's SHA-256 (the release record's hash, from the same read)."""

    path: Path
    digests: array[int]
    offsets: array[int]
    sha256: str


def line_digests(path: Path) -> LineDigests:
    """The digests, offsets and SHA-256 of ``path``'s lines (split after each ``\\n``, as iterating the file does)."""
    # every loop here runs in C (map, BytesIO.readlines, accumulate): a few seconds for millions of lines
    sha = hashlib.sha256()
    digests, lengths = array("q"), array("q")
    carry = b""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
            lines = io.BytesIO(carry + block).readlines()
            carry = lines.pop() if not lines[-1].endswith(b"\n") else b""
            digests.extend(map(hash, lines))
            lengths.extend(map(len, lines))
    if carry:  # a last line without its line break
        digests.append(hash(carry))
        lengths.append(len(carry))
    remember_hash(path, sha.hexdigest())
    return LineDigests(path, digests, array("q", accumulate(lengths, initial=0)), sha.hexdigest())


def row_changes(old: Path | LineDigests, new: Path | LineDigests) -> RowChanges:
    """The lines only in ``old`` (removed) and only in ``new`` (added), with their numbers, and which lines of
    ``new`` the old file has too (from ``line_digests``, made here for a path)."""
    import numpy as np  # a dependency, imported here: ``import mirage_kg`` stays light

    old = old if isinstance(old, LineDigests) else line_digests(old)
    new = new if isinstance(new, LineDigests) else line_digests(new)
    old_digests = np.frombuffer(old.digests, dtype=np.int64) if len(old.digests) else np.zeros(0, np.int64)
    new_digests = np.frombuffer(new.digests, dtype=np.int64) if len(new.digests) else np.zeros(0, np.int64)
    # sorted arrays, not Python sets: the digests only one file has come from a merge of the two sorted files
    # (ascending needles: cheap), then each file's lines are tested against those few
    old_sorted, new_sorted = np.sort(old_digests), np.sort(new_digests)
    only_new = new_sorted[~held_in(new_sorted, old_sorted)]
    only_old = old_sorted[~held_in(old_sorted, new_sorted)]
    added_at, removed_at = _found_among(new_digests, only_new), _found_among(old_digests, only_old)
    kept = bytearray((~added_at).view(np.uint8).tobytes())
    added = _lines_at(new, np.flatnonzero(added_at).tolist())  # in file order
    removed = _lines_at(old, np.flatnonzero(removed_at).tolist())
    return RowChanges(removed, added, kept, len(kept))


#: the low bits of a digest that index ``_found_among``'s table (4 MiB, held in cache as millions are tested)
_TABLE_BITS = 22


def _found_among(digests: Any, few_sorted: Any) -> Any:
    """``held_in`` for a few sorted digests: a table of their low bits lets through the few that may match
    (a random binary search a digest would miss the cache), and only those are searched."""
    import numpy as np

    found = np.zeros(len(digests), dtype=bool)
    if not len(few_sorted):
        return found
    mask = (1 << _TABLE_BITS) - 1
    table = np.zeros(1 << _TABLE_BITS, dtype=bool)
    table[few_sorted & mask] = True
    maybe = np.flatnonzero(table[digests & mask])
    found[maybe] = held_in(digests[maybe], few_sorted)
    return found


def _lines_at(file: LineDigests, indexes: Iterable[int]) -> list[tuple[int, bytes]]:
    """(line number, raw line) of the lines at these 0-based indexes, read where they lie (not the whole file)."""
    offsets = file.offsets
    with open(file.path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        return [(index + 1, os.pread(fd, offsets[index + 1] - offsets[index], offsets[index])) for index in indexes]


def _plain(path: Path) -> bool:
    """Whether the file is ASCII without spaces or carriage returns (its rows' fields need no normalising)."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            if not block.isascii() or b" " in block or b"\r" in block:
                return False
    return True


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return True
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"


def _first_row(path: Path) -> tuple[int, bytes]:
    """The first row that is not blank or a comment (a header, if the file has one), with its number."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            text = raw.removeprefix(UTF8_BOM) if number == 1 else raw
            if text.strip() and not text.startswith(b"#"):
                return number, text
    return 0, b""


def _decoded(rows: Iterable[tuple[int, bytes]], path: Path, problem: Problem) -> Iterator[tuple[int, str]]:
    for number, raw in rows:
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"line longer than {MAX_LINE_BYTES:,} bytes: not a text file of this format", path, number)
        text = decoded_row(raw.removeprefix(UTF8_BOM) if number == 1 else raw, number, path, problem)
        if text is not None:
            yield number, text.rstrip("\r\n")


def row_difference(loader: Any, old: Path, new: Path, options: LoadOptions,
                   report: LoadReport) -> tuple[TripleDifference | None, Scope]:
    """The triples removed and added from the old file's graph to the new file's, from the changed rows; None
    (and why, in the scope) when this file pair needs the whole-release compare."""
    with open(new, "rb") as handle:
        check_encoding(new, handle.read(4096))
    if new.stat().st_size == 0:
        return None, Scope("whole release", "the new file is empty")
    if not (_ends_with_newline(old) and _ends_with_newline(new)):
        return None, Scope("whole release", "a file ends without a line break")
    first, old_first = _first_row(new), _first_row(old)
    header = first[0] if first[0] and _is_header(loader, first[1]) else 0
    if old_first != first and (header or _is_header(loader, old_first[1])):
        return None, Scope("whole release", "a header row came or went")
    changes = row_changes(old, new)
    changed = len(changes.removed) + len(changes.added)
    if changed > max(MAX_CHANGED_SHARE * changes.lines, MAX_CHANGED_IN_MEMORY):
        return None, Scope("whole release", f"{changed:,} of {changes.lines:,} rows changed")
    quiet = Problem(LoadOptions(lenient=True), LoadReport())  # rows the previous load kept made triples; others none
    try:
        added = _triples(loader.row_triples(_decoded(changes.added, new, Problem(options, report)), new, options,
                                            Problem(options, report), first_rows=False))
        removed = _triples(loader.row_triples(_decoded(changes.removed, old, quiet), old, options, quiet,
                                              first_rows=False))
    except RowsNeedWholeRelease as exc:
        return None, Scope("whole release", str(exc))
    candidates = added ^ removed
    still = _made_by_unchanged_rows(loader, new, changes.kept, candidates, options, quiet, header)
    difference = TripleDifference(removed=parse_lines(sorted(removed - added - still)),
                                  added=parse_lines(sorted(added - removed - still)))
    return difference, Scope("source lines", f"{len(changes.removed):,} rows removed and {len(changes.added):,} "
                                             f"added of {changes.lines:,} (only those parsed)")


def _made_by_unchanged_rows(loader: Any, new: Path, kept: bytearray, candidates: set[str], options: LoadOptions,
                            quiet: Problem, header: int) -> set[str]:
    """The candidates some unchanged row of the new file makes as well. Each candidate has keys (what a row must
    name to make it: ``triple_keys``); one scan tests each unchanged row against the keys still open
    (``rows_naming``), runs the rows that pass through the loader, and closes a key once its candidates are all
    made, so an entity named by a thousand rows costs one."""
    open_triples: dict[Any, set[str]] = {}
    for line in candidates:
        for key in loader.triple_keys(line, options):
            open_triples.setdefault(key, set()).add(line)
    keys = set(open_triples)
    made: set[str] = set()
    if not keys:
        return made
    with open(new, "rb") as handle:
        unchanged = compress(enumerate(handle, 1), kept)
        for number, raw in loader.rows_naming(unchanged, keys, _plain(new)):  # reads ``keys`` as it shrinks
            if number == header:
                continue
            try:
                made_here = _triples(loader.row_triples(_decoded([(number, raw)], new, quiet), new, options, quiet,
                                                        first_rows=False)) & candidates
            except RowsNeedWholeRelease:
                continue  # a blank node's triple is no candidate (changed rows hold none)
            for line in made_here:
                if line in made:
                    continue
                made.add(line)
                for key in loader.triple_keys(line, options):
                    waiting = open_triples.get(key)
                    if waiting is not None:
                        waiting.discard(line)
                        if not waiting:
                            keys.discard(key)
            if not keys:
                break
    return made


def _is_header(loader: Any, raw: bytes) -> bool:
    check = getattr(loader, "is_header", None)
    return bool(check and check(raw.decode("utf-8", "replace").rstrip("\r\n")))


def _triples(chunks: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for chunk in chunks:
        out.update(chunk.splitlines())
    return out
