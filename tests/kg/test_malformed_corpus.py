"""A corpus of malformed inputs generated from the shipped fixtures (encodings, BOM, NUL and control bytes, header
rows, truncation, shuffled columns, empty and header-only files, huge lines, bad UTF-8), run over every loader.

Each variant must end one of three ways: loaded exactly as the clean fixture (a UTF-8 BOM, CRLF line breaks: the
bytes are wrong, the data is not), or a clear ``InputError`` naming the file (and the line, for a row problem) with
the store byte-identical, and under ``--lenient`` either that error again or a load whose every skip is counted and
whose data holds none of the damage. Never a traceback, never silent acceptance."""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.errors import InputError
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.loaders.rows import hygiene
from mirage_kg.loaders.base import Problem
from mirage_kg.store import OxigraphStore, ensure_schema

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HUGE_CAP = 64 << 10  # the line cap for this test (the real one is 8 MiB): keeps the huge lines small
SCT = "Snapshot/Terminology/"
SCT_CONCEPT = SCT + "sct2_Concept_Snapshot_INT_20990131.txt"
SCT_DESC = SCT + "sct2_Description_Snapshot-en_INT_20990131.txt"
SCT_LANG = "Snapshot/Refset/Language/der2_cRefset_LanguageSnapshot-en_INT_20990131.txt"

# target -> (format, fixture folder or file, the file inside it to damage, kind of file)
TARGETS: dict[str, tuple[str, str, str, str]] = {
    "triples": ("triples", "core/small.tsv", "", "tsv"),
    "rdf": ("rdf", "core/tiny.ttl", "", "xml-like"),
    "mrconso": ("umls", "umls", "META/MRCONSO.RRF", "rrf"),
    "mrrel": ("umls", "umls", "META/MRREL.RRF", "rrf"),
    "sct-concept": ("snomed", "snomed", SCT_CONCEPT, "rf2"),
    "sct-description": ("snomed", "snomed", SCT_DESC, "rf2"),
    "sct-language": ("snomed", "snomed", SCT_LANG, "rf2"),
    "obo": ("obo", "obo/mini.obo", "", "obo"),
    "owl": ("owl", "owl/mini.owl", "", "xml-like"),
    "hpoa": ("hpoa", "hpoa/mini.hpoa", "", "hpoa"),
}
LINE_FORMATS = {"tsv", "rrf", "rf2", "obo", "hpoa"}


