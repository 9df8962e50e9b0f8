"""stallscope reads, as root, whatever the traced processes map: their executables and libraries, chosen
by whoever runs them. A path with a newline is still named; what is not a regular file is never
opened; size, reading and the binutils are bounded; a damaged ELF file gives no symbols, never an
exception or a hang (hypothesis mutates real ones)."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import struct
import subprocess
import threading
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import STALLSCOPE, example, needs_bpf
from stallscope.analyzer import symbols, untrusted
from stallscope.analyzer.symbols import ElfSymbols, ProcessMaps, UserSymbols, process_start_time_ns
from test_symbols import Program, compile_program


def _within(seconds: float, fn, *args):
    """fn(*args) from a thread that must end within `seconds` (a hang fails the test, not the suite)."""
    out: dict = {}

    def call():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001  (raised again in the caller's thread)
            out["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__}{args} still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# ---- a path holding a newline -------------------------------------------------------------------

def test_maps_lines_give_the_path_as_the_file_is_named():
    text = ("55d0c0a00000-55d0c0a01000 r-xp 00001000 08:01 1234                       /tmp/dir\\012with/prog\x1cram\n"
            "7f0000000000-7f0000001000 r-xp 00000000 08:01 99                         /usr/lib/libc.so.6 (deleted)\n"
            "7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0                          [vdso]\n"
            "7ffe00000000-7ffe00001000 rw-p 00000000 00:00 0 \n")
    maps = ProcessMaps.parse(1, text)
    assert [m.path for m in maps.mappings] == ["/tmp/dir\nwith/prog\x1cram", "/usr/lib/libc.so.6 (deleted)", "[vdso]", ""]
    assert maps.mappings[1].file_path == "/usr/lib/libc.so.6"
    assert symbols.maps_path("     /a\\012b") == "/a\nb"


def test_a_program_at_a_path_holding_a_newline_is_named_while_it_blocks(tmp_path):
    built = compile_program(tmp_path, "program")
    folder = tmp_path / "dir\nwith a newline"
    folder.mkdir()
    binary = str(folder / "prog\x1cram\u2028")  # characters str.splitlines would also split at
    shutil.copy(built, binary)
    program = Program(binary)  # blocks in fgets() on its stdin
    try:
        with open(f"/proc/{program.pid}/maps", "rb") as f:
            assert b"dir\\012with a newline" in f.read()  # what the kernel shows
        frame = UserSymbols(program.pid, process_start_time_ns(program.pid)).resolve(program.addrs["known_function"])
        assert frame.text == "known_function" and frame.module == binary
    finally:
        program.kill()


def test_a_file_named_with_the_four_characters_backslash_012_is_still_found(tmp_path):
    built = compile_program(tmp_path, "program")
    binary = str(tmp_path / "literal\\012name")  # the kernel shows it as it shows a newline
    shutil.copy(built, binary)
    program = Program(binary)
    try:
        frame = UserSymbols(program.pid, process_start_time_ns(program.pid)).resolve(program.addrs["known_function"])
        assert frame.text == "known_function"
    finally:
        program.kill()


@needs_bpf
def test_a_recorded_program_at_a_path_holding_a_newline_is_symbolised(tmp_path):
    """cpu_burner copied to a path with a newline, recorded with on-CPU sampling: its functions are named
    in the recording (before, its frames were `[burner+0x...]`)."""
    folder = tmp_path / "cpu\nburner"
    folder.mkdir()
    binary = folder / "burner"
    shutil.copy(example("cpu_burner"), binary)
    out = tmp_path / "run.stall"
    proc = subprocess.run([STALLSCOPE, "record", "-o", str(out), "--probes", "+oncpu", "--no-degrade", "--",
                           str(binary), "-t", "2", "-m", "1500"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folded = subprocess.run([STALLSCOPE, "export", "--format", "folded", "--what", "oncpu", "--command-only",
                             str(out)], capture_output=True, text=True, timeout=120, check=True).stdout
    samples = {}
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        for frame in stack.split(";"):
            samples[frame] = samples.get(frame, 0) + int(n)
    named = sum(n for f, n in samples.items() if f.startswith("burn_"))
    unnamed = sum(n for f, n in samples.items() if f.startswith("[burner+"))
    assert named > 10 and named > 10 * unnamed, sorted(samples.items(), key=lambda kv: -kv[1])[:10]


# ---- what is not a regular file --------------------------------------------------------------

def test_a_fifo_a_device_or_a_link_is_never_read_as_an_elf_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    link = tmp_path / "link"
    link.symlink_to("/proc/self/exe")
    for path in (str(fifo), "/dev/zero", "/dev/null", str(link), str(tmp_path)):
        assert _within(5, ElfSymbols.from_file, path) is None, path
    from stallscope.bpf.futex_collector import function_file_offsets, slow_path_sites
    for fn in (function_file_offsets, slow_path_sites):
        with pytest.raises(OSError):
            _within(5, fn, str(fifo), ("pthread_mutex_lock",))


def test_a_file_above_the_size_bound_is_not_read(tmp_path, monkeypatch):
    built = compile_program(tmp_path, "program")
    assert ElfSymbols.from_file(built) is not None
    monkeypatch.setattr(symbols, "MAX_ELF_FILE_BYTES", os.path.getsize(built) - 1)
    assert ElfSymbols.from_file(built) is None


def _section_headers(path: str) -> dict[str, int]:
    """Section name -> file offset of its header (64-bit little-endian ELF)."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    out = {}
    for i in range(shnum):
        at = shoff + i * shentsize
        name_at, = struct.unpack_from("<I", data, at)
        end = data.index(b"\0", names_off + name_at)
        out[data[names_off + name_at:end].decode()] = at
    return out


