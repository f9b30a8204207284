"""Rows picked by the values of some of their fields, as ``row_pick.picked_lines`` picks them, tested with numpy
over whole blocks of the file, so that no Python object is made for a line that is not picked (SNOMED CT's scoped
update reads its base files this way).

Per block: the line breaks and separators are found as arrays; when every line holds the same number of
separators (a well-formed RF2 block), each criterion's field is turned into a 64-bit key per line (its last 24
bytes, read in place as three words, and its length) and ``numpy.isin`` against the wanted values' keys marks the
candidates. A candidate is then checked exactly on its bytes (two fields may share a key). A block whose rows
differ in width, the file's last block, values longer than a key covers, or no numpy: ``picked_lines`` reads
that block (or the file); the lines are the same either way, only the speed differs."""

from __future__ import annotations

import io
from collections.abc import Collection, Iterator
from typing import Any, BinaryIO

from mirage_kg.loaders.rows.row_pick import Criteria, picked_lines
from mirage_kg.index.sorted_arrays import held_in

_BLOCK_BYTES = 8 << 20
#: the bytes of a field's end that its key covers, and the zero bytes before a block so that every field has them
_PAD = 24
#: odd 64-bit multipliers that mix a field's three words and its length into one key
_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD)
#: masks keeping the top n bytes of a little-endian word (the n bytes that end where the word ends), n = 0..8
_KEEP_TOP = [0] + [(~((1 << (64 - 8 * n)) - 1)) & 0xFFFFFFFFFFFFFFFF for n in range(1, 9)]
#: masks keeping the low n bytes of a little-endian word (the n bytes it starts with), n = 0..8
_KEEP_LOW = [(1 << (8 * n)) - 1 for n in range(9)]


def picked_id_lines(handle: BinaryIO, criteria: Criteria, first_number: int, separator: bytes = b"\t",
                    block_bytes: int = _BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """``picked_lines``, faster: (line number, raw line) of each line of ``handle`` from where it stands (its line
    ``first_number``) whose column ``index`` holds one of the values of some criterion. The value sets are read
    afresh for each block, as ``picked_lines`` reads them."""
    if not criteria:
        return
    try:
        import numpy as np
    except ImportError:  # the plain byte-level picker gives the same lines
        yield from picked_lines(handle, criteria, first_number, separator)
        return
    wanted = _WantedKeys(np)
    number = first_number
    rest = b""
    while True:
        chunk = handle.read(block_bytes)
        if not chunk and not rest:
            return
        # one copy: the zero bytes every field's key may reach back into, the block, a word's worth after it
        buffer = b"".join((bytes(_PAD), rest, chunk, bytes(8)))
        text_end = len(buffer) - 8
        end = buffer.rfind(b"\n", _PAD, text_end) + 1 if chunk else text_end
        if end == 0:  # one line longer than the block: read on
            rest = buffer[_PAD:text_end]
            continue
        rest = buffer[end:text_end]
        live = [(index, values) for index, values in criteria if values]
        keys = [wanted.of(values) for _, values in live]
        table = _regular_block(np, buffer, end, separator, max(index for index, _ in live)) \
            if live and chunk else None
        if table is None:
            # the file's last block (it may end without a line break) or rows of differing widths: the plain
            # picker reads this block
            block = buffer[_PAD:end]
            if live:
                yield from picked_lines(io.BytesIO(block), live, number, separator)
            number += block.count(b"\n") + (not block.endswith(b"\n"))
            if not chunk:
                return
            continue
        words, ends, separators = table
        starts = np.empty_like(ends)
        starts[0] = _PAD
        starts[1:] = ends[:-1] + 1
        hits = np.zeros(len(ends), dtype=bool)
        for (index, _), sorted_keys in zip(live, keys):
            first = starts if index == 0 else separators[:, index - 1] + 1
            found = _field_keys(np, words, first, separators[:, index])
            hits |= held_in(found, sorted_keys)
        splits = max(index for index, _ in live) + 1
        for line in np.flatnonzero(hits).tolist():
            raw = buffer[starts[line]:ends[line] + 1]
            fields = raw.split(separator, splits)
            if any(len(fields) > index and fields[index] in values for index, values in live):
                yield number + line, raw
        number += len(ends)


class _WantedKeys:
    """Each criterion's values as a sorted array of their ``_field_keys``, made again only when the set changes
    size (callers shrink or grow the sets they pass between blocks)."""

    def __init__(self, np: Any) -> None:
        self.np = np
        self.made: dict[int, tuple[int, Any]] = {}

    def of(self, values: Collection[bytes]) -> Any:
        held = self.made.get(id(values))
        if held is not None and held[0] == len(values):
            return held[1]
        np = self.np
        listed = list(values)
        buffer = b"".join((bytes(_PAD), *listed, bytes(8)))
        lengths = np.fromiter(map(len, listed), dtype=np.int64, count=len(listed))
        ends = np.cumsum(lengths) + _PAD
        array = np.unique(_field_keys(np, _words(np, buffer), ends - lengths, ends))
        self.made[id(values)] = (len(values), array)
        return array


def _words(np: Any, buffer: bytes) -> Any:
    """Every byte offset of ``buffer`` (``_PAD`` zero bytes, the text, 8 more) as the start of a 64-bit word."""
    padded = np.frombuffer(buffer, dtype=np.uint8)
    return np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))


