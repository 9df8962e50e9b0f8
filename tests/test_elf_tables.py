"""An ELF file's tables of functions (analyzer/symbols.py ElfSymbols) and of data objects (bpf/futex_collector.py
object_table), made in C (analyzer/kallsyms.c elf_functions, elf_objects) and in Python: the same tables, on files
compiled here for their corner cases and on the machine's own libraries, and the names `nm` gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from stallscope.analyzer import symbols as symbols_module
from stallscope.analyzer.symbols import ElfSymbols
from stallscope.bpf import futex_collector
from stallscope.bpf.futex_collector import object_table, py_object_table

if symbols_module._c_elf_functions is None or futex_collector._c_elf_objects is None:
    pytest.fail("analyzer/_kallsyms is not built: `make install` builds it", pytrace=False)

# functions at one address under several names and bindings, hand-written ones of size 0, a static and a weak one;
# data objects at one address, and one of size 0
ALIASES = r"""
int shared_impl(int x) { return x * 3 + 1; }
int __shared_alias(int x) __attribute__((alias("shared_impl")));
int _shared_alias(int x) __attribute__((weak, alias("shared_impl")));
static int local_fn(int x) { return x + 7; }
int (*keep_local)(int) = local_fn;
__attribute__((weak)) int weak_fn(int x) { return x - 2; }
__asm__(".pushsection .text\n.globl bare_one\n.type bare_one,@function\nbare_one:\n\tret\n\tnop\n\tnop\n"
        ".globl bare_two\n.type bare_two,@function\nbare_two:\n\tret\n.popsection\n");
int counter_a = 1, counter_b = 2;
extern int counter_alias __attribute__((alias("counter_a")));
__asm__(".pushsection .data\n.globl zero_sized\n.type zero_sized,@object\nzero_sized:\n\t.quad 5\n.popsection\n");
int main(void) { return shared_impl(1) + keep_local(2) + weak_fn(3) + counter_b; }
"""

# names that are not ASCII (C identifiers in UTF-8): the file is left to Python
NOT_ASCII = r"""
int caf\u00e9_fn(int x) { return x + 1; }
int caf\u00e9_data = 3;
int plain_fn(int x) { return x + caf\u00e9_data; }
int main(void) { return caf\u00e9_fn(2) + plain_fn(1); }
"""


def build(tmp_path, c_compiler, name: str, source: str) -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(textwrap.dedent(source))
    out = tmp_path / name
    subprocess.run([c_compiler, "-O1", "-o", str(out), str(src)], check=True)
    return str(out)


def nm(path: str) -> dict[str, tuple[int, int | None]]:
    """name -> (address, size or None), as binutils' nm reads the file."""
    out = {}
    for line in subprocess.run(["nm", "-S", path], check=True, capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"([0-9a-f]+) (?:([0-9a-f]+) )?\w (\S+)$", line)
        if m:
            out[m[3]] = (int(m[1], 16), int(m[2], 16) if m[2] else None)
    return out


def both_indexes(path: str) -> tuple[ElfSymbols, ElfSymbols]:
    c, py = ElfSymbols.from_file(path), ElfSymbols.from_file(path)
    assert c is not None and py is not None
    c._build_index()
    py._py_build_index()
    return c, py


def machine_libraries() -> list[str]:
    """The C library and the interpreter's own shared library (or executable) this process maps: thousands of
    functions each."""
    executable = os.path.realpath(sys.executable)
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if line.rstrip().endswith((".so.6", ".so.1.0", executable))}
    found = sorted(p for p in paths if os.path.basename(p).startswith(("libc.so", "libpython")))
    # an interpreter built without a shared library holds its functions itself
    return found if any("libpython" in p for p in found) or executable not in paths else found + [executable]


def test_the_machines_libraries_are_found():
    assert any(os.path.basename(p).startswith("libc.so") for p in machine_libraries()), machine_libraries()


def test_the_function_index_in_c_is_pythons_and_names_what_nm_names(tmp_path, c_compiler):
    path = build(tmp_path, c_compiler, "aliases", ALIASES)
    c, py = both_indexes(path)
    truth = nm(path)

    assert (c._starts, c._ends, c._names) == (py._starts, py._ends, py._names)
    # the aliases' best name: global before weak, fewer leading underscores first
    assert c.resolve_vaddr(truth["__shared_alias"][0]) == ("shared_impl", 0)
    assert c.resolve_vaddr(truth["_shared_alias"][0] + truth["shared_impl"][1] - 1)[0] == "shared_impl"
    assert c.resolve_vaddr(truth["local_fn"][0]) == ("local_fn", 0)
    assert c.resolve_vaddr(truth["weak_fn"][0]) == ("weak_fn", 0)
    # a hand-written function of size 0 runs to the next symbol
    one, two = truth["bare_one"][0], truth["bare_two"][0]
    assert c.resolve_vaddr(two - 1) == ("bare_one", two - 1 - one)
    assert c.resolve_vaddr(two) == ("bare_two", 0)


@pytest.mark.parametrize("path", machine_libraries())
def test_the_function_index_in_c_is_pythons_on_the_machines_libraries(path):
    c, py = both_indexes(path)

    assert len(c._starts) > 100
    assert (c._starts, c._ends, c._names) == (py._starts, py._ends, py._names)


