"""The numpy row picker (``loaders.id_pick``) yields exactly the lines the byte-level picker (``row_pick``) yields,
whatever the file: regular RF2 blocks, ragged rows, short and blank lines, a last line with no line break, CRLF,
long fields, keys that collide, values that change between blocks, and without numpy."""

from __future__ import annotations

import builtins
import io
import random

import pytest

from mirage_kg.loaders.rows import id_pick
from mirage_kg.loaders.rows.id_pick import picked_id_lines
from mirage_kg.loaders.rows.row_pick import picked_lines


def _both(data: bytes, criteria, block_bytes: int = 1 << 20, first: int = 1):
    plain = list(picked_lines(io.BytesIO(data), criteria, first))
    fast = list(picked_id_lines(io.BytesIO(data), criteria, first, block_bytes=block_bytes))
    return plain, fast


def _rf2(rows: int, seed: int) -> tuple[bytes, list[list[bytes]]]:
    rng = random.Random(seed)
    lines = []
    for n in range(rows):
        ident = str(rng.randrange(10**5, 10**18)).encode()
        uuid = f"{rng.getrandbits(32):08x}-0000-4000-8000-{rng.getrandbits(48):012x}".encode()
        source, target = (str(rng.randrange(100, 10**9)).encode() for _ in range(2))
        lines.append([ident, b"20990131", b"1", uuid, source, target, b"0", b"116680003", b"9000\r\n"])
    return b"".join(b"\t".join(fields) for fields in lines), lines


@pytest.mark.parametrize("block_bytes", [5, 64, 4096, 1 << 20])
def test_regular_rf2_rows_are_picked_as_the_byte_picker_picks_them(block_bytes: int) -> None:
    data, rows = _rf2(3000, 7)
    rng = random.Random(1)
    criteria = [(0, {r[0] for r in rng.sample(rows, 50)}), (3, {r[3] for r in rng.sample(rows, 50)}),
                (4, {r[4] for r in rng.sample(rows, 200)} | {b"0" + rows[0][4]}), (5, set())]
    plain, fast = _both(b"id\theader\n" + data, criteria, block_bytes)
    assert len(plain) >= 250 and fast == plain


def test_awkward_files_give_the_same_lines() -> None:
    cases = [b"1\t2\t3\n01\t2\t3\n", b"1\t2\t3\n1\t2\n1\t2\t3", b"", b"\n\n1\t2\t3\r\n",
             b"x1\t2\t3\n1\tab\t3\n12345678901234567890123456789\t2\t3\n2345678901234567890123456789\t2\t3\n",
             b"1\t2\t3\n" * 1000 + b"1\t2\t3", b"1\t2\t3\t\n1\t2\t3\n", b"\t\t\n1\t\t\n", b"1\t2\n" * 50]
    criteria = [[(0, {b"1"})], [(1, {b"2"}), (0, {b"12345678901234567890123456789"})], [(0, {b"x1"})],
                [(1, {b"ab"}), (0, {b"1"})], [(0, set())], [], [(1, {b"2", b"3"})], [(0, {b""})]]
    for data in cases:
        for criterion in criteria:
            for block_bytes in (3, 7, 64, 1 << 20):
                plain, fast = _both(data, criterion, block_bytes, first=5)
                assert fast == plain, (data, criterion, block_bytes)


def test_colliding_keys_are_told_apart_by_their_bytes() -> None:
    # equal last 24 bytes and length: the same key, told apart only by the exact test
    tail = b"-0000-4000-8000-000000000000"
    data = b"".join(b"%08d%s\tx\ty\n" % (n, tail) for n in range(500))
    wanted = {b"%08d%s" % (n, tail) for n in (3, 250)}
    plain, fast = _both(data, [(0, wanted)], 4096)
    assert [n for n, _ in fast] == [4, 251] and fast == plain


def test_values_read_afresh_per_block() -> None:
    data, rows = _rf2(2000, 3)
    wanted = {r[4] for r in rows}

    def shrinking():
        for number, line in picked_id_lines(io.BytesIO(data), [(4, wanted)], 1, block_bytes=8192):
            wanted.clear()  # a caller that needs nothing more after the first block
            yield number
    got = list(shrinking())
    assert got and max(got) < 200  # only the first block's lines


def test_without_numpy_the_byte_picker_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_numpy(name, *args, **kwargs):
        if name == "numpy":
            raise ImportError("no numpy here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numpy)
    data, rows = _rf2(300, 5)
    criteria = [(4, {r[4] for r in rows[::7]})]
    plain, fast = _both(data, criteria, 64)
    assert fast == plain and len(fast) >= 40


def test_regular_blocks_go_through_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = id_pick._field_keys

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(id_pick, "_field_keys", counting)
    data, rows = _rf2(3000, 9)
    plain, fast = _both(data, [(0, {rows[10][0], rows[2000][0]})], 8192)
    assert fast == plain and len(fast) == 2 and len(calls) > 10
