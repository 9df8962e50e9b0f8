"""The futex collector: loads futex.bpf.o, attaches the syscall hooks and the
libc lock-call uprobes, and drains the cumulative per-(waiter, futex word,
user stack, lock call site) aggregates into interval deltas.

The waits are seen by the first of MECHANISMS this kernel allows: at the
scheduler (sched_switch: a sleep inside a futex call, its arguments read from
the task's saved registers; no system call is traced), else classic tracepoint
programs on the futex system calls' own tracefs events (only futex calls run
BPF, but every system call takes the syscall-tracepoint slow path), else
tp_btf on the generic sys_enter/sys_exit (every system call of the machine
runs two programs). They record the same keys; the scheduler sees only the
waits that slept, the syscall hooks also the calls that returned at once.

Addresses are named while the process can still be read: the caller's
return address as `sym+0xoff`, the futex word by the data symbol holding it
(a `static pthread_mutex_t lock` is `lock`), user stacks by the StackReader.
A process can exit long before the next drain (a short command, or a first
drain that spends a second reading every process on the machine), so the BPF
side announces each new aggregate key on a ring buffer and a thread reads the
process's maps at once; the ELF files themselves outlive it on disk.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import os
import re
import shutil
import struct
import sys
import threading
import time
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

from stallscope import __version__, disk_cache
from stallscope.analyzer.sample import FutexDelta, ProbeStatus, TaskId, Tuning
from stallscope.analyzer.symbols import SHARED_ELF_CACHE, Frame, ProcessMaps, Symbolizer, UserSymbols, untrusted_file
from stallscope.analyzer.untrusted import run_bounded
from stallscope.bpf import abi, tune
from stallscope.bpf.intervals import IntervalNumbers
from stallscope.bpf.tune import DEFAULT_TUNE, StackTune
from stallscope.bpf.collector import HealthDeltas, ProgramDeltas, StackReader, object_path
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.sizing import DEFAULT_SIZES, MapSizes
from stallscope.bpf.libbpf import BpfError, BpfObject, tracepoint_ids

try:  # a file's data objects listed in C (analyzer/kallsyms.c)
    from stallscope.analyzer._kallsyms import elf_objects as _c_elf_objects
except ImportError:
    _c_elf_objects = None

# The libc functions whose callers want a lock; the return address into the
# user's function names it. Debian 12's glibc 2.36 exports each under two
# symbol versions at one address: one uprobe per address. Uprobes go on the
# calls into their slow paths (see slow_path_sites): an uncontended lock never
# traps, which matters because a uprobe trap costs ~28 us on this VM against
# ~10 ns for the lock. Each uprobe also costs ~0.1 s to remove (an RCU grace
# period, serialised in the kernel), so the list is the common ones: the
# timed and clock variants, semaphores and PI/robust mutexes (reached through
# tail jumps into shared slow paths) are named from user stacks only.
LOCK_FUNCTIONS = ("pthread_mutex_lock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock")

# The ways to see futex waits, cheapest first, and their programs (the one that begins a wait first).
# Measured on this 2-CPU VM (CPU time of a getppid() loop): 251 ns untraced, 337 ns with the
# tracepoints (the syscall tracepoints' slow path alone: no program runs), 660 ns with tp_btf (two
# programs per call); sched_switch adds nothing to a system call, one program to each context switch.
MECHANISMS = ("sched_switch", "tracepoint", "tp_btf")
PROGRAMS = {"sched_switch": ("futex_switch",), "tracepoint": ("futex_enter", "futex_exit"),
            "tp_btf": ("futex_sys_enter", "futex_sys_exit")}
# futex(2), futex_waitv(2) (5.16+), futex_wait(2) (6.7+): syscalls:sys_{enter,exit}_NAME
SYSCALLS = ("futex", "futex_waitv", "futex_wait")

# A libc lock function and the futex call under it stay within this much stack.
CALLER_SP_RANGE = 4096

_LIBC = re.compile(r"/libc(\.so\.6|-[0-9.]+\.so)$")
_STT_OBJECT, _STT_FUNC = 1, 2
_SHN_UNDEF = 0


_PIDFD_THREAD = os.O_EXCL  # include/uapi/linux/pidfd.h: a pidfd for one thread, not its group (6.9+)


def _threads(tgid: int = 0):
    """Thread ids of one process, or of every process."""
    procs = [str(tgid)] if tgid else [p for p in os.listdir("/proc") if p.isdigit()]
    for p in procs:
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            if t.isdigit():
                yield int(t)


def libc_of(pid: int = 0) -> str | None:
    """The C library a process maps (our own when pid is 0), as a path we can open."""
    maps = ProcessMaps.read(pid or os.getpid())
    for m in maps.mappings if maps is not None else ():
        if m.is_file and _LIBC.search(m.path):
            path = m.path
            # a process in another mount namespace: its file, through its root
            return f"/proc/{pid}/root{path}" if pid and os.path.exists(f"/proc/{pid}/root{path}") else path
    return None


# objdump and readelf read the C library of a traced process, which may be anyone's: bounded in time
# (all their runs together) and output
TOOLS_SECONDS = 30.0
TOOL_OUTPUT_BYTES = 256 << 20  # objdump -d of all of libc writes 12 MB


_OBJDUMP_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(call|jmp)\s+([0-9a-f]+) <([^>]*)>\s*$")
_FDE_HEAD = re.compile(r"FDE\b[^\n]*?\bpc=([0-9a-f]+)\.\.([0-9a-f]+)")  # a literal first: a fast scan of 2 MB
_CFA_ROW = re.compile(r"^([0-9a-f]{8,16}) +(\S+)")



class _Fde:
    """One FDE of `readelf --debug-dump=frames-interp`: its pc range, and its rows parsed only when asked
    (libc has thousands of FDEs; a site search reads the rows of a few)."""

    __slots__ = ("lo", "hi", "_text", "_span", "_rows")

    def __init__(self, lo: int, hi: int, text: str, span: tuple[int, int]):
        self.lo, self.hi, self._text, self._span, self._rows = lo, hi, text, span, None

    @property
    def rows(self) -> list[tuple[int, int]]:
        """[(address, CFA offset from rsp)]; 0 where the CFA is not rsp-based (a frame pointer): no offset
        is known there."""
        if self._rows is None:
            self._rows = []
            for line in self._text[self._span[0]:self._span[1]].splitlines():
                m = _CFA_ROW.match(line)
                if m:
                    cfa = m.group(2)
                    self._rows.append((int(m.group(1), 16),
                                       int(cfa[4:]) if cfa.startswith("rsp+") and cfa[4:].isdigit() else 0))
        return self._rows


def _frames(path: str, tool: str, deadline: float, fd: int) -> list[_Fde]:
    """Each FDE of `readelf --debug-dump=frames-interp`, in the file's order."""
    # readelf exits 1 over sections it cannot dump (no .debug_info): the frames are printed all the same
    text = run_bounded([tool, "--debug-dump=frames-interp", path], deadline - time.monotonic(), TOOL_OUTPUT_BYTES,
                       pass_fds=(fd,))
    out = []
    for m in _FDE_HEAD.finditer(text):
        end = text.find("\n\n", m.end())  # an FDE's rows end at a blank line
        out.append(_Fde(int(m.group(1), 16), int(m.group(2), 16), text, (m.end(), end if end >= 0 else len(text))))
    return out