def test_a_file_whose_names_are_not_ascii_is_indexed_in_python(tmp_path, c_compiler):
    path = build(tmp_path, c_compiler, "not_ascii", NOT_ASCII)
    elf = ElfSymbols.from_file(path)
    raw = [(t.symbols, t.strings, t.section_ends, t.is_64, t.little_endian) for t in elf._raw_tables]

    assert symbols_module._c_elf_functions(raw, ()) is None
    assert elf.resolve_vaddr(nm(path)["café_fn"][0]) == ("café_fn", 0)
    c, py = both_indexes(path)
    assert (c._starts, c._ends, c._names) == (py._starts, py._ends, py._names)


def test_the_data_objects_table_in_c_is_pythons_and_lists_what_nm_lists(tmp_path, c_compiler):
    path = build(tmp_path, c_compiler, "aliases", ALIASES)
    starts, ends, names = object_table(path)
    truth = nm(path)

    assert (starts, ends, names) == py_object_table(path)
    for name in ("counter_a", "counter_alias", "counter_b", "zero_sized"):
        address, size = truth[name]
        i = names.index(name)
        assert (starts[i], ends[i]) == (address, address + (size or 1))
    assert starts == sorted(starts)


@pytest.mark.parametrize("path", machine_libraries())
def test_the_data_objects_table_in_c_is_pythons_on_the_machines_libraries(path):
    made = object_table(path)

    assert len(made[0]) > 50
    assert made == py_object_table(path)


def test_a_file_whose_object_names_are_not_ascii_is_listed_in_python(tmp_path, c_compiler):
    path = build(tmp_path, c_compiler, "not_ascii", NOT_ASCII)
    elf = ElfSymbols.from_file(path)
    raw = [(t.symbols, t.strings, (), t.is_64, t.little_endian) for t in elf._raw_tables]
    starts, _ends, names = object_table(path)

    assert futex_collector._c_elf_objects(raw) is None

    assert (starts, _ends, names) == py_object_table(path)
    assert starts[names.index("café_data")] == nm(path)["café_data"][0]


FUZZ_EXAMPLES = int(os.environ.get("STALLSCOPE_FUZZ_EXAMPLES_ELF", "300"))


def test_damaged_symbol_tables_give_the_same_tables_in_c_as_in_python(tmp_path, c_compiler):
    """Bytes of the symbol and string tables changed (a file someone else mapped may hold anything): the tables in
    C are Python's wherever C makes them (an end beyond 64 bits, or a name not ASCII, leaves the file to Python)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from stallscope.analyzer.symbols import _RawSymbolTable

    sources = [ElfSymbols.from_file(build(tmp_path, c_compiler, "aliases", ALIASES))]
    sources += [e for e in (ElfSymbols.from_file(p) for p in machine_libraries()[:1]) if e is not None]
    made = {"c": 0}

    @st.composite
    def damaged(draw):
        elf = draw(st.sampled_from(sources))
        tables = []
        for t in elf._raw_tables:
            symbols, strings = bytearray(t.symbols), bytearray(t.strings)
            for _ in range(draw(st.integers(1, 24))):
                buf = draw(st.sampled_from((symbols, strings)))
                if buf:
                    at = draw(st.integers(0, len(buf) - 1))
                    buf[at] = draw(st.sampled_from((0, 1, 0x5F, 0x7F, 0x80, 0xFF)) | st.integers(0, 255))
            if draw(st.booleans()):
                symbols = symbols[:draw(st.integers(0, len(symbols)))]
            ends = tuple(draw(st.sampled_from((e, 0, (1 << 64) - 1))) for e in t.section_ends)
            tables.append(_RawSymbolTable(bytes(symbols), bytes(strings), ends, t.is_64, t.little_endian,
                                          t.is_symtab))
        return elf.segments, tables

    @settings(max_examples=FUZZ_EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(damaged())
    def run(case):
        segments, tables = case
        raw = [(t.symbols, t.strings, t.section_ends, t.is_64, t.little_endian) for t in tables]
        c = symbols_module._c_elf_functions(raw, tuple((s.vaddr, s.mem_size) for s in segments))
        py = ElfSymbols(segments, None, list(tables))
        py._py_build_index()
        if c is not None:
            made["c"] += 1
            assert (c[0], c[1], c[2]) == (py._starts, py._ends, py._names)
        objects = futex_collector._c_elf_objects([(s, n, (), b, le) for s, n, _e, b, le in raw])
        if objects is not None:
            entries = sorted((value, max(size, 1), name) for value, size, name in _py_objects(tables))
            assert objects == ([e[0] for e in entries], [e[0] + e[1] for e in entries], [e[2] for e in entries])

    run()
    assert made["c"] > FUZZ_EXAMPLES // 4  # most damaged files are still made in C


def _py_objects(tables):
    """(value, size, name) of the named data objects with an address, as futex_collector's Python decodes them."""
    for t in tables:
        for name, _info, _shndx, value, size in futex_collector.symbol_entries(t.symbols, t.strings, t.is_64,
                                                                                t.little_endian,
                                                                                futex_collector._STT_OBJECT):
            if value:
                yield value, size, name
