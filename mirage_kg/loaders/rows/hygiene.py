"""Input hygiene shared by every loader: what a text source file must be before any of its rows is believed.

A file in UTF-16/32 or binary data is refused up front with what it looks like and how to convert it; a UTF-8 BOM
is dropped; a line holding a NUL or another C0 control byte, a line of bad UTF-8 and a last line cut off without
its line break are row problems (an ``InputError`` naming file and line, or a counted skip under ``--lenient``);
a line longer than ``MAX_LINE_BYTES`` stops the load (``/dev/zero`` must not fill the memory); a file that cannot be
read (permissions, a symlink loop, a folder) is an ``InputError``, never "absent"."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from mirage_kg.errors import InputError
from mirage_kg.loaders.rows.row_pick import Criteria, picked_lines

#: the longest line any source format has a reason to hold (a UMLS definition is a few kB)
MAX_LINE_BYTES = 8 << 20
UTF8_BOM = b"\xef\xbb\xbf"
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"), (b"\xff\xfe", "UTF-16LE"),
         (b"\xfe\xff", "UTF-16BE"))
# C0 controls other than TAB, LF and CR, and DEL: no source format carries them in a field.
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: the same bytes, and CR, for a whole block's check (``bytes.translate`` deletes them 5x faster than the search)
_BLOCK_UNCLEAN = bytes([*range(0x09), 0x0b, 0x0c, 0x0d, *range(0x0e, 0x20), 0x7f])


class RowProblem(Protocol):
    def __call__(self, reason: str, path: str | Path, line: int | None, detail: str = "") -> None: ...


def open_input(path: Path) -> io.BufferedReader:
    """The file opened for reading; a file that cannot be read is an ``InputError`` saying why."""
    try:
        if path.is_dir():
            raise InputError("is a folder, not a file (give the file, or the release folder with its --format)", path)
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from exc


def readable_file(path: Path) -> bool:
    """Whether an optional release file is there. Absent is False; there but unreadable (a symlink loop, mode 000,
    a folder in its place) is an ``InputError``, so a broken file is never mistaken for a missing one."""
    if not os.path.lexists(path):
        return False
    try:
        if not path.is_file():
            raise InputError("is not a regular file (a broken or looping symlink, or a folder?)", path)
        with open(path, "rb"):
            return True
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from exc


def check_encoding(path: str | Path, head: bytes) -> None:
    """Refuse UTF-16/32 (with or without a BOM) and binary data, from the first bytes of the file."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            raise InputError(f"the file is {name} (it starts with a {name} byte-order mark); source files must be "
                             f"UTF-8: convert it with `iconv -f {name} -t UTF-8`", path, 1)
    sample = head[:4096]
    if b"\x00" not in sample:
        return
    guess = _nul_pattern(sample)
    if guess is not None:
        raise InputError(f"the file looks like {guess} without a byte-order mark (NUL bytes between the characters); "
                         f"source files must be UTF-8: convert it with `iconv -f {guess} -t UTF-8`", path, 1)
    if sample.count(0) * 10 > len(sample):
        raise InputError("binary data, not a text file (it is full of NUL bytes)", path, 1)


def _nul_pattern(sample: bytes) -> str | None:
    """UTF-16/32 text in a Latin script has its NUL bytes at fixed positions of each code unit."""
    def zero_share(step: int, offset: int) -> float:
        part = sample[offset::step]
        return part.count(0) / len(part) if part else 0.0

    if len(sample) >= 16:
        shares = [zero_share(4, i) for i in range(4)]
        if min(shares[1:]) > 0.9 and shares[0] < 0.1:
            return "UTF-32LE"
        if min(shares[:3]) > 0.9 and shares[3] < 0.1:
            return "UTF-32BE"
    even, odd = zero_share(2, 0), zero_share(2, 1)
    if odd > 0.3 and even < 0.05:
        return "UTF-16LE"
    if even > 0.3 and odd < 0.05:
        return "UTF-16BE"
    return None


_TRUNCATED = ("the file ends inside a row (no line break at the end): a cut-off download? Add the line break if the "
              "row is whole")


