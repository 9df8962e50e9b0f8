"""Symbols, proved against the running kernel and real processes.

The ground truth is always another tool or the process itself: /proc/kallsyms read by the test,
a C program printing the addresses of its own functions, `nm`, `readelf -n`, the dynamic linker's
`dlsym`. Nothing of the system is mocked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from stallscope.analyzer import symbols as symbols_module
from stallscope.analyzer.symbols import (
    ElfSymbols,
    Frame,
    KernelDataSymbols,
    KernelSymbols,
    ProcessMaps,
    Symbolizer,
    UserSymbols,
    process_start_time_ns,
)
from stallscope.errors import StallscopeError
from stallscope.procstat import image as process_image

KALLSYMS = "/proc/kallsyms"


# --------------------------------------------------------------------------------------------
# Kernel


def kallsyms_text_lines() -> list[tuple[int, str, str, str]]:
    """(address, type, name, module) of the text symbols, read independently of the module."""
    entries = []
    with open(KALLSYMS) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                module = parts[3].strip("[]") if len(parts) > 3 else "kernel"
                entries.append((int(parts[0], 16), parts[1], parts[2], module))
    return entries


@pytest.fixture(scope="module")
def kallsyms_entries():
    if not os.path.exists(KALLSYMS):
        pytest.skip("no /proc/kallsyms: kernel without CONFIG_KALLSYMS")
    entries = kallsyms_text_lines()
    if not any(addr for addr, *_ in entries):
        pytest.skip("/proc/kallsyms hides addresses from this user (kptr_restrict): run as root")
    return entries


@pytest.fixture(scope="module")
def kernel_symbols(kallsyms_entries):
    return KernelSymbols.load()


def address_of(entries, name: str) -> int:
    addrs = {addr for addr, _, sym, _ in entries if sym == name}
    if not addrs:
        pytest.skip(f"{name} is not a text symbol on this kernel")
    return min(addrs)


def test_schedule_plus_5_is_named_schedule_plus_0x5(kallsyms_entries, kernel_symbols):
    schedule = address_of(kallsyms_entries, "schedule")

    frame = kernel_symbols.resolve(schedule + 5)

    assert (frame.symbol, frame.offset, frame.module, frame.kind) == ("schedule", 5, "kernel", "kernel")
    assert frame.text == "schedule+0x5"
    assert kernel_symbols.resolve(schedule).text == "schedule"


def test_a_function_of_a_loaded_module_is_named_with_its_module(kallsyms_entries, kernel_symbols):
    try:
        with open("/proc/modules") as f:
            loaded = {line.split()[0] for line in f if line.strip()}
    except FileNotFoundError:
        pytest.skip("no /proc/modules: this kernel has no loadable modules (CONFIG_MODULES off)")
    in_modules = [e for e in kallsyms_entries if e[3] in loaded]
    if not in_modules:
        pytest.skip("no loaded module lists text symbols in /proc/kallsyms")
    addr, _, name, module = in_modules[0]
    # Aliases at one address are legitimate answers; the module must be the right one.
    aliases = {sym for a, _, sym, mod in kallsyms_entries if a == addr and mod == module}

    frame = kernel_symbols.resolve(addr + 1)

    assert frame.module == module
    assert frame.symbol in aliases
    assert frame.offset == 1


def test_code_outside_the_kernel_image_keeps_its_region_name(kallsyms_entries, kernel_symbols):
    # ftrace trampolines and JITed BPF programs are listed as pseudo-modules: [__builtin__ftrace],
    # [bpf]. A BPF stack passes through them.
    bracketed = [e for e in kallsyms_entries if e[3] != "kernel"]
    if not bracketed:
        pytest.skip("kallsyms lists no code outside the kernel image (no modules, trampolines or BPF JIT)")
    addr, _, name, module = bracketed[0]

    frame = kernel_symbols.resolve(addr)

    assert frame.module == module
    assert frame.symbol in {sym for a, _, sym, mod in kallsyms_entries if a == addr}


def test_addresses_outside_kernel_text_print_unknown(kallsyms_entries, kernel_symbols):
    assert kernel_symbols.resolve(0x10).text == "[unknown]"

    last_core = max(addr for addr, _, _, module in kallsyms_entries if module == "kernel")
    far = last_core + (2 << 20)
    if any(last_core < addr <= far for addr, *_ in kallsyms_entries):
        pytest.skip("another text region starts within 2 MiB of the end of the kernel's text")
    assert kernel_symbols.resolve(far).text == "[unknown]"


def test_the_gap_after_etext_is_not_code(kallsyms_entries, kernel_symbols):
    etext = address_of(kallsyms_entries, "_etext")
    if any(etext < addr <= etext + 0x100 for addr, *_ in kallsyms_entries):
        pytest.skip("a text symbol follows _etext within 0x100 bytes")

    assert kernel_symbols.resolve(etext + 0x100).text == "[unknown]"


def test_kallsyms_read_without_privilege_gives_an_actionable_error(kallsyms_entries):
    if os.geteuid() != 0:
        pytest.skip("needs root to read kallsyms as another user")
    # What an unprivileged collector would read: the kernel prints every address as 0.
    hidden = subprocess.run(["cat", KALLSYMS], user=65534, group=65534, capture_output=True, check=True).stdout
    if any(int(line.split()[0], 16) for line in hidden.splitlines()[:1000]):
        pytest.skip("this kernel shows addresses to unprivileged users (kptr_restrict=0, perf_event_paranoid<=1)")

    with pytest.raises(StallscopeError) as raised:
        KernelSymbols.parse(hidden)

    assert "kptr_restrict" in raised.value.hint
    assert "root" in raised.value.hint


def test_kallsyms_loads_in_well_under_a_second(kallsyms_entries):
    started = time.perf_counter()
    symbols = KernelSymbols.load()
    elapsed = time.perf_counter() - started

    assert len(symbols) > 1000
    assert elapsed < 1.0


def _tables(symbols: KernelSymbols) -> tuple:
    return symbols._starts, symbols._ends, symbols._names, symbols._modules


@pytest.mark.skipif(symbols_module._c_text_symbols is None, reason="analyzer/kallsyms.c is not built (make install)")
def test_kallsyms_parsed_in_c_is_the_python_parse_of_the_running_kernel(kallsyms_entries):
    with open(KALLSYMS, "rb") as f:
        data = f.read()

    assert _tables(KernelSymbols.parse(data)) == _tables(KernelSymbols.py_parse(data))
    c, py = KernelDataSymbols.parse(data), KernelDataSymbols.py_parse(data)
    assert (c._starts, c._names) == (py._starts, py._names)


# kallsyms-like texts a parse must read as Python does: aliases at one address (the global, then the weak, then
# the local one, the fewest leading underscores, the shortest), modules out of address order and ending their regions,
# the text's end markers, line breaks of every kind splitlines knows, bytes that are not ASCII, and the errors
_ODD_KALLSYMS = [
    b"ffffffff81000000 T _stext\nffffffff81000000 t __alias\nffffffff81000000 W _stext_w\n"
    b"ffffffff81000010 t local\nffffffff81000010 T global\nffffffff81000020 T _etext\n"
    b"ffffffffc0000000 t mod_fn\t[mymod]\nffffffffc0000100 t other_fn\t[other]\n"
    b"ffffffffa0000000 t bpf_prog_1\t[bpf]\nffffffff82000000 D some_data\nffffffff82000010 b bss_var\n",
    b"ffffffff81000000 T a\r\nffffffff81000008 T b\rffffffff81000010 T c\x0bffffffff81000018 T d\x0c"
    b"ffffffff81000020 T e\x1cffffffff81000028 T f\x1dffffffff81000030 T g\x1effffffff81000038 T h\x85i\n",
    b"ffffffff81000000 T na\xffme\t[m\xfed]\nffffffff81000008 t x\t  [spaced]  \nffffffff81000010 t y\t[]\n"
    b"ffffffff81000018 t z\t[kernel]\nffffffff81000020 T _einittext\t[kernel]\n",
    b"81000000 T short\n81000010 T width\n",
    b"ffffffffffffffff T last\nfffffffffff00000 T near_end\t[m]\n",
    b"", b"\n", b"ffffffff81000000\n", b"ffffffff81000000 D data_only\n", b"0000000000000000 T hidden\n",
    b"ffffffff8100zz00 T bad_hex\n", b"ffff ffff81000000 T blank\n", b"ffffffff81000000 T ok\nffff f T bad\n",
    b"ffffffff81000000 T\nffffffff81000008 T s\n",
]


def _parsed(parse, data: bytes):
    try:
        return _tables(parse(data))
    except StallscopeError as e:
        return str(e), e.hint


@pytest.mark.skipif(symbols_module._c_text_symbols is None, reason="analyzer/kallsyms.c is not built (make install)")
@pytest.mark.parametrize("data", _ODD_KALLSYMS)
def test_kallsyms_parsed_in_c_reads_odd_texts_as_python_does(data):
    assert _parsed(KernelSymbols.parse, data) == _parsed(KernelSymbols.py_parse, data)
    c, py = KernelDataSymbols.parse(data), KernelDataSymbols.py_parse(data)
    assert (c._starts, c._names) == (py._starts, py._names)


@pytest.mark.skipif(symbols_module._c_data_symbols is None, reason="analyzer/kallsyms.c is not built (make install)")
def test_kallsyms_data_symbols_in_c_read_addresses_as_int_does():
    # what int(field, 16) also reads (a prefix, underscores, a sign) or refuses, beside plain hex; three fields only
    data = (b"0x10 d prefixed\n1_0 D underscored\n+20 b signed\n-30 B negative\nzz d not_hex\n0 d zero\n"
            b"40 d four fields\n50 t text\n60 dd two_letters\nffffffffffffffffff d wide\n8 d b\n8 d a\n")
    c, py = KernelDataSymbols.parse(data), KernelDataSymbols.py_parse(data)

    assert (c._starts, c._names) == (py._starts, py._names)
    assert c._names[:4] == ["negative", "a", "b", "prefixed"]  # -0x30 first, then by address and name


def test_kallsyms_is_read_once_for_both_tables(tmp_path, kallsyms_entries):
    # the text symbols and the data symbols from one read of the file: a copy replaced after the read is not read
    path = tmp_path / "kallsyms"
    with open(KALLSYMS, "rb") as f:
        path.write_bytes(f.read())
    sym = Symbolizer(kallsyms_path=str(path))
    opened = []
    from stallscope.analyzer import symbols

    real_read = symbols.read_whole

    def counting_read(file):
        if str(file) == str(path):
            opened.append(file)
        return real_read(file)

    symbols.read_whole = counting_read
    try:
        sym.preload_kernel(data=True)
    finally:
        symbols.read_whole = real_read

    assert len(opened) == 1
    assert len(sym.kernel_symbols) > 1000
    assert sym._kernel_data is not None


# --------------------------------------------------------------------------------------------
# Frames


def test_frame_text_reads_like_perf():
    def frame(symbol, offset, module, module_offset=None):
        return Frame(0x1000, symbol, offset, module, None, module_offset, "user")

    assert frame("main", 0, "/bin/true").text == "main"
    assert frame("main", 0x1A, "/bin/true").text == "main+0x1a"
    assert frame(None, 0, "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x26100).text == "[libc.so.6+0x26100]"
    assert frame(None, 0, "[anon]").text == "[anon]"
    assert frame(None, 0, "[vdso]", 0x810).text == "[vdso+0x810]"
    assert Frame.unknown(0x10, "user").text == "[unknown]"


# --------------------------------------------------------------------------------------------
# User space: a C program that tells where its functions are

PROGRAM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int known_function(int x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    /* Looked up in libc's own scope: in a non-PIE program, &nanosleep would be the program's
       PLT entry (the canonical address of an imported function), not libc's code. */
    void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_NOW);
    void *vdso = dlopen("linux-vdso.so.1", RTLD_NOLOAD | RTLD_NOW);
    void *anon = mmap(NULL, 65536, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *file = NULL;
    if (argc > 1) {
        int fd = open(argv[1], O_RDONLY);
        file = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    }
    printf("known_function %p\n", (void *)known_function);
    printf("nanosleep %p\n", libc ? dlsym(libc, "nanosleep") : NULL);
    printf("vdso_clock_gettime %p\n", vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL);
    printf("anon %p\n", anon);
    printf("file %p\n", file);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "dlopen", 6) == 0) {   /* map new code after the maps were read */
            /* cbrt, not cos: cos is an IFUNC, whose address is that of the variant chosen. */
            void *libm = dlopen("libm.so.6", RTLD_NOW);
            printf("cbrt %p\n", libm ? dlsym(libm, "cbrt") : NULL);
            fflush(stdout);
        }
    }
    return known_function(argc);
}
"""