@pytest.mark.parametrize("claimed", [64 << 20, 1 << 40])
def test_a_symbol_table_claiming_more_than_the_file_holds_is_read_within_the_bounds(tmp_path, monkeypatch, claimed):
    """The .symtab's header claims 64 MiB or 1 TiB, and the file is sparse up to 1 GiB: a table of more
    than MAX_ELF_SYMBOLS entries is not read at all (the exports in .dynsym still are), and reading
    stops at the byte budget (lowered here to 8 MiB): no symbols, no memory spent past it."""
    built = compile_program(tmp_path, "program", "-rdynamic")
    hostile = str(tmp_path / "hostile")
    shutil.copy(built, hostile)
    symtab = _section_headers(hostile)[".symtab"]
    with open(hostile, "r+b") as f:
        f.seek(symtab + 0x20)
        f.write(struct.pack("<Q", claimed))
        f.truncate(1 << 30)
    monkeypatch.setattr(symbols, "MAX_ELF_READ_BYTES", 8 << 20)
    elf = _within(20, ElfSymbols.from_file, hostile)
    if claimed // 24 > symbols.MAX_ELF_SYMBOLS:
        assert elf is not None and not any(t.is_symtab for t in elf._raw_tables)
    else:
        assert elf is None


def test_minidebuginfo_that_inflates_past_the_budget_gives_no_symbols_from_it(tmp_path, monkeypatch):
    built = compile_program(tmp_path, "program", "-rdynamic")
    subprocess.run(["strip", "--strip-all", built], check=True)
    bomb = tmp_path / "bomb.xz"
    bomb.write_bytes(lzma.compress(b"\0" * (32 << 20)))
    subprocess.run(["objcopy", f"--add-section=.gnu_debugdata={bomb}", built], check=True)
    monkeypatch.setattr(symbols, "MAX_ELF_READ_BYTES", 4 << 20)
    elf = _within(20, ElfSymbols.from_file, built)
    assert elf is not None and elf.resolve_vaddr(0) is None  # still read: its .dynsym names the exports


def test_a_debuglink_naming_a_path_is_not_followed(tmp_path, monkeypatch):
    """A stripped file's .gnu_debuglink is a file name; one holding `../` (leading out of the file's
    folder) is ignored, whatever is there."""
    built = compile_program(tmp_path, "program")
    folder = tmp_path / "bin"
    folder.mkdir()
    debug = tmp_path / "secret.debug"
    subprocess.run(["objcopy", "--only-keep-debug", built, str(debug)], check=True)
    stripped = str(folder / "program")
    shutil.copy(built, stripped)
    subprocess.run(["strip", "--strip-all", stripped], check=True)
    link = bytearray(b"../secret.debug\0")
    link += b"\0" * (-len(link) % 4) + struct.pack("<I", zlib.crc32(debug.read_bytes()))
    (tmp_path / "link").write_bytes(bytes(link))
    subprocess.run(["objcopy", f"--add-section=.gnu_debuglink={tmp_path / 'link'}", stripped], check=True)
    elf = ElfSymbols.from_file(stripped)
    assert elf is not None and not any(t.is_symtab for t in elf._raw_tables)


def test_a_tool_that_runs_too_long_or_writes_too_much_is_stopped():
    start = time.monotonic()
    with pytest.raises(untrusted.BudgetExceeded, match="ran past"):
        untrusted.run_bounded(["sleep", "30"], 1.0, 1 << 20)
    with pytest.raises(untrusted.BudgetExceeded, match="wrote more than"):
        untrusted.run_bounded(["yes"], 30.0, 1 << 20)
    assert time.monotonic() - start < 10
    assert untrusted.run_bounded(["echo", "fine"], 5.0, 100) == "fine\n"