def read_lines(path: Path, problem: RowProblem, *, keep_ends: bool = False, final_newline: bool = True,
               repair_utf8: bool = False, max_line: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each clean line, the line break removed unless ``keep_ends``. With
    ``final_newline`` (every line format) a last line without its line break is a cut-off row, not data. With
    ``repair_utf8`` a bad UTF-8 line that the (lenient) problem lets through is kept with U+FFFD in place.

    Lines are numbered as in the file even when some are dropped (lenient), so later messages stay true."""
    max_line = max_line or MAX_LINE_BYTES
    with open_input(path) as handle:
        head = handle.peek(4096)[:4096] if hasattr(handle, "peek") else b""
        check_encoding(path, head)
        readline = handle.readline
        control = CONTROL_BYTES.search
        number = 0
        while True:
            try:
                raw = readline(max_line + 1)
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror or exc}", path, number + 1) from exc
            if not raw:
                return
            number += 1
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[3:]
            if raw[-1:] != b"\n":
                if len(raw) > max_line:
                    raise InputError(f"line longer than {max_line:,} bytes: not a text file of this format", path,
                                     number)
                if final_newline:
                    problem("truncated last line", path, number, _TRUNCATED)
                    return
            if control(raw) is not None:
                text = decoded_row(raw, number, path, problem, repair_utf8)  # says which byte
            else:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = decoded_row(raw, number, path, problem, repair_utf8)
            if text is not None:
                yield number, (text if keep_ends else text.rstrip("\r\n"))


#: bytes read at a time by ``read_byte_blocks`` (its lines are checked a block at once)
BLOCK_BYTES = 1 << 20


def read_byte_blocks(path: Path, problem: RowProblem, *, block_bytes: int = BLOCK_BYTES,
                     max_line: int | None = None) -> Iterator[tuple[int, bytes, int]]:
    """The lines ``read_lines`` reads, a block at a time: (number of the block's first line, the lines as UTF-8
    bytes, each ending with ``\\n`` (a CR before it removed) and holding no control byte, the bytes of the file they took). The lines
    of a block are numbered on from the first; a block with a control byte, a CR or bad UTF-8 in it is read line
    by line as ``read_lines`` reads it, each good line its own block, so every message names the line and a
    dropped line (lenient) keeps the numbering.

    Why: a loader's hot loop over millions of rows pays per line for ``readline``, the control-byte search and the
    decode; a block pays each once for a megabyte of lines (2026-12-01: 0.62 -> 0.14 CPU s for 850k MRREL rows),
    and a loader may work on its bytes whole (the UMLS loader's MRREL edges)."""
    max_line = max_line or MAX_LINE_BYTES
    block_bytes = min(block_bytes, max_line)  # so a line too long always spans reads (the carry is checked)
    with open_input(path) as handle:
        check_encoding(path, handle.peek(4096)[:4096])
        number = 0  # lines before the carried bytes
        carry = b""
        first = True
        while True:
            try:
                data = handle.read(block_bytes)
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror or exc}", path, number + 1) from exc
            if not data:
                break
            if first:
                data, first = data.removeprefix(UTF8_BOM), False
            if carry:
                long = len(carry) > max_line - block_bytes and data.find(b"\n") + len(carry) > max_line
                data = carry + data
                if long:  # the carried line ends here, longer than a line may be
                    raise InputError(f"line longer than {max_line:,} bytes: not a text file of this format", path,
                                     number + 1)
            end = data.rfind(b"\n") + 1
            block, carry = data[:end], data[end:]
            if len(carry) > max_line:
                raise InputError(f"line longer than {max_line:,} bytes: not a text file of this format", path,
                                 number + block.count(b"\n") + 1)
            if not block:
                continue
            clean = block.replace(b"\r\n", b"\n") if b"\r\n" in block else block  # CRLF: the lines read_lines reads
            if len(clean.translate(None, _BLOCK_UNCLEAN)) == len(clean) and (clean.isascii() or _utf8(clean)):
                yield number + 1, clean, len(block)
                number += clean.count(b"\n")
                continue
            for raw in block.split(b"\n")[:-1]:
                number += 1
                text = decoded_row(raw, number, path, problem)
                if text is not None:
                    yield number, text.rstrip("\r").encode("utf-8") + b"\n", len(raw) + 1
        if carry:
            problem("truncated last line", path, number + 1, _TRUNCATED)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_picked_lines(path: Path, problem: RowProblem, pick: Criteria, separator: bytes = b"\t", *,
                      header: Callable[[int, str], None] | None = None, numeric_ids: bool = False,
                      keep: Callable[[bytes], bool] | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines whose fields ``pick`` names (``row_pick``: tested on the raw bytes, the
    other lines skipped unread), each checked as ``read_lines`` checks a line. With ``header`` the first line goes
    to it instead (its number, 0 for an empty file, and its text) and is never picked. ``numeric_ids``: the
    picked values are decimal ids, tested per block with numpy (``id_pick``; the same lines, faster). ``keep``: a
    further test of a picked line's raw bytes (no line it drops is decoded)."""
    with open_input(path) as handle:
        check_encoding(path, handle.peek(4096)[:4096])
        first = 1
        if header is not None:
            line = handle.readline()
            header(1 if line else 0, line.removeprefix(UTF8_BOM).decode("utf-8", "replace").rstrip("\r\n"))
            first = 2
        pick_lines = picked_lines
        if numeric_ids:
            from mirage_kg.loaders.rows.id_pick import picked_id_lines as pick_lines
        rows = pick_lines(handle, pick, first, separator)
        yield from checked_rows(path, problem, rows if keep is None else (row for row in rows if keep(row[1])))


def checked_rows(path: Path, problem: RowProblem, rows: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, str]]:
    """(line number, text) of raw lines of ``path`` taken out of it (picked, or found changed), each checked as
    ``read_lines`` checks a line: a cut-off last line, control bytes, bad UTF-8."""
    for number, raw in rows:
        if raw[-1:] != b"\n":
            problem("truncated last line", path, number, _TRUNCATED)
            return
        text = decoded_row(raw.removeprefix(UTF8_BOM) if number == 1 else raw, number, path, problem)
        if text is not None:
            yield number, text.rstrip("\r\n")


def decoded_row(raw: bytes, number: int, path: str | Path, problem: RowProblem,
                repair_utf8: bool = False) -> str | None:
    """One line's text, checked as ``read_lines`` checks it: a control byte or bad UTF-8 is a row problem (None
    when the lenient problem lets the load go on without the row)."""
    bad = CONTROL_BYTES.search(raw)
    if bad is not None:
        problem("control character", path, number,
                f"byte {raw[bad.start()]:#04x} at column {bad.start() + 1} (NUL and other control bytes are not text)")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem("invalid UTF-8", path, number, f"byte {raw[exc.start]:#04x} at column {exc.start + 1}")
        return raw.decode("utf-8", "replace") if repair_utf8 else None


def checked_bytes(path: Path, problem: RowProblem) -> bytes:
    """A whole (XML) file, with the same checks as ``read_lines``; lenient, a bad UTF-8 line is repaired and a line
    with a control byte blanked, so the parser's line numbers stay those of the file."""
    out: list[bytes] = []
    lines: Iterable[tuple[int, str]] = read_lines(path, problem, keep_ends=True, final_newline=False, repair_utf8=True)
    for number, text in lines:
        while len(out) < number - 1:
            out.append(b"\n")
        out.append(text.encode("utf-8"))
    return b"".join(out)


def looks_like_header(fields: list[str], words: frozenset[str]) -> bool:
    """Whether a first row is column names: every field one of the format's header words."""
    return all(f.strip().lstrip("#").strip().lower().replace(" ", "_") in words for f in fields)



#: the most text an XML file's internal entities may expand to, beyond the file's own size: ``&ns;``-style
#: namespace shortcuts stay far below it, a "billion laughs" (nested entities, 1 KB of file, gigabytes of text)
#: is refused before any parser expands it
ENTITY_EXPANSION_BYTES = 1 << 20
_ENTITY_REF = re.compile(rb"&([A-Za-z_:][\w.:-]*);")


class _PrologRead(Exception):
    """The root element began: the DOCTYPE, with every entity it declares, is behind us."""


def check_xml_entities(path: Path, data: bytes | None = None) -> None:
    """Refuse an XML file (RDF/XML, OWL) whose DOCTYPE declares an external entity (a file or URL a parser could
    be made to read) or internal entities that would expand, over all their uses in the file, to more than
    ``ENTITY_EXPANSION_BYTES`` plus the file's own size. Expat reads the prolog (it stops at the root element);
    the references are then counted, never expanded. ``data``: the file's bytes when already read."""
    head = data[:1 << 16] if data is not None else next(_xml_chunks(path, data), b"")[:1 << 16]
    if b"<!DOCTYPE" not in head:
        return
    declared = _internal_entities(path, data)
    if declared:
        _count_expansion(path, data, declared)


def _xml_chunks(path: Path, data: bytes | None) -> Iterator[bytes]:
    """The file's bytes: ``data`` when already read, else the file a megabyte at a time."""
    if data is not None:
        yield data
        return
    with open_input(path) as handle:
        yield from iter(lambda: handle.read(1 << 20), b"")


def _internal_entities(path: Path, data: bytes | None) -> dict[str, bytes]:
    """Name -> replacement text of the general entities the DOCTYPE declares (read by expat, which stops at the
    root element); an external entity is an ``InputError``."""
    import xml.parsers.expat  # only for a file with a DOCTYPE

    declared: dict[str, bytes] = {}
    external: list[str] = []

    def declaration(name: str, is_parameter: int, value: str | None, base: object, system_id: str | None,
                    public_id: str | None, notation: object) -> None:
        if value is None:
            external.append(f"the DOCTYPE declares the external entity {name} ({system_id or public_id}): a parser "
                            "could be made to read a local file or a URL; external entities are refused")
        elif not is_parameter:
            declared[name] = value.encode("utf-8")

    def root(*_: object) -> None:
        raise _PrologRead

    parser = xml.parsers.expat.ParserCreate()
    parser.EntityDeclHandler = declaration
    parser.StartElementHandler = root
    try:
        for chunk in _xml_chunks(path, data):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except _PrologRead:
        pass
    except xml.parsers.expat.ExpatError:
        pass  # a syntax error: the RDF/XML parser names it with its line
    if external:
        raise InputError(external[0], path)
    return declared


def _count_expansion(path: Path, data: bytes | None, declared: dict[str, bytes]) -> None:
    """Count what the references to ``declared`` entities in the file expand to (never expanding them); past the
    limit, an ``InputError``."""
    sizes: dict[str, int] = {}

    def expanded(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in sizes:
            if name in seen:
                raise InputError(f"the XML entity &{name}; refers to itself", path)
            size = len(declared[name])
            for ref in _ENTITY_REF.finditer(declared[name]):
                inner = ref.group(1).decode("utf-8", "replace")
                if inner in declared:
                    size += expanded(inner, seen | {name}) - len(ref.group(0))
            sizes[name] = size
        return sizes[name]

    limit = ENTITY_EXPANSION_BYTES + (len(data) if data is not None else path.stat().st_size)
    total = 0

    def count(block: bytes) -> None:
        nonlocal total
        for ref in _ENTITY_REF.finditer(block):
            name = ref.group(1).decode("utf-8", "replace")
            if name in declared:
                total += expanded(name)
                if total > limit:
                    raise InputError(f"the file's internal XML entities expand to more than {limit:,} bytes "
                                     f"(&{name}; alone to {expanded(name):,}): refused, as an entity expansion "
                                     "attack (\"billion laughs\") would be", path)

    carry = b""
    for chunk in _xml_chunks(path, data):  # a reference holds no line break: cut each chunk after its last one
        block = carry + chunk
        cut = block.rfind(b"\n") + 1
        count(block[:cut])
        carry = block[cut:] if len(block) - cut <= MAX_LINE_BYTES else block[-256:]
    count(carry)