def compile_program(tmp_path, name: str, *flags: str) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the test program")
    source = tmp_path / "program.c"
    source.write_text(PROGRAM)
    binary = str(tmp_path / name)
    # --build-id explicitly: not every toolchain adds it by default.
    subprocess.run(["gcc", "-O1", "-g", "-Wl,--build-id", *flags, "-o", binary, str(source), "-ldl"], check=True)
    return binary


class Program:
    """A running test program and the addresses it printed."""

    def __init__(self, binary: str, *args: str):
        self.binary = binary
        self.process = subprocess.Popen([binary, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.process.pid
        self.addrs = self._read_until("ready")

    def _read_until(self, last: str) -> dict[str, int]:
        addrs = {}
        for line in self.process.stdout:
            name, _, value = line.strip().partition(" ")
            if name == last:
                return addrs
            addrs[name] = int(value, 16) if value not in ("(nil)", "") else 0
        raise RuntimeError(f"{self.binary} exited before printing {last!r}")

    def dlopen_libm(self) -> int:
        self.process.stdin.write("dlopen\n")
        self.process.stdin.flush()
        name, value = self.process.stdout.readline().split()
        assert name == "cbrt"
        return int(value, 16)

    def kill(self):
        self.process.kill()
        self.process.wait()


@pytest.fixture
def run_program():
    started = []

    def run(binary: str, *args: str) -> Program:
        program = Program(binary, *args)
        started.append(program)
        return program

    yield run
    for program in started:
        if program.process.poll() is None:
            program.kill()


def build_id_by_readelf(path: str) -> str:
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out).group(1)


def nm_addresses(path: str, *flags: str) -> dict[str, int]:
    out = subprocess.run(["nm", *flags, "--defined-only", path], capture_output=True, text=True, check=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            symbols[parts[2].split("@")[0]] = int(parts[0], 16)
    return symbols


def names_at(path: str, vaddr: int) -> set[str]:
    """Every name nm gives to one address of a library (aliases such as __nanosleep).

    Its exported symbols, and its full table where there is one: in the file, or in the
    installed debug file (Debian's libc6-dbg).
    """
    tables = [nm_addresses(path, "-D")]
    if _has_symtab(path):
        tables.append(nm_addresses(path))
    build_id = build_id_by_readelf(path)
    debug_file = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    if os.path.exists(debug_file):
        tables.append(nm_addresses(debug_file))
    return {name for table in tables for name, addr in table.items() if addr == vaddr}


def mapped_library(pid: int, fragment: str) -> tuple[str, int]:
    """Path and load base of a library mapped by a process, from its maps (first mapping)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and fragment in os.path.basename(parts[5]) and int(parts[2], 16) == 0:
                return parts[5], int(parts[0].split("-")[0], 16)
    raise AssertionError(f"{fragment} is not mapped by {pid}")


@pytest.fixture(params=["pie", "no-pie"])
def program_binary(request, tmp_path):
    flags = ("-fPIE", "-pie") if request.param == "pie" else ("-fno-pie", "-no-pie")
    return compile_program(tmp_path, f"program-{request.param}", *flags)


def test_own_function_and_libc_function_are_named(program_binary, run_program):
    program = run_program(program_binary)
    resolver = UserSymbols(program.pid, process_start_time_ns(program.pid))

    own = resolver.resolve(program.addrs["known_function"])
    libc_call = resolver.resolve(program.addrs["nanosleep"] + 4)

    assert own.text == "known_function"
    assert own.module == program_binary
    assert own.build_id == build_id_by_readelf(program_binary)
    assert own.module_offset == nm_addresses(program_binary)["known_function"]
    assert own.kind == "user"

    libc_path, libc_base = mapped_library(program.pid, "libc.so")
    libc_vaddr = program.addrs["nanosleep"] - libc_base
    assert libc_call.symbol in names_at(libc_path, libc_vaddr)
    assert libc_call.offset == 4
    assert libc_call.module_offset == libc_vaddr + 4
    assert libc_call.build_id == build_id_by_readelf(libc_path)


def test_a_resolver_still_names_a_process_after_it_was_killed(program_binary, run_program):
    program = run_program(program_binary)
    resolver = UserSymbols(program.pid)
    assert resolver.resolve(program.addrs["known_function"]).symbol == "known_function"

    program.kill()

    assert not os.path.exists(f"/proc/{program.pid}")
    assert resolver.resolve(program.addrs["known_function"] + 2).text == "known_function+0x2"
    assert resolver.resolve(program.addrs["nanosleep"]).symbol is not None


def test_a_remembered_process_is_named_after_it_exited_and_its_binary_was_deleted(tmp_path, run_program):
    binary = compile_program(tmp_path, "short-lived")
    program = run_program(binary)
    symbolizer = Symbolizer()
    start = process_start_time_ns(program.pid)
    assert symbolizer.remember(program.pid, start)

    program.kill()
    os.unlink(binary)

    frames = symbolizer.stack("user", program.pid, start, [program.addrs["known_function"], program.addrs["nanosleep"]])
    assert frames[0].symbol == "known_function"
    assert frames[1].symbol is not None


def test_a_stripped_binary_is_named_through_dynsym(tmp_path, run_program):
    binary = compile_program(tmp_path, "stripped", "-rdynamic")
    subprocess.run(["strip", "--strip-all", binary], check=True)
    assert not _has_symtab(binary)
    program = run_program(binary)

    frame = UserSymbols(program.pid).resolve(program.addrs["known_function"])

    assert frame.symbol == "known_function"


def test_a_stripped_binary_is_named_through_its_debuglink(tmp_path, run_program):
    binary = compile_program(tmp_path, "debuglinked")
    debug = binary + ".debug"
    subprocess.run(["objcopy", "--only-keep-debug", binary, debug], check=True)
    subprocess.run(["strip", "--strip-all", binary], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", binary], cwd=tmp_path, check=True)
    assert not _has_symtab(binary)
    program = run_program(binary)

    frame = UserSymbols(program.pid).resolve(program.addrs["known_function"] + 1)

    # known_function is not exported: only the debug file can name it.
    assert frame.text == "known_function+0x1"


def _has_symtab(path: str) -> bool:
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    return ".symtab" in out


def test_a_reused_pid_is_not_taken_for_the_process_that_had_it(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    started = process_start_time_ns(program.pid)
    other_process = UserSymbols(program.pid, started - 5_000_000_000)
    same_process = UserSymbols(program.pid, started)

    assert other_process.resolve(program.addrs["known_function"]).text == "[unknown]"
    assert same_process.resolve(program.addrs["known_function"]).text == "known_function"


def test_code_mapped_later_is_found_by_a_refresh_at_most_once_a_second(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    now = [100.0]
    resolver = UserSymbols(program.pid, clock=lambda: now[0])
    assert resolver.resolve(program.addrs["known_function"]).symbol == "known_function"

    cbrt = program.dlopen_libm()
    assert resolver.resolve(cbrt).text == "[unknown]"  # maps were read less than a second ago

    now[0] += 1.0
    libm_path, libm_base = mapped_library(program.pid, "libm.so")
    assert resolver.resolve(cbrt).symbol in names_at(libm_path, cbrt - libm_base)


def test_vdso_functions_are_named_from_the_image_in_memory(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    if not program.addrs["vdso_clock_gettime"]:
        pytest.skip("this C library does not expose the vdso through dlopen")

    frame = UserSymbols(program.pid).resolve(program.addrs["vdso_clock_gettime"])

    assert frame.module == "[vdso]"
    # clock_gettime is a weak alias of __vdso_clock_gettime in the vdso's .dynsym.
    assert frame.symbol in {"__vdso_clock_gettime", "clock_gettime"}
    assert frame.offset == 0
    assert frame.build_id


def test_perf_map_names_jit_code_in_anonymous_memory(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    anon = program.addrs["anon"]
    perf_map = f"/tmp/perf-{program.pid}.map"
    with open(perf_map, "w") as f:
        f.write(f"{anon:x} 40 LazyCompile:*hot_loop app.js:12\n{anon + 0x40:x} 80 Builtin:CallFunction\n")
    try:
        resolver = UserSymbols(program.pid)

        hot = resolver.resolve(anon + 0x10)
        builtin = resolver.resolve(anon + 0x40)
        unnamed = resolver.resolve(anon + 0x1000)
    finally:
        os.unlink(perf_map)

    assert (hot.symbol, hot.offset, hot.module) == ("LazyCompile:*hot_loop app.js:12", 0x10, "[jit]")
    assert builtin.text == "Builtin:CallFunction"
    assert unnamed.text == "[anon]"


def test_an_unmapped_address_prints_unknown(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))

    assert UserSymbols(program.pid).resolve(0x10).text == "[unknown]"


def test_a_process_that_is_gone_before_it_was_read_prints_unknown(tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    resolver = UserSymbols(program.pid)
    program.kill()

    assert resolver.resolve(program.addrs["known_function"]).text == "[unknown]"


def test_a_non_elf_file_mapped_executable_is_unnamed_without_error(tmp_path, run_program):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not an ELF file\n" * 512)
    program = run_program(compile_program(tmp_path, "program"), str(text_file))

    frame = UserSymbols(program.pid).resolve(program.addrs["file"] + 0x20)

    assert frame.symbol is None
    assert frame.module == str(text_file)
    assert frame.text == "[notes.txt]"
    assert ElfSymbols.from_file(str(text_file)) is None


def test_maps_list_the_programs_own_executable_mapping(tmp_path, run_program):
    binary = compile_program(tmp_path, "program")
    program = run_program(binary)

    maps = ProcessMaps.read(program.pid)
    mapping, file_offset = maps.file_offset(program.addrs["known_function"])

    assert mapping.path == binary
    assert "x" in mapping.perms
    assert mapping.inode == os.stat(binary).st_ino
    assert file_offset == program.addrs["known_function"] - mapping.start + mapping.offset


def test_maps_of_a_process_that_does_not_exist_are_none():
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())

    assert ProcessMaps.read(pid_max + 1) is None


# --------------------------------------------------------------------------------------------
# The collector's entry point


def test_symbolizer_names_kernel_and_user_stacks(kallsyms_entries, tmp_path, run_program):
    program = run_program(compile_program(tmp_path, "program"))
    schedule = address_of(kallsyms_entries, "schedule")
    symbolizer = Symbolizer()
    start = process_start_time_ns(program.pid)

    kernel = symbolizer.stack("kernel", program.pid, start, [schedule + 5, 0x10])
    user = symbolizer.stack("user", program.pid, start, [program.addrs["known_function"], 0x10])

    assert [f.text for f in kernel] == ["schedule+0x5", "[unknown]"]
    assert [f.text for f in user] == ["known_function", "[unknown]"]
    assert symbolizer.kernel(schedule).text == "schedule"
    assert symbolizer.user(program.pid, start, program.addrs["known_function"] + 3).text == "known_function+0x3"


def test_symbolizer_forgets_the_least_recently_used_process_beyond_its_bound(tmp_path, run_program):
    binary = compile_program(tmp_path, "program")
    oldest, middle, newest = (run_program(binary) for _ in range(3))
    symbolizer = Symbolizer(max_processes=2)
    oldest_resolver = symbolizer.process(oldest.pid, None)
    newest_resolver = None

    for program in (oldest, middle, newest):
        symbolizer.user(program.pid, None, program.addrs["known_function"])
        newest_resolver = symbolizer.process(program.pid, None)

    assert symbolizer.process(newest.pid, None) is newest_resolver
    assert symbolizer.process(oldest.pid, None) is not oldest_resolver


def test_symbolizer_rejects_an_unknown_stack_kind():
    with pytest.raises(ValueError):
        Symbolizer().stack("bpf", 1, None, [0x10])


def test_processes_with_the_same_maps_share_one_parse_and_an_exec_reads_new_ones():
    text = ("55d0c0a00000-55d0c0a01000 r-xp 00001000 08:01 1234 /usr/bin/forked\n"
            "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]\n")
    parent, child = ProcessMaps.parse(1000, text), ProcessMaps.parse(1001, text)
    assert child.mappings is parent.mappings and child.pid == 1001
    # what remembering and naming read of them is made once too: the file and vdso mappings, the starts
    assert child.kept is parent.kept and [m.path for m in child.kept] == ["/usr/bin/forked", "[vdso]"]
    assert child._starts is parent._starts and child.find(0x7F0000000010).path == "[vdso]"
    after_exec = ProcessMaps.parse(1001, text.replace("/usr/bin/forked", "/usr/bin/other"))
    assert after_exec.mappings is not parent.mappings
    assert after_exec.find(0x55D0C0A00010).path == "/usr/bin/other"


def test_a_file_mapped_by_many_processes_is_found_once_then_checked_again_later(program_binary, run_program,
                                                                                monkeypatch):
    """The hundreds of processes a program forks map the same libraries: after the first, a mapping
    of the same (device, inode, path) takes no stat, until MAPPED_RECHECK_S has passed."""
    from stallscope.analyzer import symbols

    program = run_program(program_binary)
    now = [100.0]
    cache = symbols.ElfCache(clock=lambda: now[0])
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(symbols.os, "stat", lambda p, *a, **k: (stats.append(p), real_stat(p, *a, **k))[1])
    first = UserSymbols(program.pid, elf_cache=cache)
    assert first.remember()
    files = [m for m in first.maps.mappings if m.is_executable and m.is_file]
    assert files and stats
    assert first.resolve(program.addrs["known_function"]).text == "known_function"

    stats.clear()
    second = UserSymbols(program.pid, elf_cache=cache)  # another process mapping the same files
    assert second.remember()
    assert not [p for p in stats if not p.startswith(f"/proc/{program.pid}/stat")], stats
    assert second.resolve(program.addrs["known_function"]).text == "known_function"

    now[0] += symbols.MAPPED_RECHECK_S
    stats.clear()
    assert UserSymbols(program.pid, elf_cache=cache).remember()
    assert any(p == m.file_path or p.endswith(m.file_path) for p in stats for m in files), stats


def test_a_forked_child_is_named_from_its_parents_maps_and_reads_its_own_only_on_a_miss(monkeypatch):
    """hackbench's 400 children, a server's workers: a fork without exec copies the address space, so
    the parent's maps name the child's code without the kernel listing the child's maps again."""
    import ctypes
    import mmap
    import signal

    libc = ctypes.CDLL(None)
    addr = ctypes.cast(libc.nanosleep, ctypes.c_void_p).value
    r, w = os.pipe()
    pid = os.fork()
    size = 64 << 20  # large, so that nothing the parent maps after the fork can cover its start
    if pid == 0:  # the child maps a region of its own, which the parent never had, then waits
        region = mmap.mmap(-1, size, prot=mmap.PROT_READ | mmap.PROT_EXEC)  # noqa: F841
        os.write(w, b"!")
        time.sleep(30)
        os._exit(0)
    try:
        os.read(r, 1)
        symbolizer = Symbolizer()
        parent_start = process_start_time_ns(os.getpid())
        assert symbolizer.remember(os.getpid(), parent_start)
        reads = []
        real = ProcessMaps.read
        monkeypatch.setattr(ProcessMaps, "read", classmethod(lambda cls, p: reads.append(p) or real.__func__(cls, p)))
        child_start = process_start_time_ns(pid)
        assert symbolizer.remember_fork(pid, child_start, os.getpid(), parent_start)
        assert reads == []  # the parent's maps, not a read of the child's
        frame = symbolizer.user(pid, child_start, addr)
        assert frame.symbol == symbolizer.user(os.getpid(), parent_start, addr).symbol and frame.symbol
        assert reads == []
        with open(f"/proc/{pid}/maps") as f:  # the child's own region: not in the parent's maps
            spans = [[int(x, 16) for x in line.split()[0].split("-")] for line in f]
        only_child = next(start for start, end in spans if end - start == size)
        assert symbolizer.process(os.getpid(), parent_start).maps.find(only_child) is None
        symbolizer.user(pid, child_start, only_child)
        assert reads == [pid]  # a miss reads the child's own maps, once
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)


def test_a_parents_stale_maps_are_not_handed_to_a_child():
    clock = [100.0]
    parent = UserSymbols(1, clock=lambda: clock[0])
    parent._maps, parent._maps_read, parent._last_refresh = ProcessMaps(1, ()), True, 100.0
    child = UserSymbols(2, clock=lambda: clock[0])
    assert child.inherit(parent)
    clock[0] += 60
    assert not UserSymbols(3, clock=lambda: clock[0]).inherit(parent)


def test_preloading_reads_kallsyms_once_and_data_symbols_only_when_asked(tmp_path, monkeypatch):
    """Before a recording's command starts: the text symbols always (every kernel stack needs them),
    the data symbols only for the lock probe; a later lookup reads the file no more."""
    from stallscope.analyzer import symbols

    path = tmp_path / "kallsyms"
    path.write_text("ffffffff81000000 T _stext\nffffffff81000100 T schedule\nffffffff82000000 D some_lock\n")
    reads = []
    real_read = symbols.read_whole
    monkeypatch.setattr(symbols, "read_whole", lambda p: (reads.append(p) if str(p) == str(path) else None)
                        or real_read(p))
    s = Symbolizer(kallsyms_path=str(path))
    s.preload_kernel()
    assert len(reads) == 1 and s._kernel_data is None
    s.preload_kernel(data=True)
    assert len(reads) == 2
    assert s.kernel(0xFFFFFFFF81000105).text == "schedule+0x5"
    assert s.kernel_data(0xFFFFFFFF82000000) == "some_lock"
    assert len(reads) == 2


def test_a_processs_image_is_kept_by_a_fork_and_moved_by_an_exec():
    """process_image: a forked child's is its parent's, an exec's (even of the same program) is not; a kernel
    thread has none, nor a process that is gone."""
    me = process_image(os.getpid())
    assert me is not None and all(me)
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    exec_d = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_image(pid) == me
        deadline = time.monotonic() + 10
        while process_image(exec_d.pid) in (me, None) and time.monotonic() < deadline:  # until its exec is done
            time.sleep(0.01)
        assert process_image(exec_d.pid) not in (me, None)
        assert process_image(2) is None  # kthreadd
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        exec_d.kill()
        exec_d.wait()
    assert process_image(pid) is None


def test_an_image_the_kernel_hides_is_none(monkeypatch):
    """A process this reader may not trace shows its startcode and endcode as 1 and the rest as 0 (fs/proc/array.c;
    here, the VM's own pid 1 as root): alike for any two such processes, so no image, not a match."""
    from stallscope import procstat

    monkeypatch.setattr(procstat, "numbers", lambda pid, wanted: (1, 1, 0, 0, 0))
    assert procstat.image(1234) is None