def _regular_block(np: Any, buffer: bytes, end: int, separator: bytes,
                   last_index: int) -> tuple[Any, Any, Any] | None:
    """For the block ``buffer[_PAD:end]``: the buffer's words (``_words``), the line ends and a (lines, separators)
    array of separator positions (offsets into ``buffer``), when every line holds the same number of separators
    and more than ``last_index`` (a criterion's column is never a row's last); None otherwise."""
    data = np.frombuffer(buffer, dtype=np.uint8, count=end - _PAD, offset=_PAD)
    ends = np.flatnonzero(data == 10) + _PAD
    positions = np.flatnonzero(data == separator[0]) + _PAD
    lines = len(ends)
    if not lines or len(positions) % lines:
        return None
    per_line = len(positions) // lines
    if per_line <= last_index:
        return None
    table = positions.reshape(lines, per_line)
    # each line's separators lie between the line before's end and its own end
    before = np.empty_like(ends)
    before[0] = _PAD - 1
    before[1:] = ends[:-1]
    if not (np.all(table[:, 0] > before) and np.all(table[:, -1] < ends)):
        return None
    return _words(np, buffer), ends, table


def _field_keys(np: Any, words: Any, starts: Any, ends: Any) -> Any:
    """A 64-bit key of the field between each ``starts[i]`` and ``ends[i]`` (exclusive offsets into a buffer that
    has ``_PAD`` bytes before its first field): its last 24 bytes as three words read in place (``words`` views
    every byte offset as the start of a little-endian word), the bytes before the field masked off, and for a
    longer field up to 8 bytes of its start, mixed with its length. Equal fields have equal keys; a key may be shared by two
    fields, so only an exact byte test afterwards decides."""
    lengths = ends - starts
    key = lengths.astype(np.uint64) * np.uint64(_MIX[3])
    keep_top = np.array(_KEEP_TOP, dtype=np.uint64)
    for word in range(3):
        kept = np.clip(lengths - 8 * word, 0, 8)
        if not kept.any():
            break
        key ^= (words[ends - 8 * (word + 1)] & keep_top[kept]) * np.uint64(_MIX[word])
    # a longer field (a UUID's refset member id) differs most at its start: its first bytes join the key
    beyond = np.clip(lengths - _PAD, 0, 8)
    if beyond.any():
        keep_low = np.array(_KEEP_LOW, dtype=np.uint64)
        key ^= (words[starts] & keep_low[beyond]) * np.uint64(_MIX[4])
    return key
