"""Rows of a delimited file picked by the values of some of their fields, tested on the raw bytes before any row
is decoded or split in Python: an update that needs the rows of a few thousand ids out of millions reads the file
at the speed of C loops (``bytes.split``, set membership and ``compress`` run per block, not per row)."""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterator, Sequence
from itertools import compress, count, repeat
from typing import BinaryIO

#: (column index, the values that pick a row); the column must not be a row's last (its line break rides along)
Criteria = Sequence[tuple[int, Collection[bytes]]]

_BLOCK_BYTES = 1 << 20


def picked_lines(handle: BinaryIO, criteria: Criteria, first_number: int, separator: bytes = b"\t",
                 block_bytes: int = _BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of each line of ``handle``, from where it stands (its line ``first_number``), whose
    column ``index`` holds one of the values of some criterion. The value sets are read afresh for each block, so
    a caller may shrink them as it learns what it no longer needs."""
    live = [(index, values) for index, values in criteria]
    if not live:
        return
    splits = max(index for index, _ in live) + 1
    number = first_number
    while True:
        block = handle.readlines(block_bytes)
        if not block:
            return
        fields = list(map(bytes.split, block, repeat(separator), repeat(splits)))
        try:
            flags: bytes | None = None
            for index, values in live:
                if not values:
                    continue
                hits = map(values.__contains__, map(operator.itemgetter(index), fields))
                flags = bytes(hits) if flags is None else bytes(map(operator.or_, flags, hits))
        except IndexError:  # a short row (blank, cut off): test this block row by row
            flags = bytes(any(len(row) > index and row[index] in values for index, values in live)
                          for row in fields)
        if flags is not None:
            yield from compress(zip(count(number), block), flags)
        number += len(block)