def slow_path_sites(path: str, names) -> dict[int, int]:
    """File offset -> CFA offset (from SP) of each call from the named functions into an internal
    helper: their slow paths (pthread_mutex_lock calls __lll_lock_wait only when the mutex is taken).

    Calls to exported functions (pthread_testcancel at sem_wait's start) are fast-path work and
    left out, as are helpers that never enter the kernel. Instruction boundaries come from objdump,
    frame sizes from .eh_frame through readelf: a uprobe is only ever placed on an instruction.
    """
    objdump, readelf = shutil.which("objdump"), shutil.which("readelf")
    if not objdump or not readelf:
        return {}
    with untrusted_file(path) as f:
        # the tools read the file checked and opened here, through our descriptor, not the path again
        fd = f.fileno()
        return _slow_path_sites(f, f"/proc/self/fd/{fd}", fd, set(names), objdump, readelf,
                                time.monotonic() + TOOLS_SECONDS)


def _slow_path_sites(f, path: str, fd: int, wanted: set, objdump: str, readelf: str, deadline: float) -> dict[int, int]:
    starts: dict[int, str] = {}
    targets: dict[str, int] = {}
    elf = ELFFile(f)
    segments = [(s["p_vaddr"], s["p_filesz"], s["p_offset"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    for name, _info, shndx, value, _size in elf_symbols(elf, (".dynsym",), _STT_FUNC):
        if value and shndx != _SHN_UNDEF:
            starts[value] = name
            if name in wanted:
                targets[name] = value
    fdes = _frames(path, readelf, deadline, fd)

    def fde_of(addr):
        return next((fde for fde in fdes if fde.lo <= addr < fde.hi), None)

    def disassemble(lo: int, hi: int) -> str:
        return run_bounded([objdump, "-d", "--no-show-raw-insn", f"--start-address={lo:#x}", f"--stop-address={hi:#x}",
                            path], deadline - time.monotonic(), TOOL_OUTPUT_BYTES, pass_fds=(fd,))

    def branches(lo: int, hi: int):
        for line in disassemble(lo, hi).splitlines():
            m = _OBJDUMP_LINE.match(line)
            if m:
                yield int(m.group(1), 16), m.group(2), int(m.group(3), 16)

    waits: dict[int, bool] = {}

    def makes_syscalls(target: int, depth: int = 0) -> bool:
        """Whether a helper enters the kernel, itself or through the helper it calls (the futex
        wait): calls into helpers that do not (priority or robust-list bookkeeping of PI mutexes)
        are not worth a uprobe, each of which costs ~0.1 s to remove."""
        if target not in waits:
            fde = fde_of(target)
            text = disassemble(fde.lo, fde.hi) if fde is not None else ""
            waits[target] = "\tsyscall" in text or depth < 1 and any(
                makes_syscalls(int(m.group(3), 16), depth + 1) for m in map(_OBJDUMP_LINE.match, text.splitlines())
                if m and int(m.group(3), 16) not in starts and not fde.lo <= int(m.group(3), 16) < fde.hi)
        return waits[target]

    try:
        return _sites(targets, fde_of, branches, makes_syscalls, starts, segments)
    finally:
        makes_syscalls = None  # it calls itself through its closure: a cycle holding every FDE otherwise


def _sites(targets, fde_of, branches, makes_syscalls, starts, segments) -> dict[int, int]:
    """The call sites of the wanted functions' slow paths: {file offset: CFA offset from rsp}."""
    sites: dict[int, int] = {}
    for fde in {fde_of(v).lo: fde_of(v) for v in targets.values() if fde_of(v) is not None}.values():
        lo, hi, rows = fde.lo, fde.hi, fde.rows
        for addr, kind, target in branches(lo, hi):
            if kind != "call" or lo <= target < hi:
                continue
            if target in starts or not makes_syscalls(target):
                continue
            cfa = max((r for r in rows if r[0] <= addr), default=None)
            if cfa is None or not cfa[1]:
                continue
            for vaddr, size, offset in segments:
                if vaddr <= addr < vaddr + size:
                    sites[addr - vaddr + offset] = cfa[1]
                    break
    return sites


# a round of ~5 ms: within 1-2% of 2,000 calls (9.7-9.8 us against 9.7-10.0 us), in a quarter of the time
CALIBRATION_CALLS = 500
# the interpreter's switch interval while the rounds run (0.005 s by default): longer than a round, so that no other
# thread of this process takes the interpreter in the middle of one
CALIBRATION_SWITCH_S = 0.05


def measure_uprobe_trap(prog, libc: str, off: int | None = None, removals: list | None = None) -> int:
    """What one uprobe hit costs on this machine, in ns (0: not measured): `prog` at libc's getppid()
    (at `off` when known) for this process only, a loop of calls timed with and without it (the fastest
    of three rounds each). The trap into the kernel and back is not in any program's run-time
    statistics; it is most of a hit's cost (8.8 us a hit on a 2-CPU VM, 1-2 us on bare metal), and the
    overhead budget charges it per hit (analyzer/overhead.py). `removals`: the probe's removal, which
    waits for an RCU grace period (0.1 s), is started in a thread put there, for the caller to join.

    The calls keep the interpreter's lock (ctypes.PyDLL), and the switch interval is longer than a round: called
    through ctypes.CDLL, each call let the lock go, and beside another thread busy in Python (the kernel's tables
    parsed while the probes load) a call of 0.2 us took 11-43 us, so the timing waited for that thread first."""
    if off is None:
        off = function_file_offsets(libc, ("getppid",)).get("getppid")
    if off is None:
        return 0
    call = ctypes.PyDLL(libc).getppid

    def rounds() -> int:
        # only the rounds: where the lock is let go (the attach, a thread started), another thread that takes it
        # keeps it for the switch interval, and with the longer one each such wait was up to 50 ms (0.15-0.2 s a start)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(max(interval, CALIBRATION_SWITCH_S))
        try:
            best = 1 << 62
            for _ in range(3):
                t0 = time.perf_counter_ns()
                for _ in range(CALIBRATION_CALLS):
                    call()
                best = min(best, time.perf_counter_ns() - t0)
        finally:
            sys.setswitchinterval(interval)
        return best

    base = rounds()
    link = prog.attach_uprobe(libc, off, pid=os.getpid(), cookie=8)
    try:
        traced = rounds()
    finally:
        if removals is None:
            link.destroy()
        else:
            removal = threading.Thread(target=link.destroy, name="uprobe-removal", daemon=True)
            removal.start()
            removals.append(removal)
    return max(traced - base, 0) // CALIBRATION_CALLS


@dataclass(frozen=True)
class LockCallSites:
    """Where the lock-call uprobes go in a C library, worked out from the file alone."""

    libc: str | None
    sites: dict  # file offset -> CFA offset from SP
    note: str  # how they were placed, when not as designed
    why_not: str  # why there are none ("" when there are)
    getppid: int | None  # the calibration's function (measure_uprobe_trap)


_SITES: dict[tuple, LockCallSites] = {}
_SITES_LOCK = threading.Lock()


def lock_call_sites(targ_tgid: int = 0) -> LockCallSites:
    """The lock-call sites of the C library the target (or stallscope) maps, read once per file (its path
    and identity) and kept: objdump, readelf and the ELF reads take 0.2 s, and the file does not change
    between two sessions of one process (a test run's, or a live view restarted)."""
    libc = libc_of(targ_tgid) or libc_of(0)
    if libc is None:
        return LockCallSites(None, {}, "", "no C library found in the process maps: lock callers are named from "
                                            "user stacks only", None)
    try:
        st = os.stat(libc)
        # ctime too: a file rewritten and given its old mtime back (utimensat) has a new ctime
        key = (libc, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        key = (libc,)
    with _SITES_LOCK:  # a second caller waits for the first's result
        found = _SITES.get(key)
        if found is None and len(key) > 1:  # worked out by an earlier run (stallscope/disk_cache.py)
            found = _sites_from_disk(key)
        if found is None:
            found, lasting = _lock_call_sites(libc)
            if lasting:  # a tool that failed (timed out on a loaded machine) is asked again next time
                _SITES[key] = found
                if len(key) > 1:
                    disk_cache.write(SITES_CACHE, _disk_key(key), _sites_json(found))
        else:
            _SITES[key] = found
    return found


SITES_CACHE = "libc-lock-sites"
SITES_FORMAT = 1  # of the entries kept on disk: raised when what they hold changes


def _disk_key(key: tuple) -> str:
    """A C library's identity, with this code's (a changed analysis works the sites out again)."""
    try:
        me = os.stat(__file__)
        code = (me.st_size, me.st_mtime_ns)
    except OSError:
        code = (0, 0)
    return json.dumps([SITES_FORMAT, __version__, *code, *key])


def _sites_json(found: LockCallSites) -> dict:
    return {"libc": found.libc, "sites": [[off, cfa] for off, cfa in sorted(found.sites.items())], "note": found.note,
            "why_not": found.why_not, "getppid": found.getppid}


def _sites_from_disk(key: tuple) -> LockCallSites | None:
    """The sites an earlier run kept for this file, or None (none kept, or not as this code keeps them)."""
    e = disk_cache.read(SITES_CACHE).get(_disk_key(key))
    try:
        sites = {int(off): int(cfa) for off, cfa in e["sites"]}
        getppid = e["getppid"]
        if e["libc"] != key[0] or not isinstance(e["note"], str) or not isinstance(e["why_not"], str) or not (
                getppid is None or isinstance(getppid, int)):
            return None
        return LockCallSites(e["libc"], sites, e["note"], e["why_not"], getppid)
    except (KeyError, TypeError, ValueError):
        return None


def _lock_call_sites(libc: str) -> tuple[LockCallSites, bool]:
    """The sites, and whether they are the file's for good (not a failure to read it)."""
    note = ""
    try:
        sites = slow_path_sites(libc, LOCK_FUNCTIONS)
        offsets = function_file_offsets(libc, (*LOCK_FUNCTIONS, "getppid"))
        if not sites:
            # no objdump/readelf or no .eh_frame: at the entry, where the return address is at SP
            # (CFA = SP + 8), at the price of a trap on every lock call
            sites = {off: 8 for name, off in offsets.items() if name in LOCK_FUNCTIONS}
            note = "slow-path calls not found: uprobes at the lock functions' entry (every lock call traps)"
    except Exception as exc:  # noqa: BLE001  (pyelftools and the binutils raise many types)
        return LockCallSites(libc, {}, "", f"cannot read {libc} ({exc}): lock callers are named from user stacks only",
                             None), False
    if not sites:
        return LockCallSites(libc, {}, "", f"no pthread lock functions in {libc}: lock callers are named from user "
                                           "stacks only", offsets.get("getppid")), True
    return LockCallSites(libc, sites, note, "", offsets.get("getppid")), True


def function_file_offsets(path: str, names) -> dict[str, int]:
    """File offsets (what a uprobe attaches at) of the named functions defined in an ELF file."""
    wanted = set(names)
    out: dict[str, int] = {}
    with untrusted_file(path) as f:
        elf = ELFFile(f)
        segments = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        for name, _info, shndx, value, _size in elf_symbols(elf, (".dynsym", ".symtab"), _STT_FUNC):
            name = name.split("@")[0]
            if name not in wanted or name in out or shndx == _SHN_UNDEF or not value:
                continue
            for seg in segments:
                if seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_filesz"]:
                    out[name] = value - seg["p_vaddr"] + seg["p_offset"]
                    break
    return out


def _symbol_sections(elf: ELFFile, tables):
    """(symbols, strings) bytes of each of the named symbol tables the file holds, in order."""
    for table in tables:
        section = elf.get_section_by_name(table)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            continue
        yield section.data(), elf.get_section(section["sh_link"]).data()


def elf_symbols(elf: ELFFile, tables, kind: int | None = None):
    """(name, st_info, st_shndx, value, size) of each named symbol in the named symbol tables, in order; only those
    of type `kind` (STT_*) when given, whose names alone are decoded (libpython's table of data objects for naming
    futex words, 8,970 of its 16,697 symbols: 20 -> 13-15 ms; libc's, 205 of 3,043: 6.2 -> 4.6 ms).

    Decoded with struct: pyelftools takes most of a millisecond per symbol, and a C library has
    thousands (an executable with a full .symtab tens of thousands)."""
    for data, strings in _symbol_sections(elf, tables):
        yield from symbol_entries(data, strings, elf.elfclass == 64, elf.little_endian, kind)


def symbol_entries(data: bytes, strings: bytes, is_64: bool, little_endian: bool, kind: int | None = None):
    """elf_symbols' entries of one symbol table (its bytes, and its string table's)."""
    order = "<" if little_endian else ">"
    # Elf64_Sym: name, info, other, shndx, value, size; Elf32_Sym: name, value, size, info, other, shndx
    fmt, pick = ((order + "IBBHQQ", lambda e: (e[0], e[1], e[3], e[4], e[5])) if is_64
                 else (order + "IIIBBH", lambda e: (e[0], e[3], e[5], e[1], e[2])))
    usable = len(data) - len(data) % struct.calcsize(fmt)
    for entry in struct.iter_unpack(fmt, data[:usable]):
        name_at, info, shndx, value, size = pick(entry)
        if kind is not None and info & 0xF != kind:
            continue
        end = strings.find(b"\0", name_at)
        name = strings[name_at:end if end >= 0 else len(strings)].decode("utf-8", "replace")
        if name:
            yield name, info, shndx, value, size


_OBJECT_TABLES = (".symtab", ".dynsym")


def object_table(path: str) -> tuple[list[int], list[int], list[str]]:
    """(starts, ends, names) of the data objects in an ELF file's symbol tables, in the order of (address, size at
    least 1, name): in C where analyzer/kallsyms.c is built and the names are ASCII (elf_objects: libpython's 8,970
    took 13-15 ms here, on the way to a live view's first data), else py_object_table; the same either way."""
    with untrusted_file(path) as f:
        elf = ELFFile(f)
        if _c_elf_objects is not None:
            made = _c_elf_objects([(data, strings, (), elf.elfclass == 64, elf.little_endian)
                                   for data, strings in _symbol_sections(elf, _OBJECT_TABLES)])
            if made is not None:
                return made
        return _py_object_table(elf)


def py_object_table(path: str) -> tuple[list[int], list[int], list[str]]:
    """object_table in Python."""
    with untrusted_file(path) as f:
        return _py_object_table(ELFFile(f))


def _py_object_table(elf: ELFFile) -> tuple[list[int], list[int], list[str]]:
    entries = sorted((value, max(size, 1), name)
                     for name, _info, _shndx, value, size in elf_symbols(elf, _OBJECT_TABLES, _STT_OBJECT) if value)
    return [e[0] for e in entries], [e[0] + e[1] for e in entries], [e[2] for e in entries]


class DataSymbols:
    """Names a data address of a process by the ELF object symbol (global or static variable) holding it."""

    def __init__(self) -> None:
        self._tables: dict[str, tuple[list[int], list[int], list[str]]] = {}

    def _table(self, path: str):
        table = self._tables.get(path)
        if table is None:
            try:
                table = object_table(path)
            except Exception:  # noqa: BLE001  (a malformed file costs a name, never the collector)
                table = ([], [], [])
            self._tables[path] = table
        return table

    def name(self, maps, addr: int) -> str:
        """`lock` for an address inside `static pthread_mutex_t lock`; "" when no symbol holds it."""
        if maps is None:
            return ""
        mapping = maps.find(addr)
        if mapping is None:
            return ""
        if not mapping.is_file:
            # .bss beyond the file's last page is an anonymous mapping right after the file's
            # writable one, with the same load bias
            i = maps.mappings.index(mapping)
            prev = maps.mappings[i - 1] if i > 0 else None
            if prev is None or not prev.is_file or prev.end != mapping.start:
                return ""
            mapping = prev
        path = mapping.file_path
        elf = SHARED_ELF_CACHE.get(path)
        base = elf.vaddr_of_file_offset(mapping.offset) if elf is not None else None
        if base is None:
            return ""
        vaddr = base + (addr - mapping.start)
        starts, ends, names = self._table(path)
        i = bisect.bisect_right(starts, vaddr) - 1
        if i < 0 or vaddr >= ends[i]:
            return ""
        off = vaddr - starts[i]
        return names[i] if off == 0 else f"{names[i]}+{off:#x}"


class _Processes:
    """User symbols of the processes with futex waits: the maps read early (by the ring-buffer
    thread) when there are some, else the shared Symbolizer's. Also the symbolizer of the
    StackReader, so user stacks of a process that exited are named from the same maps."""

    def __init__(self, symbolizer: Symbolizer):
        self.symbolizer = symbolizer
        self.early: dict[tuple[int, int], UserSymbols] = {}

    def read_early(self, tgid: int, leader_start_ns: int) -> None:
        key = (tgid, leader_start_ns)
        if key in self.early or len(self.early) >= 4096:
            return
        r = UserSymbols(tgid, leader_start_ns, elf_cache=SHARED_ELF_CACHE)
        if r.maps is not None:  # read now; a pid reused since is refused by its start time
            self.early[key] = r

    def process(self, tgid: int, leader_start_ns: int) -> UserSymbols:
        return self.early.get((tgid, leader_start_ns)) or self.symbolizer.process(tgid, leader_start_ns)

    def kernel(self, addr: int) -> Frame:
        return self.symbolizer.kernel(addr)

    def stack(self, kind: str, pid: int, start_time_ns: int | None, addrs) -> tuple[Frame, ...]:
        if kind != "user":
            return self.symbolizer.stack(kind, pid, start_time_ns, addrs)
        resolver = self.process(pid, start_time_ns or 0)
        return tuple(resolver.resolve(a) for a in addrs)

    def forget_dead(self, live: set[tuple[int, int]]) -> None:
        for key in [k for k in self.early if k not in live]:
            del self.early[key]


class FutexCollector:
    def __init__(self, symbolizer: Symbolizer, targ_tgid: int = 0, stack_tune: StackTune = DEFAULT_TUNE,
                 sched_state_fd: int = -1,
                 user_stacks: bool = True, max_stacks: int = DEFAULT_SIZES.stack_entries,
                 mechanisms: tuple[str, ...] = MECHANISMS, max_tasks: int = DEFAULT_SIZES.tasks):
        self.symbolizer = symbolizer
        self.sizes = MapSizes(max_tasks, max_stacks)
        self.mechanisms = mechanisms
        self.mechanism = ""
        self.targ_tgid = targ_tgid
        self.stack_tune = stack_tune
        self.sched_state_fd = sched_state_fd
        self.user_stacks = user_stacks
        self.obj: BpfObject | None = None
        self._procs = _Processes(symbolizer)
        self._stacks = StackReader(self._procs, max_stacks)  # type: ignore[arg-type]
        self._ring = None
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()
        self._health = HealthDeltas(abi.FutexHealth, prefix="futex.")
        self._programs = ProgramDeltas()
        # key bytes -> (value bytes, task, previous totals, (tgid, leader start)): unchanged entries
        # are skipped by their bytes
        self._prev: dict[bytes, tuple] = {}
        self._numbers = IntervalNumbers()  # the intervals the extremes are kept by (bpf/interval.h)
        self._names: dict[tuple[int, int, str, int], str] = {}
        self._data = DataSymbols()
        self._uprobe_links: list = []
        self._charged: list[tuple[abi.FutexInflight, int]] = []
        self.uprobe_trap_ns = 0  # measured at start (measure_uprobe_trap)
        self._removals: list[threading.Thread] = []  # the calibration probe's removal (measure_uprobe_trap)

    def start(self) -> ProbeStatus:
        """Load and attach with the first mechanism this kernel allows; never raises for a kernel
        that cannot: the status says why."""
        failed: list[str] = []
        for mech in self.mechanisms:
            try:
                self.obj = self._load(mech)
                self.mechanism = mech
                break
            except BpfError as exc:
                failed.append(f"{mech}: {exc.message}")
        else:
            return ProbeStatus(False, "", "; ".join(failed))
        obj = self.obj
        try:
            self._ring = obj.ring_buffer("new_keys", self._on_new_key)
        except BpfError as exc:
            obj.close()
            self.obj = None
            return ProbeStatus(False, "", exc.message)
        self._reader = threading.Thread(target=self._read_new_keys, name="futex-new-keys", daemon=True)
        self._reader.start()
        reasons = []
        if failed:
            reasons.append(f"{'; '.join(failed)}: {self.mechanism} instead"
                           + (" (two programs on every system call)" if self.mechanism == "tp_btf" else ""))
        reason = self._attach_lock_calls(obj)
        if reason:
            reasons.append(reason)
        uprobes = any(link.name == "lock_call" for link in obj.links)
        return ProbeStatus(True, f"{self.mechanism}+uprobe" if uprobes else self.mechanism, "; ".join(reasons))

    def _load(self, mech: str) -> BpfObject:
        """futex.bpf.o with only this mechanism's syscall programs (and the uprobe's) loaded, and
        those attached; raises BpfError."""
        obj = BpfObject(object_path("futex.bpf.o"))
        try:
            cfg = abi.FutexConfig(targ_tgid=self.targ_tgid, self_tgid=os.getpid(),
                                  user_stacks=int(self.user_stacks), caller_sp_range=CALLER_SP_RANGE)
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            tune.write(obj, self.stack_tune)
            if self.sched_state_fd >= 0:
                obj.map("task_stats").reuse_fd(self.sched_state_fd)
            obj.map("futex_waits").set_max_entries(self.sizes.futex)
            obj.map("stacks").set_max_entries(self.sizes.stack_entries)
            for prog in obj.programs():
                prog.autoload = prog.name in PROGRAMS[mech] or prog.name == "lock_call"
            obj.load()
            if mech == "tracepoint":
                self._attach_syscall_tracepoints(obj)
            else:
                for name in PROGRAMS[mech]:
                    obj.attach(obj.program(name))
        except BpfError:
            obj.close()
            raise
        return obj

    @staticmethod
    def _attach_syscall_tracepoints(obj: BpfObject) -> None:
        """One program on the entry events of futex, futex_waitv and futex_wait, one on their exits
        (an older kernel lacks the newer calls: their waits go unseen, as with any tracer there)."""
        names = [f"sys_{d}_{call}" for call in SYSCALLS for d in ("enter", "exit")]
        ids = tracepoint_ids("syscalls", names)
        if "sys_enter_futex" not in ids or "sys_exit_futex" not in ids:
            raise BpfError("no syscalls:sys_enter_futex tracepoint (CONFIG_FTRACE_SYSCALLS off?)", 2)
        enter, exit_ = (obj.program(name) for name in PROGRAMS["tracepoint"])
        for call in SYSCALLS:
            if f"sys_enter_{call}" in ids and f"sys_exit_{call}" in ids:
                obj.links.append(exit_.attach_tracepoint_id(ids[f"sys_exit_{call}"], f"syscalls:sys_exit_{call}"))
                obj.links.append(enter.attach_tracepoint_id(ids[f"sys_enter_{call}"], f"syscalls:sys_enter_{call}"))

    def _read_new_keys(self) -> None:
        while not self._stop.is_set():
            try:
                self._ring.poll(100)
            except BpfError:
                return

    def _on_new_key(self, raw: bytes) -> None:
        e = abi.decode(abi.FutexNewKey, raw)
        self._procs.read_early(e.tgid, e.leader_start_ns)

    def _attach_lock_calls(self, obj: BpfObject) -> str:
        """Uprobes in the libc lock functions, for every process mapping that libc; "" or why not."""
        found = lock_call_sites(self.targ_tgid)
        if found.why_not:
            return found.why_not
        libc, sites, note = found.libc, found.sites, found.note
        prog = obj.program("lock_call")
        own = libc_of(0) or libc
        # the trap is timed while the lock-call uprobes are placed, in a thread of its own: each is a wait in the
        # kernel (a uprobe's registration walks every process that maps the file, its own rounds wait for a CPU),
        # and the recording starts once both are done (under the budget's load 0.05-0.3 s and 0.02-0.2 s)
        timed: list = []
        calibration = threading.Thread(target=self._time_trap, args=(prog, own, found.getppid if own == libc else None,
                                                                     timed), name="uprobe-calibration", daemon=True)
        calibration.start()
        failed = []
        try:
            for off, cfa in sorted(sites.items()):
                try:
                    link = prog.attach_uprobe(libc, off, pid=-1, cookie=cfa)
                except BpfError as exc:
                    failed.append(exc.message)
                    continue
                # one link per program in obj.links: its run-time statistics are per program
                (self._uprobe_links if any(x.name == link.name for x in obj.links) else obj.links).append(link)
        finally:
            calibration.join()
        if isinstance(timed[0], BaseException):
            raise timed[0]
        self.uprobe_trap_ns = timed[0]
        if len(failed) == len(sites):
            return f"uprobes on {libc} failed ({failed[0]}): lock callers are named from user stacks only"
        return note

    def _time_trap(self, prog, libc: str, getppid: int | None, out: list) -> None:
        """measure_uprobe_trap's figure (0 where it cannot be measured: the budget then charges a default per hit),
        or what else it raised, appended to `out`."""
        try:
            out.append(measure_uprobe_trap(prog, libc, getppid, self._removals))
        except (BpfError, OSError, AttributeError):
            out.append(0)
        except BaseException as exc:  # noqa: BLE001 - raised again in the starting thread
            out.append(exc)

    def finish(self) -> str:
        """The recording stops: charge the waits still in progress up to now, in the last drain.

        The programs are told to stop first, so that no wait can end, and be counted by the kernel
        as well, between this read and that drain; they stay attached until close(), after the last
        drain: a detach waits for an RCU grace period, which the recording would show as a wait of
        its own. Each thread's state is read from task storage through a pidfd (PIDFD_THREAD, 6.9+;
        before that only thread-group leaders)."""
        assert self.obj is not None
        self.obj.map("stopped").update(b"\0\0\0\0", (1).to_bytes(4, "little"))
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # bpf_ktime_get_ns()'s clock
        m = self.obj.map("task_futex")
        for tid in _threads(self.targ_tgid):
            try:
                fd = os.pidfd_open(tid, _PIDFD_THREAD)
            except OSError:
                try:
                    fd = os.pidfd_open(tid, 0)
                except OSError:
                    continue
            try:
                raw = m.lookup(fd.to_bytes(4, "little"))
            except BpfError:
                raw = None
            finally:
                os.close(fd)
            if raw is None:
                continue
            w = abi.decode(abi.FutexInflight, raw)
            if w.active and w.pid == tid and now > w.begin_ns:
                self._charged.append((w, now - w.begin_ns))
        return ""

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        """Deltas since the last drain; entries of threads that died are read one last time and dropped."""
        assert self.obj is not None
        e = self._numbers.advance(self.obj)
        m = self.obj.map("futex_waits")
        out, ids, leaders, live = [], {}, {}, set()
        gone, prevs = [], self._prev
        for kraw, vraw in m.items_batch():
            prev = prevs.get(kraw)
            if prev is not None and prev[0] == vraw:  # unchanged since the last drain: nothing to decode
                if prev[1] in dead:
                    gone.append(kraw)
                    del prevs[kraw]
                else:
                    live.add(prev[3])
                continue
            k = abi.decode(abi.FutexWaitKey, kraw)
            v = abi.decode(abi.FutexWaitVal, vraw)
            pc, pt, pb, pr, pi = prev[2] if prev is not None else (0, 0, 0, 0, 0)
            tid = TaskId(k.pid, k.start_ns)
            if v.count != pc:
                longest, shortest = abi.bounded(*v.ival.of(e), v.count - pc, v.total_ns - pt)
                leaders[k.tgid] = k.leader_start_ns
                out.append(FutexDelta(
                    task=tid, tgid=k.tgid, uaddr=k.uaddr, op=k.op, ustack=k.ustack, caller_addr=k.caller,
                    caller=self._name(k.tgid, k.leader_start_ns, "code", k.caller),
                    lock_name=self._name(k.tgid, k.leader_start_ns, "data", k.uaddr),
                    count=v.count - pc, total_ns=v.total_ns - pt,
                    max_ns=longest, min_ns=shortest,
                    flags=k.flags, blocked_ns=v.blocked_ns - pb, runnable_ns=v.runnable_ns - pr,
                    woken_irq=v.woken_irq - pi))
                ids.setdefault(k.ustack, ("user", k.tgid))
            if tid in dead:
                gone.append(kraw)
                prevs.pop(kraw, None)
            else:
                prevs[kraw] = (vraw, tid, (v.count, v.total_ns, v.blocked_ns, v.runnable_ns,
                                           v.woken_irq), (k.tgid, k.leader_start_ns))
                live.add((k.tgid, k.leader_start_ns))
        m.delete_many(gone)
        for w, wait_ns in self._charged:
            leaders[w.tgid] = w.leader_start_ns
            out.append(FutexDelta(
                task=TaskId(w.pid, w.start_ns), tgid=w.tgid, uaddr=w.uaddr, op=w.op, ustack=w.ustack,
                caller_addr=w.caller, caller=self._name(w.tgid, w.leader_start_ns, "code", w.caller),
                lock_name=self._name(w.tgid, w.leader_start_ns, "data", w.uaddr),
                count=1, total_ns=wait_ns, max_ns=wait_ns, min_ns=wait_ns, flags=w.flags,
                blocked_ns=wait_ns))  # asleep in the call when the recording stopped
            ids.setdefault(w.ustack, ("user", w.tgid))
        self._charged.clear()
        stacks = self._stacks.read(self.obj.map("stacks"), ids, leaders)
        self._procs.forget_dead(live)
        return GroupDrain({"futex": tuple(out)}, stacks, self._health.drain(self.obj), self._programs.drain(self.obj))

    def _name(self, tgid: int, leader_start_ns: int, kind: str, addr: int) -> str:
        if not addr:
            return ""
        key = (tgid, leader_start_ns, kind, addr)
        name = self._names.get(key)
        if name is None:
            resolver = self._procs.process(tgid, leader_start_ns)
            if kind == "code":
                frame = resolver.resolve(addr)
                name = frame.text if frame.symbol is not None or frame.module_offset is not None else ""
            else:
                name = self._data.name(resolver.maps, addr)
            if len(self._names) >= 1 << 16:
                self._names.clear()
            self._names[key] = name
        return name

    def meta_options(self) -> dict:
        """What the recording keeps about this group's set-up (meta.options.futex)."""
        return {"uprobe_trap_ns": self.uprobe_trap_ns,
                "lock_call_uprobes": sum(1 for link in self._lock_call_links())}

    def retune(self, t: Tuning) -> None:
        """The overhead budget's step: fewer stack walks from the next event on; past its last level,
        no more lock-call uprobes."""
        if self.obj is not None:
            tune.write(self.obj, tune.of_tuning(t))
            if not t.lock_calls:
                self._remove_lock_calls()

    def _lock_call_links(self) -> list:
        if self.obj is None:
            return []
        return [link for link in self.obj.links if link.name == "lock_call"] + self._uprobe_links

    def _remove_lock_calls(self) -> None:
        """Detach the uprobes (in parallel: each removal waits for an RCU grace period). The links
        stay listed, destroyed, so that the program's statistics are still read."""
        threads = [threading.Thread(target=link.destroy) for link in self._lock_call_links()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join()
            self._reader = None
        for removal in self._removals:
            removal.join()
        self._removals.clear()
        # Each uprobe's removal waits for an RCU grace period (~0.1 s here): in parallel, not one by one.
        if self._uprobe_links:
            threads = [threading.Thread(target=link.destroy) for link in self._uprobe_links]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self._uprobe_links.clear()
        if self.obj:
            self.obj.close()
            self.obj = None