def _middle(data: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    lines = data.splitlines(keepends=True)
    at = len(lines) // 2
    lines[at] = edit(lines[at])
    return b"".join(lines)


def _inject(byte: bytes) -> Callable[[bytes], bytes]:
    return lambda data: _middle(data, lambda line: line[:3] + byte + line[3:])


def _swap_columns(sep: bytes) -> Callable[[bytes], bytes]:
    def swap(data: bytes) -> bytes:
        out = []
        for line in data.splitlines(keepends=True):
            if sep in line and not line.startswith(b"#"):
                cells = line.rstrip(b"\r\n").split(sep)
                cells[0], cells[1] = cells[1], cells[0]
                line = sep.join(cells) + b"\n"
            out.append(line)
        return b"".join(out)
    return swap


def _header_only(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    keep = [line for line in lines if line.startswith(b"#")][:8]
    first_data = next(line for line in lines if not line.startswith(b"#"))
    return b"".join(keep) + first_data


def _drop_header(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if not line.startswith(b"#"))
    return b"".join(lines[:at] + lines[at + 1:])


GENERIC: dict[str, Callable[[bytes], bytes]] = {
    "utf16le-no-bom": lambda d: d.decode().encode("utf-16-le"),
    "utf16be-no-bom": lambda d: d.decode().encode("utf-16-be"),
    "utf16-bom": lambda d: d.decode().encode("utf-16"),
    "utf32-bom": lambda d: d.decode().encode("utf-32"),
    "utf32le-no-bom": lambda d: d.decode().encode("utf-32-le"),
    "utf8-bom": lambda d: hygiene.UTF8_BOM + d,
    "crlf": lambda d: d.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"),
    "nul-byte": _inject(b"\x00"),
    "control-byte": _inject(b"\x1b"),
    "bad-utf8": _inject(b"\xff"),
    "truncated": lambda d: d.rstrip(b"\r\n")[:-5],
    "no-final-newline": lambda d: d.rstrip(b"\r\n"),
    "empty": lambda d: b"",
    "huge-line": lambda d: _middle(d, lambda line: b"A" * (HUGE_CAP + 10) + b"\n" + line),
    "binary": lambda d: bytes(range(256)) * 8,
}
SPECIFIC: dict[str, dict[str, Callable[[bytes], bytes]]] = {
    "tsv": {"header-row": lambda d: b"head\trelation\ttail\n" + d,
            "header-only": lambda d: b"subject\tpredicate\tobject\n"},
    "rrf": {"header-row": lambda d: b"|".join([b"COL"] * (d.split(b"\n")[0].count(b"|"))) + b"|\n" + d,
            "shuffled-columns": _swap_columns(b"|")},
    "rf2": {"header-only": _header_only, "missing-header": _drop_header, "shuffled-columns": _swap_columns(b"\t")},
    "hpoa": {"header-only": _header_only, "missing-header": _drop_header, "shuffled-columns": _swap_columns(b"\t")},
}
# variants whose data is right though its bytes differ: they must load exactly as the clean fixture
CLEAN = {"utf8-bom", "crlf"}
# where a file needs no final line break (XML and Turtle parsers read a last line whole)
CLEAN_FOR = {"xml-like": {"no-final-newline"}}
# what is not a problem in a file of this kind, so not an error: a header-only language refset loads with a warning
WARNING_ONLY = {("sct-language", "header-only"), ("sct-description", "header-only"), ("mrrel", "empty")}


def variants() -> list[tuple[str, str]]:
    out = []
    for target, (_, _, _, kind) in TARGETS.items():
        names = list(GENERIC) + list(SPECIFIC.get(kind, {}))
        out.extend((target, name) for name in names)
    return out


VARIANTS = variants()


def _damage(tmp_path: Path, target: str, variant: str) -> tuple[str, Path, Path]:
    fmt, fixture, inner, kind = TARGETS[target]
    source = FIXTURES / fixture
    root = tmp_path / "input" / source.name
    if source.is_dir():
        shutil.copytree(source, root)
    else:
        root.parent.mkdir(parents=True)
        shutil.copy(source, root)
    damaged = root / inner if inner else root
    edit = GENERIC.get(variant) or SPECIFIC[kind][variant]
    damaged.write_bytes(edit(damaged.read_bytes()))
    return fmt, root, damaged


def _content_hash(store: OxigraphStore) -> str:
    return hashlib.sha256("\n".join(sorted(str(q) for q in store.raw)).encode()).hexdigest()


def _data(store: OxigraphStore) -> set[str]:
    return {str(q.triple) for q in store.raw if "manifest" not in str(q.graph_name)}


def _load(store: OxigraphStore, fmt: str, path: Path, lenient: bool) -> LoadReport:
    report = LoadReport()
    get_loader(fmt).load(store, path, LoadOptions(lenient=lenient), report)
    return report


def _damage_in(found: set[str]) -> list[str]:
    """Traces of the damage in loaded data: NUL or control characters, a BOM, UTF-16 debris, the huge line."""
    marks = ("%00", "\\u0000", "%EF%BB%BF", "\ufeff", "\\u001B", "%1B", "\x1b", "\x00", "A" * 100, "COL")
    return [t for t in found if any(m in t for m in marks)]


@pytest.fixture(autouse=True)
def small_line_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hygiene, "MAX_LINE_BYTES", HUGE_CAP)


OUTCOMES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def outcome_table() -> object:
    yield
    if OUTCOMES:
        print("\nmalformed-input corpus outcomes:")
        for key, count in sorted(OUTCOMES.items()):
            print(f"  {count:>4}  {key}")


def test_the_corpus_is_big_enough() -> None:
    assert len(VARIANTS) >= 40
    assert {fmt for fmt, *_ in TARGETS.values()} == {"triples", "rdf", "umls", "snomed", "obo", "owl", "hpoa"}


@pytest.mark.parametrize(("target", "variant"), VARIANTS, ids=[f"{t}-{v}" for t, v in VARIANTS])
def test_malformed_input(tmp_path: Path, target: str, variant: str) -> None:
    fmt, root, damaged = _damage(tmp_path, target, variant)
    kind = TARGETS[target][3]
    store = OxigraphStore()
    ensure_schema(store)
    _load(store, "triples", FIXTURES / "core" / "small.tsv", lenient=False)  # data already there must survive
    before = _content_hash(store)
    clean = variant in CLEAN or variant in CLEAN_FOR.get(kind, set())

    if clean:
        expected = OxigraphStore()
        clean_report = _load(expected, fmt, FIXTURES / TARGETS[target][1], lenient=False)
        got = OxigraphStore()
        report = _load(got, fmt, root, lenient=False)
        assert _data(got) == _data(expected), f"{variant} changed what {target} loads"
        assert report.skipped == clean_report.skipped
        OUTCOMES[f"clean: loads as the fixture ({variant})"] += 1
        return

    if (target, variant) in WARNING_ONLY:
        report = _load(store, fmt, root, lenient=False)
        assert report.warnings and str(damaged) in report.warnings[0]
        OUTCOMES["loads with a warning"] += 1
        return

    with pytest.raises(InputError) as caught:
        _load(store, fmt, root, lenient=False)
    error = caught.value
    assert error.path is not None, f"{error} names no file"
    assert Path(error.path).name == damaged.name or Path(error.path) == damaged or damaged.is_relative_to(
        error.path), f"{error} does not name {damaged.name}"
    if kind in LINE_FORMATS and variant not in ("empty", "header-only"):  # those are the file's, not a line's
        assert error.line is not None, f"{error} names no line"
    assert _content_hash(store) == before, "a failed load changed the store"

    lenient_store = OxigraphStore()
    try:
        report = _load(lenient_store, fmt, root, lenient=True)
    except InputError as again:
        assert again.path is not None
        OUTCOMES["error, also under --lenient"] += 1
        return
    assert report.total > 0 or report.warnings, f"--lenient loaded {variant} with no skip counted"
    assert not _damage_in(_data(lenient_store)), f"damaged data loaded: {_damage_in(_data(lenient_store))[:3]}"
    OUTCOMES["error; --lenient skips and counts"] += 1


@pytest.mark.parametrize("variant", ["utf16le-no-bom", "nul-byte", "truncated", "header-row"])
def test_the_cli_prints_one_line_and_leaves_the_store_as_it_was(tmp_path: Path, variant: str) -> None:
    _, root, damaged = _damage(tmp_path, "triples", variant)
    folder = tmp_path / "kg"
    runner = CliRunner()
    assert runner.invoke(main, ["load", str(FIXTURES / "core" / "small.tsv"), "--store", str(folder)]).exit_code == 0
    with OxigraphStore(folder) as opened:
        before = _content_hash(opened)
    result = runner.invoke(main, ["load", str(root), "--store", str(folder), "--format", "triples"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert str(damaged) in result.output and len(result.output.strip().splitlines()) == 1, result.output
    with OxigraphStore(folder) as opened:
        assert _content_hash(opened) == before


def test_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this system")
    result = CliRunner().invoke(main, ["load", "/dev/zero", "--format", "triples", "--store", str(tmp_path / "kg")])
    assert result.exit_code == 1 and "/dev/zero:1: binary data" in result.output, result.output


@pytest.mark.parametrize("block", [5, 64, 4096])
@pytest.mark.parametrize("lenient", [False, True])
def test_line_blocks_read_what_read_lines_reads(tmp_path: Path, block: int, lenient: bool) -> None:
    """``read_byte_blocks`` (the UMLS loader's reader) gives the lines, numbers and problems ``read_lines`` gives,
    whatever the block size and wherever the damage falls: BOM, CRLF, control bytes, bad UTF-8, empty lines, a
    line too long, a cut-off last line."""
    rows = ["C1|a|", "", "C2|b\r", "C3|\x01|", "C4|\xe9|", "C5|x" * 30, "C6|\r\r", "C7|é|"]
    cases = {
        "clean": "\n".join(rows[:2] + rows[5:6] + rows[7:]).encode() + b"\n",
        "bom-crlf": b"\xef\xbb\xbf" + "\r\n".join(rows[:3]).encode() + b"\r\n",
        "damaged": "\n".join(rows).encode().replace("\xe9".encode(), b"\xe9") + b"\n",
        "cut-off": "\n".join(rows[:2]).encode() + b"\nC9|no line break",
        "too-long": b"C1|a|\n" + b"x" * 300 + b"\nC2|b|\n",
    }

    def outcome(read: Callable[[Problem], list[tuple[int, str]]]) -> tuple[object, object]:
        report = LoadReport()
        try:
            got: object = read(Problem(LoadOptions(lenient=lenient), report))
        except InputError as exc:
            got = str(exc)
        return got, report.to_json()

    for name, data in cases.items():
        path = tmp_path / f"{name}.txt"
        path.write_bytes(data)
        expected = outcome(lambda problem: list(hygiene.read_lines(path, problem, max_line=200)))
        blocks = outcome(lambda problem: [(first + i, text) for first, data, _ in
                                          hygiene.read_byte_blocks(path, problem, block_bytes=block, max_line=200)
                                          for i, text in enumerate(data.decode("utf-8").split("\n")[:-1])])
        assert blocks == expected, name