# ---- fuzzing the ELF reader ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_elf_files(tmp_path_factory) -> list[bytes]:
    """A program with its symbol table and debug information, the same stripped with a debuglink, and
    the same stripped with MiniDebugInfo: the reader's three ways to a symbol table."""
    tmp = tmp_path_factory.mktemp("elf")
    full = compile_program(tmp, "full")
    stripped = str(tmp / "stripped")
    shutil.copy(full, stripped)
    subprocess.run(["strip", "--strip-all", stripped], check=True)
    mini = str(tmp / "mini")
    shutil.copy(stripped, mini)
    symtab = tmp / "symtab.elf"
    subprocess.run(["objcopy", "--strip-debug", full, str(symtab)], check=True)
    (tmp / "symtab.xz").write_bytes(lzma.compress(symtab.read_bytes()))
    subprocess.run(["objcopy", f"--add-section=.gnu_debugdata={tmp / 'symtab.xz'}", mini], check=True)
    return [open(p, "rb").read() for p in (full, stripped, mini)]


def _headers_region(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the parts a parser trusts: the ELF header, program headers, section headers."""
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    return [(0, 64), (phoff, phoff + phentsize * phnum), (shoff, shoff + shentsize * shnum)]


@st.composite
def mutated_elf(draw, files: list[bytes]) -> bytes:
    """A real ELF file with one to eight edits, most of them in its headers: a byte, a 32- or 64-bit field
    set to an edge value, a run of bytes zeroed, or the file cut short."""
    data = bytearray(draw(st.sampled_from(files)))
    regions = _headers_region(bytes(data))
    for _ in range(draw(st.integers(1, 8))):
        lo, hi = draw(st.sampled_from(regions + [(0, len(data))]))
        at = draw(st.integers(lo, max(lo, min(hi, len(data)) - 1)))
        kind = draw(st.sampled_from(("byte", "u16", "u32", "u64", "zero", "cut")))
        if kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:]
            break
        elif kind == "zero":
            n = len(data[at:at + draw(st.integers(1, 64))])
            data[at:at + n] = bytes(n)
        else:
            size = {"u16": 2, "u32": 4, "u64": 8}[kind]
            value = draw(st.sampled_from((0, 1, 0xFF, 0xFFFF, 2 ** (8 * size) - 1, 2 ** (8 * size - 1), 64, 56, 40)))
            if at + size <= len(data):
                data[at:at + size] = value.to_bytes(size, "little")
    return bytes(data)


def _read_and_resolve(path: str, addrs: list[int]) -> None:
    """What the collector does with a mapped file: read it, then name addresses in it (which decodes its
    symbol tables); an exception here would escape into the collector."""
    elf = ElfSymbols.from_file(path)
    if elf is not None:
        for a in addrs + [0x1000, 0x1139]:
            vaddr = elf.vaddr_of_file_offset(a)
            elf.resolve_vaddr(a if vaddr is None else vaddr)


ELF_FUZZ_EXAMPLES = int(os.environ.get("STALLSCOPE_FUZZ_EXAMPLES_ELF", "300"))


def test_a_mutated_elf_file_gives_symbols_or_none_never_an_exception_or_a_hang(tmp_path_factory, real_elf_files):
    work = tmp_path_factory.mktemp("mutated")
    slowest = [0.0]

    @settings(max_examples=ELF_FUZZ_EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_elf(real_elf_files), st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=4))
    def run(data, addrs):
        path = work / "program"
        path.write_bytes(data)
        t0 = time.monotonic()
        _within(symbols.MAX_ELF_SECONDS + 10, _read_and_resolve, str(path), addrs)
        slowest[0] = max(slowest[0], time.monotonic() - t0)

    run()
    print(f"slowest mutated file: {slowest[0]:.3f} s")


# ---- a JIT's perf map in /tmp, where anyone writes ---------------------------------------------

@pytest.fixture
def sleeping_process():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _perf_map_lookup(pid: int):
    return UserSymbols(pid)._perf_map_lookup(0x1000_0010)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
def test_a_perf_map_is_read_only_as_a_regular_file_of_the_processs_user(tmp_path, sleeping_process):
    """A FIFO at /tmp/perf-PID.map would hang the read; a link could show a file of root's as symbol
    names; a file of another user's is not the JIT's."""
    path = f"/tmp/perf-{sleeping_process.pid}.map"
    try:
        with open(path, "w") as f:
            f.write("10000000 40 jit_function\n")
        assert _perf_map_lookup(sleeping_process.pid) == ("jit_function", 0x10)  # the process's user: root
        os.chown(path, 65534, 65534)
        assert _perf_map_lookup(sleeping_process.pid) is None
        os.unlink(path)
        secret = tmp_path / "secret"
        secret.write_text("10000000 40 root_only_line\n")
        os.symlink(secret, path)
        assert _perf_map_lookup(sleeping_process.pid) is None
        os.unlink(path)
        os.mkfifo(path)
        assert _within(5, _perf_map_lookup, sleeping_process.pid) is None
    finally:
        if os.path.lexists(path):
            os.unlink(path)
