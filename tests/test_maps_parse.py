"""/proc/PID/maps parsed in C (analyzer/kallsyms.c maps_lines) as Python parses it (symbols.py py_parse_mappings):
the same Mapping tuples for real processes' maps, for crafted lines at the edges of the format, and for damaged
texts; and what C leaves to Python is left to it."""

import glob
import os

import pytest
from hypothesis import given, settings, strategies as st

from stallscope.analyzer import symbols
from stallscope.analyzer.symbols import Mapping, ProcessMaps, py_parse_mappings

_c = pytest.importorskip("stallscope.analyzer._kallsyms")


def _both(data: bytes):
    """(C's mappings or None, Python's), of the same bytes."""
    parsed = _c.maps_lines(data, Mapping)
    c = None
    if parsed is not None:
        rows, in_order = parsed
        assert in_order == all(a.start <= b.start for a, b in zip(rows, rows[1:]))
        c = tuple(sorted(rows, key=lambda m: m.start))
    return c, py_parse_mappings(data.decode("utf-8", "surrogateescape"))


def test_real_maps_parse_alike():
    """Every process's maps this test may read (its own among them) parse to the same tuples, all in C."""
    read = 0
    for path in [f"/proc/{os.getpid()}/maps", *glob.glob("/proc/[0-9]*/maps")]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        c, py = _both(data)
        assert c is not None, path
        assert c == py and all(type(m) is Mapping for m in c), path
        read += 1
    assert read >= 1


def test_many_threads_stacks():
    """A process of many threads lists their stacks and guard pages, anonymous, line after line."""
    lines = []
    for i in range(2000):
        base = 0x7F0000000000 + i * 0x11000
        lines.append(f"{base:x}-{base + 0x1000:x} ---p 00000000 00:00 0 ")
        lines.append(f"{base + 0x1000:x}-{base + 0x11000:x} rw-p 00000000 00:00 0 ")
    lines.append("55d0c0000000-55d0c0001000 r-xp 00001000 fe:00 18500                      /usr/bin/prog")
    data = ("\n".join(lines) + "\n").encode()
    c, py = _both(data)
    assert c == py and len(c) == 4001
    maps = ProcessMaps.parse(7, data)
    assert [m.path for m in maps.kept] == ["/usr/bin/prog"]
    assert maps.find(0x7F0000001000 + 5).perms == "rw-p"
    assert maps.find(0x55D0C0000000).path == "/usr/bin/prog"


CRAFTED = [
    b"",
    b"\n\n",
    b"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon",  # no newline at the end
    b"7f00-7f10 r-xp 00000000 08:02 17 /a path/with spaces (deleted)\n",
    b"7f00-7f10 r-xp 00000000 08:02 17 /new\\012line\\012\n",
    b"7f00-7f10 r-xp 00000000 08:02 17 /not\\01a newline\n",
    b"7f00-7f10 r-xp 00000000 08:02 17 /bytes\xff\xfe\xc3(\n",
    b"7f00-7f10 r-xp 00000000 08:02 17 /caf\xc3\xa9\x85\xe2\x80\xa8sep\r\x1c\n",
    b"7F00-7F10 R-XP 0000ABCD 08:02 17 /upper\n",
    b"7f00-7f10 r-xp 00000000 08:02 17\n",  # five fields: no path
    b"7f00-7f10 r-xp 00000000 08:02\n",  # four: skipped
    b"7f00 r-xp 00000000 08:02 17 /no-dash\n",
    b"-7f10 r-xp 00000000 08:02 17 /no-start\n",
    b"7f00-7f10 r-xp 00000000 08:02  /empty-inode\n",
    b"7f30-7f40 r-xp 0 0:0 1 /later\n7f00-7f10 r-xp 0 0:0 1 /earlier\n7f00-7f08 r-xp 0 0:0 1 /same-start\n",
    b"0-ffffffffffffffff r-xp ffffffffffffffff 0:0 18446744073709551615 /top\n",
]

LEFT_TO_PYTHON = [
    b"0x7f00-7f10 r-xp 00000000 08:02 17 /prefixed\n",
    b"7f00-7f10 r-xp +0 08:02 17 /signed\n",
    b"7f00-7f10 r-xp 00000000 08:02 1_7 /underscored\n",
    b"7f00-7f10 r-xp 00000000 08:02 \xd9\xa1 /arabic-indic-digit\n",
    b"0-10000000000000000 r-xp 0 0:0 1 /beyond-64-bits\n",
    b"0-1 r-xp 0 0:0 18446744073709551616 /inode-beyond-64-bits\n",
    b"7f00-7f10 r-xp 00000000 08:02 17\t/tab-in-the-inode\n",
    b"7f00-7f10  r-xp 00000000 08:02 17 /double space\n",  # an empty field shifts the rest: "r-xp" as the offset
]


@pytest.mark.parametrize("data", CRAFTED)
def test_crafted_lines_alike(data):
    c, py = _both(data)
    assert c is not None
    assert c == py


@pytest.mark.parametrize("data", LEFT_TO_PYTHON)
def test_what_python_reads_otherwise_is_left_to_it(data):
    """C leaves a number Python's int() reads in its own ways (or refuses) to Python, whose tables are made."""
    c, py = _both(data)
    assert c is None
    assert ProcessMaps._parse_mappings(data) == py


def test_parse_takes_text_or_bytes():
    data = CRAFTED[6]
    assert ProcessMaps.parse(1, data).mappings == ProcessMaps.parse(2, data.decode("utf-8", "surrogateescape")).mappings


def test_without_c(monkeypatch):
    monkeypatch.setattr(symbols, "_c_maps_lines", None)
    assert ProcessMaps._parse_mappings(CRAFTED[3]) == py_parse_mappings(CRAFTED[3].decode())


_PIECES = st.sampled_from([b"7f00", b"7f10", b"0", b"ffffffffffffffff", b"10000000000000000", b"-", b" ", b"  ",
                           b"r-xp", b"rw-p", b"08:02", b"17", b"/usr/lib/x.so", b"\\012", b"\n", b"\xff", b"0x1",
                           b"+1", b"1_0", b"(deleted)", b"\t", b"\x85", b"\xc3\xa9", b"[vdso]"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=6)), max_size=40))
def test_damaged_texts_alike(pieces):
    """Any bytes: C's tables where it makes them, Python's where it leaves them, the same as Python's."""
    data = b"".join(pieces)
    c, py = _both(data)
    if c is not None:
        assert c == py
    assert ProcessMaps._parse_mappings(data) == py
