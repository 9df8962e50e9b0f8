"""Addresses to names: kernel stacks through /proc/kallsyms, user stacks through ELF files.

The BPF side records raw instruction addresses; naming them is deferred to user space and done
lazily, because most addresses recorded in an interval are never shown and because symbol tables
are large. Two facts shape this module:

* A process can exit between the moment its stack is recorded and the moment the stack is
  named. Whatever was read about a process (its maps, its ELF files, its vdso) is therefore kept
  for as long as its resolver lives, and `Symbolizer.remember` lets the collector read a
  short-lived process as soon as it sees it.
* A frame must also be nameable on another machine (a recording opened elsewhere): user frames
  carry the ELF build id and the address relative to the ELF's own virtual addresses, which is
  what symbolizers such as llvm-symbolizer, addr2line or a debuginfod client need.

Nothing in here raises for a bad address or a bad file: an address that cannot be named becomes
a frame without a symbol. The one exception is a kallsyms that hides its addresses, which the
user can fix (`StallscopeError`).
"""

from __future__ import annotations

import bisect
import errno
import functools
import hashlib
import io
import lzma
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Callable, Iterator, NamedTuple

from elftools.elf.elffile import ELFFile

from stallscope.analyzer.untrusted import BudgetedReader, open_regular
from stallscope.analyzer.wholefile import read_whole
from stallscope.analyzer.sample import UNKNOWN, Frame  # noqa: F401 (the data model's; re-exported)
from stallscope.errors import StallscopeError
from stallscope.procstat import start_time_ns as process_start_time_ns  # noqa: F401 (re-exported)

KERNEL = "kernel"

# A kernel address more than this far past the last symbol of its region (the end of the core
# kernel's text, or of a module) is taken to be outside any text: kallsyms gives no symbol sizes.
KERNEL_REGION_TAIL = 1 << 20

# Symbols that mark where the core kernel's text sections end (include/asm-generic/sections.h);
# the space after them up to the next symbol is not code.
_KERNEL_TEXT_END_MARKERS = frozenset({"_etext", "_einittext"})

_KERNEL_TEXT_TYPES = frozenset("tTwW")
# Between symbols at one address, kallsyms lists markers and aliases in no useful order: prefer
# a global symbol, then a weak one, then a local one (perf's choose_best_symbol does the same).
_KERNEL_TYPE_RANK = {"T": 0, "W": 1, "t": 2, "w": 3}
_KERNEL_TYPES_BEST_FIRST = "".join(sorted(_KERNEL_TYPE_RANK, key=_KERNEL_TYPE_RANK.get)).encode()
_DATA_TYPES = b"dDbB"  # KernelDataSymbols.TYPES
try:  # kallsyms parsed in C: 0.15 s of a live view's start in Python (analyzer/kallsyms.c)
    from stallscope.analyzer._kallsyms import data_symbols as _c_data_symbols, text_symbols as _c_text_symbols
    from stallscope.analyzer._kallsyms import elf_functions as _c_elf_functions, maps_lines as _c_maps_lines
except ImportError:
    _c_data_symbols = _c_text_symbols = _c_elf_functions = _c_maps_lines = None

_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_STB_LOCAL, _STB_GLOBAL, _STB_WEAK = 0, 1, 2
_ELF_BINDING_RANK = {_STB_GLOBAL: 0, _STB_WEAK: 1, _STB_LOCAL: 2}
_SHN_UNDEF = 0

DEBUG_ROOT = "/usr/lib/debug"

# Bounds on reading a file a traced process maps: stallscope reads it as root, and a hostile process
# chooses it. Past a bound the file has no symbols (its frames stay `[file+0xoffset]`).
MAX_ELF_FILE_BYTES = 4 << 30  # larger files are not opened
MAX_ELF_READ_BYTES = 256 << 20  # read from one file in all: headers, symbol tables and their strings
MAX_ELF_SECONDS = 10.0  # spent reading one file
MAX_ELF_SYMBOLS = 4_000_000  # entries of one symbol table (a browser's debug .symtab holds about a million)
MAX_ELF_SECTIONS = 65_535  # section headers (beyond, only extended numbering, which compilers do not emit)
MAX_VDSO_BYTES = 1 << 20  # the vdso is two pages; its mapping is read from the process's memory
MAX_PERF_MAP_BYTES = 256 << 20  # a JIT's /tmp/perf-PID.map (a line per compiled function)
PERF_MAP_DIR = "/tmp"
USER_REFRESH_INTERVAL_S = 1.0
# How long a mapped file found for one process stands for the same (device, inode, path) in others.
MAPPED_RECHECK_S = 10.0


# --------------------------------------------------------------------------------------------
# Kernel


class KernelSymbols:
    """The kernel's text symbols (core kernel, modules, BPF programs) from /proc/kallsyms.

    kallsyms has no symbol sizes: a symbol extends to the next one, except at the end of a region
    (the core kernel, one module), where it extends at most `KERNEL_REGION_TAIL` bytes.
    """

    def __init__(self, starts: list[int], ends: list[int], names: list[str], modules: list[str]):
        self._starts = starts
        self._ends = ends
        self._names = names
        self._modules = modules
        # Kernel stacks repeat the same few thousand return addresses interval after interval.
        self._frames: dict[int, Frame] = {}

    def __len__(self) -> int:
        return len(self._starts)

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> KernelSymbols:
        """Read and parse kallsyms; a hidden or missing kallsyms is a StallscopeError."""
        try:
            data = read_whole(path)
        except FileNotFoundError:
            raise StallscopeError(
                f"{path} does not exist: kernel stacks cannot be named",
                "the kernel needs CONFIG_KALLSYMS",
            ) from None
        except OSError as e:
            raise StallscopeError(
                f"cannot read {path}: {e.strerror}", "run as root or set kernel.kptr_restrict=0"
            ) from None
        return cls.parse(data, source=path)

    @classmethod
    def parse(cls, data: bytes, source: str = "/proc/kallsyms") -> KernelSymbols:
        """Parse kallsyms text: `ADDR TYPE NAME[\\t[MODULE]]` per line.

        About 120k text symbols on a distribution kernel: in C where analyzer/kallsyms.c is built
        (0.1 s of a live view's start in Python, with the interpreter's lock held), else py_parse.
        """
        if _c_text_symbols is not None:
            parsed = _c_text_symbols(data, _KERNEL_TYPES_BEST_FIRST, KERNEL_REGION_TAIL, _KERNEL_TEXT_END_MARKERS,
                                     KERNEL)
            if isinstance(parsed, int):
                raise _kallsyms_error(parsed, source)
            return cls(*parsed)
        return cls.py_parse(data, source)

    @classmethod
    def py_parse(cls, data: bytes, source: str = "/proc/kallsyms") -> KernelSymbols:
        """parse in Python (where analyzer/kallsyms.c is not built)."""
        lines = data.decode("ascii", "replace").splitlines()
        width = lines[0].find(" ") if lines else -1
        if width not in (8, 16):
            raise _kallsyms_error(_NOT_KALLSYMS, source)
        text = [ln for ln in lines if len(ln) > width + 3 and ln[width + 1] in _KERNEL_TEXT_TYPES]
        if not text:
            raise _kallsyms_error(_NO_TEXT, source)
        try:
            addrs = struct.unpack(
                f">{len(text)}{'Q' if width == 16 else 'I'}", bytes.fromhex("".join([ln[:width] for ln in text]))
            )
        except (ValueError, struct.error):  # not hex, or hex with blanks in it
            raise _kallsyms_error(_NOT_KALLSYMS, source) from None
        if not any(addrs):
            raise _kallsyms_error(_ALL_ZERO, source)
        starts: list[int] = []
        chosen: list[str] = []
        for i in sorted(range(len(addrs)), key=addrs.__getitem__):
            if starts and starts[-1] == addrs[i]:
                if _kernel_rank(text[i], width) < _kernel_rank(chosen[-1], width):
                    chosen[-1] = text[i]
                continue
            starts.append(addrs[i])
            chosen.append(text[i])
        names = [ln[width + 3 :] for ln in chosen]
        modules = [KERNEL] * len(names)
        for i in [i for i, name in enumerate(names) if "\t" in name]:
            name, _, bracketed = names[i].partition("\t")
            names[i], modules[i] = name, bracketed.strip()[1:-1] or KERNEL
        ends = starts[1:] + [starts[-1] + KERNEL_REGION_TAIL]
        for i in [i for i in range(len(starts) - 1) if modules[i] != modules[i + 1]]:
            ends[i] = min(ends[i], starts[i] + KERNEL_REGION_TAIL)
        for i in [i for i, name in enumerate(names) if name in _KERNEL_TEXT_END_MARKERS]:
            if modules[i] == KERNEL:
                ends[i] = starts[i]
        return cls(starts, ends, names, modules)

    def resolve(self, addr: int) -> Frame:
        frame = self._frames.get(addr)
        if frame is None:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0 or addr >= self._ends[i]:
                frame = Frame.unknown(addr, "kernel")
            else:
                frame = Frame(addr, self._names[i], addr - self._starts[i], self._modules[i], None, None, "kernel")
            if len(self._frames) >= 1 << 16:
                self._frames.clear()
            self._frames[addr] = frame
        return frame


_NOT_KALLSYMS, _NO_TEXT, _ALL_ZERO = 1, 2, 3  # analyzer/kallsyms.c text_symbols' answers where the parse fails


def _kallsyms_error(why: int, source: str) -> StallscopeError:
    if why == _NO_TEXT:
        return StallscopeError(f"{source} lists no text symbols", "the kernel needs CONFIG_KALLSYMS")
    if why == _ALL_ZERO:
        return StallscopeError(f"{source} shows every address as 0: kernel stacks cannot be named",
                               "run as root or set kernel.kptr_restrict=0")
    return StallscopeError(f"{source} is not in kallsyms format", "expected 'ADDR TYPE NAME' lines")


def _kernel_rank(line: str, width: int) -> tuple[int, int, int]:
    name = line[width + 3 :].partition("\t")[0]
    return _KERNEL_TYPE_RANK[line[width + 1]], len(name) - len(name.lstrip("_")), len(name)


# --------------------------------------------------------------------------------------------
# ELF files


# --------------------------------------------------------------------------------------------
# ELF headers, read with struct


class _HeaderError(Exception):
    """Something _ElfHeaders does not handle: pyelftools reads the file instead."""


class _Refused(Exception):
    """A file no compiler writes (a header table entry of another size, more sections than the format
    numbers without extension): read no further."""


# Elf64_Phdr, Elf64_Shdr / Elf32_Phdr, Elf32_Shdr sizes
_ENTRY_SIZES = {64: (56, 64), 32: (32, 40)}


class _Note(dict):
    pass


class _Part(dict):
    """A section or segment header as pyelftools presents it (`part["sh_type"]`, `.data()`), for the
    functions below, which accept either."""

    def __init__(self, elf: "_ElfHeaders", fields: dict):
        super().__init__(fields)
        # the headers' stream and byte order, not the headers (which hold their parts): no cycle to leave
        # for the collector each time a process's files are read
        self._stream, self._order = elf.stream, elf.order

    def data(self) -> bytes:
        offset = self.get("sh_offset", self.get("p_offset"))
        size = self.get("sh_size", self.get("p_filesz"))
        self._stream.seek(offset)
        data = self._stream.read(size)
        if len(data) != size:
            raise _HeaderError("truncated")
        return data

    def iter_notes(self):
        data, order, at = self.data(), self._order, 0
        while at + 12 <= len(data):
            namesz, descsz, ntype = struct.unpack_from(order + "III", data, at)
            name_at = at + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            desc = data[desc_at:desc_at + descsz]
            name = data[name_at:name_at + namesz].rstrip(b"\0")
            if name == b"GNU" and ntype == 3:
                yield _Note(n_type="NT_GNU_BUILD_ID", n_desc=desc.hex())
            else:
                yield _Note(n_type=ntype, n_desc=desc)
            at = desc_at + ((descsz + 3) & ~3)


_SHT_NAMES = {7: "SHT_NOTE", 8: "SHT_NOBITS"}
_PT_NAMES = {1: "PT_LOAD", 4: "PT_NOTE"}
_SHF_COMPRESSED = 0x800


class _ElfHeaders:
    """The headers of an ELF file, read with struct: what ElfSymbols needs (load segments, sections
    by name, notes), about 50 times faster than pyelftools, which builds an object per field.
    It raises _HeaderError for what it does not handle (extended section numbering, compressed
    symbol tables) and the caller falls back to pyelftools."""

    def __init__(self, stream):
        self.stream = stream
        stream.seek(0)
        ident = stream.read(64)
        if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise _HeaderError("not ELF")
        self.elfclass = 64 if ident[4] == 2 else 32
        self.little_endian = ident[5] == 1
        self.order = order = "<" if self.little_endian else ">"
        if self.elfclass == 64:
            phoff, shoff = struct.unpack_from(order + "QQ", ident, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(order + "HHHHH", ident, 54)
        else:
            phoff, shoff = struct.unpack_from(order + "II", ident, 28)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(order + "HHHHH", ident, 42)
        if (shoff and (shnum == 0 or shstrndx >= shnum)) or phnum == 0xFFFF:
            raise _HeaderError("extended numbering")
        if (phnum and phentsize != _ENTRY_SIZES[self.elfclass][0]) or (shnum and shentsize != _ENTRY_SIZES[self.elfclass][1]):
            raise _Refused("header table entries of another size")
        self._segments = [self._segment(raw) for raw in self._table(phoff, phentsize, phnum)]
        self._sections = [self._section(raw) for raw in self._table(shoff, shentsize, shnum)] if shoff else []
        names = self._sections[shstrndx].data() if self._sections else b""
        self._by_name = {}
        for sec in self._sections:
            end = names.find(b"\0", sec["sh_name"])
            name = names[sec["sh_name"]:end if end >= 0 else len(names)].decode("utf-8", "replace")
            sec.name = name
            self._by_name.setdefault(name, sec)
            if sec["sh_flags"] & _SHF_COMPRESSED and name in (".symtab", ".dynsym", ".strtab", ".dynstr"):
                raise _HeaderError("compressed symbol table")

    def _table(self, offset: int, entsize: int, count: int) -> list[bytes]:
        if not count:
            return []
        self.stream.seek(offset)
        data = self.stream.read(entsize * count)
        if len(data) < entsize * count:
            raise _HeaderError("truncated")
        return [data[i * entsize:(i + 1) * entsize] for i in range(count)]

    def _segment(self, raw: bytes) -> _Part:
        o = self.order
        if self.elfclass == 64:
            ptype, _flags, off, vaddr, _paddr, filesz, memsz = struct.unpack_from(o + "IIQQQQQ", raw)
        else:
            ptype, off, vaddr, _paddr, filesz, memsz = struct.unpack_from(o + "IIIIII", raw)
        return _Part(self, {"p_type": _PT_NAMES.get(ptype, ptype), "p_offset": off, "p_vaddr": vaddr,
                            "p_filesz": filesz, "p_memsz": memsz})

    def _section(self, raw: bytes) -> _Part:
        o = self.order
        if self.elfclass == 64:
            name, stype, flags, addr, off, size, link = struct.unpack_from(o + "IIQQQQI", raw)
        else:
            name, stype, flags, addr, off, size, link = struct.unpack_from(o + "IIIIIII", raw)
        return _Part(self, {"sh_name": name, "sh_type": _SHT_NAMES.get(stype, stype), "sh_flags": flags,
                            "sh_addr": addr, "sh_offset": off, "sh_size": size, "sh_link": link})

    def iter_segments(self):
        return iter(self._segments)

    def iter_sections(self):
        return iter(self._sections)

    def get_section(self, index: int) -> _Part:
        return self._sections[index]

    def get_section_by_name(self, name: str) -> _Part | None:
        return self._by_name.get(name)


def _open_elf(stream):
    """Headers through struct when it can, else pyelftools (which raises on what is not ELF)."""
    try:
        return _ElfHeaders(stream)
    except (_HeaderError, struct.error, IndexError):
        stream.seek(0)
        elf = ELFFile(stream)
        if elf.num_sections() > MAX_ELF_SECTIONS or elf.num_segments() > MAX_ELF_SECTIONS:
            raise _Refused("more sections than the format numbers without extension") from None
        return elf


def _budgeted(stream) -> BudgetedReader:
    return BudgetedReader(stream, MAX_ELF_READ_BYTES, MAX_ELF_SECONDS)


@contextmanager
def untrusted_file(path: str) -> Iterator[BudgetedReader]:
    """A file a traced process maps, for a parser (pyelftools, the binutils through its descriptor): a
    regular file (a link in the last component not followed) of at most MAX_ELF_FILE_BYTES, read within
    MAX_ELF_READ_BYTES and MAX_ELF_SECONDS. OSError when it is not one."""
    f = open_regular(path, MAX_ELF_FILE_BYTES)
    if f is None:
        raise OSError(errno.EINVAL, f"not a regular file of at most {MAX_ELF_FILE_BYTES >> 30} GiB", path)
    with f:
        yield _budgeted(f)


@dataclass(frozen=True, slots=True)
class LoadSegment:
    """A PT_LOAD program header: which file bytes are mapped at which ELF virtual address."""

    file_offset: int
    file_size: int
    vaddr: int
    mem_size: int


class ElfSymbols:
    """Function symbols, load segments and build id of one ELF file.

    Headers, build id and the raw bytes of the symbol tables are read when the file is opened,
    so that nothing more is needed from the file (which may vanish with its process or
    container); the tables are decoded into a sorted index only when an address is first
    resolved, because most files opened are never asked for a name.
    """

    def __init__(self, segments: tuple[LoadSegment, ...], build_id: str | None, raw_tables: list[_RawSymbolTable]):
        self.segments = segments
        self.build_id = build_id
        self._raw_tables = raw_tables
        self._starts: list[int] | None = None
        self._ends: list[int] = []
        self._names: list[str] = []

    @classmethod
    def from_file(cls, path: str) -> ElfSymbols | None:
        """Read an ELF file; None when it is unreadable, not ELF, not a regular file (a link in the
        last component is not followed), larger than MAX_ELF_FILE_BYTES, or past the read bounds
        (never an exception)."""
        f = open_regular(path, MAX_ELF_FILE_BYTES)
        if f is None:
            return None
        try:
            with f:
                return cls._from_stream(_budgeted(f), path)
        except Exception:  # noqa: BLE001
            # pyelftools raises many types on malformed input; a bad file in someone else's
            # process must cost one unresolved frame, never the collector.
            return None

    @classmethod
    def from_image(cls, image: bytes) -> ElfSymbols | None:
        """An ELF image read from memory (the vdso); None when it does not parse."""
        try:
            return cls._from_stream(_budgeted(io.BytesIO(image)), None)
        except Exception:  # noqa: BLE001  (same reason as from_file)
            return None

    @classmethod
    def _from_stream(cls, stream, path: str | None) -> ElfSymbols:
        elf = _open_elf(stream)
        segments = tuple(
            LoadSegment(seg["p_offset"], seg["p_filesz"], seg["p_vaddr"], seg["p_memsz"])
            for seg in elf.iter_segments()
            if seg["p_type"] == "PT_LOAD"
        )
        build_id = _elf_build_id(elf)
        tables = _raw_symbol_tables(elf)
        if path is not None and not any(t.is_symtab for t in tables):
            # A stripped file keeps only .dynsym (exported functions). Its full table may be
            # in a separate debug file, or xz-compressed inside it (MiniDebugInfo).
            tables += _debug_symbol_tables(elf, path, build_id)
        return cls(segments, build_id, tables)

    def vaddr_of_file_offset(self, file_offset: int) -> int | None:
        """The ELF virtual address of a file offset, through the PT_LOAD segment holding it."""
        for seg in self.segments:
            if seg.file_offset <= file_offset < seg.file_offset + seg.file_size:
                return seg.vaddr + (file_offset - seg.file_offset)
        # Segments are mapped from page-aligned offsets: the bytes before a segment's start in its
        # first page are mapped too (with the same delta), even if no segment lists them.
        for seg in self.segments:
            if (seg.file_offset & ~0xFFF) <= file_offset < seg.file_offset + seg.file_size:
                return seg.vaddr + (file_offset - seg.file_offset)
        return None

    def resolve_vaddr(self, vaddr: int) -> tuple[str, int] | None:
        """(symbol, offset from its start) of an ELF virtual address, or None."""
        if self._starts is None:
            try:
                self._build_index()
            except Exception:  # noqa: BLE001  (tables of a malformed file: no names, as from_file)
                self._starts, self._ends, self._names, self._raw_tables = [], [], [], []
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0 or vaddr >= self._ends[i]:
            return None
        return self._names[i], vaddr - self._starts[i]

    def _build_index(self) -> None:
        """The function index: in C where analyzer/kallsyms.c is built and the names are ASCII (elf_functions: a
        libc's or a libpython's took 20-30 ms here, on the way to a live view's first data), else
        _py_build_index; the same either way."""
        if _c_elf_functions is not None:
            built = _c_elf_functions(
                [(t.symbols, t.strings, t.section_ends, t.is_64, t.little_endian) for t in self._raw_tables],
                tuple((seg.vaddr, seg.mem_size) for seg in self.segments))
            if built is not None:
                self._starts, self._ends, self._names = built
                self._raw_tables = []
                return
        self._py_build_index()

    def _py_build_index(self) -> None:
        # Per address: the best of its aliases' names, the largest of their sizes, and for
        # size-0 symbols the end of their section.
        by_addr: dict[int, list] = {}
        for table in self._raw_tables:
            for value, size, binding, name, section_end in table.functions():
                rank = (_ELF_BINDING_RANK.get(binding, 3), len(name) - len(name.lstrip("_")), len(name), name)
                seen = by_addr.get(value)
                if seen is None:
                    by_addr[value] = [rank, size, section_end]
                else:
                    seen[0] = min(seen[0], rank)
                    seen[1] = max(seen[1], size)
                    seen[2] = seen[2] or section_end
        starts = sorted(by_addr)
        ends = []
        for i, start in enumerate(starts):
            _, size, section_end = by_addr[start]
            if size:
                ends.append(start + size)
            else:
                # Hand-written assembly (_init, _start, glibc's string functions on some
                # builds) has size-0 symbols: they run to the next symbol, but not past the end
                # of their section (_init must not swallow the PLT that follows it).
                limit = section_end or self._segment_end(start)
                ends.append(min(starts[i + 1], limit) if i + 1 < len(starts) else limit)
        self._names = [by_addr[s][0][3] for s in starts]
        self._ends = ends
        self._starts = starts
        self._raw_tables = []

    def _segment_end(self, vaddr: int) -> int:
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.mem_size:
                return seg.vaddr + seg.mem_size
        return vaddr + 1


@dataclass(frozen=True, slots=True)
class _RawSymbolTable:
    """The undecoded bytes of .symtab or .dynsym, their string table and section ends."""

    symbols: bytes
    strings: bytes
    section_ends: tuple[int, ...]  # sh_addr + sh_size by section index
    is_64: bool
    little_endian: bool
    is_symtab: bool

    def functions(self):
        """(value, size, binding, name, end of its section or 0) of defined function symbols.

        Decoded with struct rather than pyelftools' per-symbol objects: a debug .symtab holds
        tens of thousands of entries and pyelftools takes tens of microseconds for each.
        """
        order = "<" if self.little_endian else ">"
        if self.is_64:  # Elf64_Sym: name, info, other, shndx, value, size
            fmt, pick = order + "IBBHQQ", lambda s: (s[0], s[1], s[3], s[4], s[5])
        else:  # Elf32_Sym: name, value, size, info, other, shndx
            fmt, pick = order + "IIIBBH", lambda s: (s[0], s[3], s[5], s[1], s[2])
        usable = len(self.symbols) - len(self.symbols) % struct.calcsize(fmt)
        strings, section_ends = self.strings, self.section_ends
        for entry in struct.iter_unpack(fmt, self.symbols[:usable]):
            name_at, info, shndx, value, size = pick(entry)
            if info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC) or shndx == _SHN_UNDEF or value == 0:
                continue
            end = strings.find(b"\0", name_at)
            name = strings[name_at : end if end >= 0 else len(strings)].decode("utf-8", "replace")
            if name:
                yield value, size, info >> 4, name, section_ends[shndx] if shndx < len(section_ends) else 0


def _raw_symbol_tables(elf: ELFFile) -> list[_RawSymbolTable]:
    tables = []
    section_ends = None
    entry_size = 24 if elf.elfclass == 64 else 16
    for name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(name)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            continue
        if section["sh_size"] // entry_size > MAX_ELF_SYMBOLS:
            continue  # a table this large is not read (the other one may still name the file's exports)
        if section_ends is None:
            section_ends = tuple(s["sh_addr"] + s["sh_size"] for s in elf.iter_sections())
        strings = elf.get_section(section["sh_link"])
        tables.append(
            _RawSymbolTable(
                section.data(), strings.data(), section_ends, elf.elfclass == 64, elf.little_endian, name == ".symtab"
            )
        )
    return tables


def _elf_build_id(elf: ELFFile) -> str | None:
    # Section headers first; a file stripped of them (sstrip) still has its PT_NOTE segments.
    containers = [s for s in elf.iter_sections() if s["sh_type"] == "SHT_NOTE"] or [
        s for s in elf.iter_segments() if s["p_type"] == "PT_NOTE"
    ]
    for container in containers:
        for note in container.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return note["n_desc"]
    return None


def _debug_symbol_tables(elf: ELFFile, path: str, build_id: str | None) -> list[_RawSymbolTable]:
    """The .symtab of a stripped file's debug information, if installed.

    Looked up as gdb does: /usr/lib/debug/.build-id/xx/yyyy.debug, then the .gnu_debuglink name
    next to the file, in its .debug folder, and under /usr/lib/debug; then MiniDebugInfo.
    """
    candidates = []
    if build_id and len(build_id) > 2:
        candidates.append(os.path.join(DEBUG_ROOT, ".build-id", build_id[:2], build_id[2:] + ".debug"))
    link = elf.get_section_by_name(".gnu_debuglink")
    link_crc = None
    if link is not None:
        data = link.data()
        raw = data.split(b"\0", 1)[0]
        name = raw.decode("utf-8", "surrogateescape")  # a file name's bytes, as os functions take them
        crc_at = (len(raw) + 4) & ~3  # the CRC follows the name, 4-byte aligned
        # a file name, never a path: the file chooses it, and it must not lead out of the folders below
        if name not in ("", ".", "..") and "/" not in name and len(data) >= crc_at + 4:
            link_crc = struct.unpack_from("<I" if elf.little_endian else ">I", data, crc_at)[0]
            folder = os.path.dirname(path)
            candidates += [
                os.path.join(folder, name),
                os.path.join(folder, ".debug", name),
                os.path.join(DEBUG_ROOT, folder.lstrip("/"), name),
            ]
    for candidate in candidates:
        tables = _symtab_of_debug_file(candidate, path, build_id, link_crc)
        if tables:
            return tables
    mini = elf.get_section_by_name(".gnu_debugdata")
    if mini is not None:
        try:
            inner = _open_elf(_budgeted(io.BytesIO(_xz_bounded(mini.data()))))
            return [t for t in _raw_symbol_tables(inner) if t.is_symtab]
        except Exception:  # noqa: BLE001  (see ElfSymbols.from_file: .dynsym alone still names)
            return []
    return []


def _xz_bounded(data: bytes) -> bytes:
    """MiniDebugInfo decompressed, at most MAX_ELF_READ_BYTES of it (a small section can inflate to gigabytes)."""
    d = lzma.LZMADecompressor()
    out = d.decompress(data, max_length=MAX_ELF_READ_BYTES)
    if not d.eof:
        raise _Refused("MiniDebugInfo larger than the read bound")
    return out


def _symtab_of_debug_file(candidate: str, path: str, build_id: str | None, link_crc: int | None) -> list[_RawSymbolTable]:
    # Only the system's debug tree (root's) is followed through links (.build-id/xx/yyyy.debug are links);
    # a debug file next to the traced file is opened only as the regular file it is.
    f = open_regular(candidate, MAX_ELF_FILE_BYTES, follow_symlinks=candidate.startswith(DEBUG_ROOT + "/"))
    if f is None:
        return []
    try:
        with f:
            if os.path.samefile(f"/proc/self/fd/{f.fileno()}", path):
                return []
            stream = _budgeted(f)
            debug = _open_elf(stream)
            debug_id = _elf_build_id(debug)
            if build_id and debug_id:
                matches = debug_id == build_id
            elif link_crc is not None:
                stream.seek(0)
                crc = 0
                while chunk := stream.read(1 << 20):
                    crc = zlib.crc32(chunk, crc)
                matches = crc == link_crc
            else:
                matches = False
            # A debug file for another build would name every address wrongly: worse than none.
            if not matches:
                return []
            return [t for t in _raw_symbol_tables(debug) if t.is_symtab]
    except Exception:  # noqa: BLE001  (see ElfSymbols.from_file)
        return []


class ElfCache:
    """A bounded LRU of ElfSymbols shared by all processes.

    Keyed by what identifies a file's contents on disk, (st_dev, st_ino, st_size, st_mtime_ns),
    so that libc is read once for every process that maps it, and a rebuilt binary at the same
    path is read again. Files that are not ELF are cached too (as None) so they are not re-read.
    """

    def __init__(self, max_files: int = 512, clock: Callable[[], float] = time.monotonic):
        self.max_files = max_files
        self._entries: OrderedDict[tuple, ElfSymbols | None] = OrderedDict()
        # (dev, inode, path) as /proc/PID/maps lists them -> (file key, when last checked)
        self._mapped: OrderedDict[tuple, tuple[tuple, float]] = OrderedDict()
        self._clock = clock
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, path: str) -> ElfSymbols | None:
        found = self._file(path)
        return found[1] if found is not None else None

    def _file(self, path: str) -> tuple[tuple, ElfSymbols | None] | None:
        """(the file's key, its ELF) for a path; None when it cannot be read."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        return key, self._get_or_load(key, lambda: ElfSymbols.from_file(path))

    def get_mapped(self, mapping: Mapping, open_path: Callable[[], str | None]) -> ElfSymbols | None:
        """The ELF of a file mapping, found without touching the file system when a process mapped
        the same file (its device and inode, as maps lists them) in the last MAPPED_RECHECK_S: the
        hundreds of processes a program forks map the same libraries, and each stat of each of them
        cost more than the rest of reading the process. Past that, the file is found and checked
        again (a library rewritten in place is read again). `open_path` says where to read it."""
        ident = (mapping.dev, mapping.inode, mapping.path)
        now = self._clock()
        with self._lock:
            seen = self._mapped.get(ident)
            if seen is not None and now - seen[1] < MAPPED_RECHECK_S and seen[0] in self._entries:
                self._mapped.move_to_end(ident)
                self._entries.move_to_end(seen[0])
                return self._entries[seen[0]]
        path = open_path()
        found = self._file(path) if path is not None else None
        if found is None:
            return None
        key, elf = found
        with self._lock:
            self._mapped[ident] = (key, now)
            self._mapped.move_to_end(ident)
            while len(self._mapped) > self.max_files:
                self._mapped.popitem(last=False)
        return elf

    def get_mapped_all(self, mappings: list[Mapping],
                       open_path: Callable[[Mapping], str | None]) -> list[ElfSymbols | None]:
        """get_mapped() of each mapping, those seen lately found under one hold of the lock."""
        now = self._clock()
        out: list = []
        missed = []
        with self._lock:
            mapped, entries = self._mapped, self._entries
            for i, m in enumerate(mappings):
                ident = (m.dev, m.inode, m.path)
                seen = mapped.get(ident)
                if seen is not None and now - seen[1] < MAPPED_RECHECK_S and seen[0] in entries:
                    mapped.move_to_end(ident)
                    entries.move_to_end(seen[0])
                    out.append(entries[seen[0]])
                else:
                    out.append(None)
                    missed.append(i)
        for i in missed:
            out[i] = self.get_mapped(mappings[i], functools.partial(open_path, mappings[i]))
        return out

    def get_image(self, image: bytes) -> ElfSymbols | None:
        # Every process of one ABI maps the same vdso image: key it by content.
        return self._get_or_load(("image", hashlib.sha1(image).digest()), lambda: ElfSymbols.from_image(image))

    def _get_or_load(self, key: tuple, load: Callable[[], ElfSymbols | None]) -> ElfSymbols | None:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        elf = load()
        with self._lock:
            self._entries[key] = elf
            while len(self._entries) > self.max_files:
                self._entries.popitem(last=False)
        return elf


SHARED_ELF_CACHE = ElfCache()


# --------------------------------------------------------------------------------------------
# Processes


class Mapping(NamedTuple):
    """One line of /proc/PID/maps (a tuple: a process of 5,000 threads lists 10,000, made at once)."""

    start: int
    end: int
    perms: str
    offset: int
    dev: str
    inode: int
    path: str

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def is_executable(self) -> bool:
        return "x" in self.perms

    @property
    def file_path(self) -> str:
        """The path without the " (deleted)" the kernel appends for an unlinked file."""
        return self.path.removesuffix(" (deleted)")


def _kept_mappings(mappings: tuple[Mapping, ...]) -> tuple[Mapping, ...]:
    # the perms first: most of a process of many threads' mappings are their stacks, not executable
    return tuple([m for m in mappings if ("x" in m.perms and m.is_file) or m.path == "[vdso]"])


def maps_path(field: str) -> str:
    """The path of a maps line as the file is named: the kernel pads the field with spaces and writes a
    newline in a name as the octal escape `\\012` (fs/proc/task_mmu.c: seq_file_path(m, file, "\\n")),
    the only character it escapes there."""
    return field.lstrip(" ").replace("\\012", "\n")


MAX_PARSED_MAPS = 256
_START = itemgetter(0)  # a Mapping's start
_PARSED_MAPS: OrderedDict[str, ProcessMaps] = OrderedDict()
_PARSED_MAPS_LOCK = threading.Lock()


# A parent's maps older than this are not handed to its children: it may have mapped other files
# since (a child then reads its own).
INHERIT_MAX_AGE_S = 10.0


@dataclass(frozen=True, slots=True)
class ProcessMaps:
    """The memory mappings of a process, as /proc/PID/maps listed them when read."""

    pid: int
    mappings: tuple[Mapping, ...]
    # made from the mappings when not given: the processes that list the same maps text share them (parse)
    _starts: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    # the mappings a process's remembering reads: its executable files' and its vdso
    kept: tuple[Mapping, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self._starts is None:
            object.__setattr__(self, "_starts", tuple(map(_START, self.mappings)))
        if self.kept is None:
            object.__setattr__(self, "kept", _kept_mappings(self.mappings))

    @classmethod
    def read(cls, pid: int) -> ProcessMaps | None:
        """The maps of a live process; None when it is gone or its maps are unreadable."""
        try:
            data = read_whole(f"/proc/{pid}/maps")
        except OSError:
            return None
        maps = cls.parse(pid, data)
        # A zombie's maps read empty: that is "gone", not "maps nothing".
        return maps if maps.mappings else None

    @classmethod
    def parse(cls, pid: int, text: str | bytes) -> ProcessMaps:
        """The maps of /proc/PID/maps's text (bytes as read: decoded as UTF-8, each other byte a surrogate)."""
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
        # The processes a program forks (a server's workers, hackbench's hundreds) list the same maps
        # text: parsed once, and the Mapping tuples shared by all of them.
        with _PARSED_MAPS_LOCK:  # the futex collector reads maps from its own thread
            shared = _PARSED_MAPS.get(data)
            if shared is not None:
                _PARSED_MAPS.move_to_end(data)
        if shared is None:
            made = cls(pid, cls._parse_mappings(data))
            with _PARSED_MAPS_LOCK:
                _PARSED_MAPS[data] = made
                while len(_PARSED_MAPS) > MAX_PARSED_MAPS:
                    _PARSED_MAPS.popitem(last=False)
            return made
        return shared.of(pid)

    def of(self, pid: int) -> ProcessMaps:
        """The same mappings as another process's (a fork's, or one that lists the same maps text)."""
        return ProcessMaps(pid, self.mappings, self._starts, self.kept)

    @staticmethod
    def _parse_mappings(data: bytes) -> tuple[Mapping, ...]:
        """The mappings of a maps text, by start: in C where analyzer/kallsyms.c is built (maps_lines), else
        py_parse_mappings; the same either way."""
        parsed = _c_maps_lines(data, Mapping) if _c_maps_lines is not None else None
        if parsed is None:
            return py_parse_mappings(data.decode("utf-8", "surrogateescape"))
        mappings, in_order = parsed
        if not in_order:
            mappings.sort(key=_START)
        return tuple(mappings)

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def file_offset(self, addr: int) -> tuple[Mapping, int] | None:
        """The mapping holding an address and the offset in the mapped file it corresponds to."""
        mapping = self.find(addr)
        if mapping is None:
            return None
        return mapping, addr - mapping.start + mapping.offset


def py_parse_mappings(text: str) -> tuple[Mapping, ...]:
    """ProcessMaps._parse_mappings in Python, of the decoded text."""
    mappings = []
    # Lines end at "\n" only: a path may hold any other character (str.splitlines would also break
    # at \x1c, \x85 or \u2028 inside a file name).
    for line in text.split("\n"):
        parts = line.split(" ", 5)
        if len(parts) < 5:
            continue
        start, _, end = parts[0].partition("-")
        try:
            mapping = Mapping(int(start, 16), int(end, 16), parts[1], int(parts[2], 16), parts[3], int(parts[4]),
                              maps_path(parts[5]) if len(parts) > 5 else "")
        except ValueError:
            continue
        mappings.append(mapping)
    mappings.sort(key=_START)
    return tuple(mappings)


@dataclass(frozen=True, slots=True)
class PerfMap:
    """A JIT's /tmp/perf-PID.map: `START SIZE name` per line, hex, as perf reads it."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> PerfMap:
        # A JIT appends; code recompiled at the same address is named by its latest line.
        latest: dict[int, tuple[int, str]] = {}
        for line in text.splitlines():
            parts = line.split(None, 2)
            if len(parts) < 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            latest[start] = (start + size, parts[2].strip())
        starts = sorted(latest)
        return cls(tuple(starts), tuple(latest[s][0] for s in starts), tuple(latest[s][1] for s in starts))

    def lookup(self, addr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.names[i], addr - self.starts[i]
        return None


class UserSymbols:
    """Names the user-space addresses of one process.

    The maps are read once, on first need (or at `remember`), and kept: the process may exit
    before its stacks are named. An address outside every known mapping triggers `refresh`
    (new code may have been mmapped since), at most once per `USER_REFRESH_INTERVAL_S`.

    `start_time_ns` (see `process_start_time_ns`; in BPF, the thread-group leader's
    `start_boottime`) guards against a reused pid: if given and the live process with this pid
    started at another time, it is not this process and nothing is read from it. None or 0
    skip the check.
    """

    def __init__(self, pid: int, start_time_ns: int | None = None, *, elf_cache: ElfCache | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.pid = pid
        self.start_time_ns = start_time_ns
        self._elf_cache = elf_cache if elf_cache is not None else SHARED_ELF_CACHE
        self._clock = clock
        self._maps: ProcessMaps | None = None
        self._maps_read = False
        self._last_refresh = float("-inf")
        self._elfs: dict[tuple[str, int], ElfSymbols | None] = {}
        self._vdso: ElfSymbols | None = None
        self._vdso_read = False
        self._perf_map: PerfMap | None = None
        self._perf_map_stamp: tuple | None = None
        self._perf_map_checked = float("-inf")
        self._frames: dict[int, Frame] = {}

    @property
    def maps(self) -> ProcessMaps | None:
        if not self._maps_read:
            self.refresh(force=True)
        return self._maps

    def inherit(self, parent: UserSymbols) -> bool:
        """Take the maps of the process this one was forked from, when it has not exec'd since: a
        fork copies the address space, so the parent's maps name the child's code without a read of
        its own (/proc/PID/maps costs the kernel a line per mapping, for each of a fork-heavy
        program's hundreds of children). An address they do not hold reads the child's own maps, as
        for any process whose maps changed. Returns whether the parent's maps were there to take."""
        if not parent._maps_read or parent._maps is None or self._clock() - parent._last_refresh > INHERIT_MAX_AGE_S:
            return False
        self._maps = parent._maps.of(self.pid)
        self._maps_read = True
        self._last_refresh = float("-inf")  # the first miss reads the child's own maps
        self._elfs = dict(parent._elfs)
        if parent._vdso_read:  # at the same address in the child: fork keeps the layout
            self._vdso, self._vdso_read = parent._vdso, True
        return True

    def remember(self) -> bool:
        """Read now everything that dies with the process: maps, its ELF files, its vdso.

        Returns whether the process could be read.
        """
        maps = self.maps
        if maps is None:
            return False
        files = []
        for mapping in maps.kept:
            if mapping.path == "[vdso]":
                self._vdso_of(mapping)
            elif (mapping.path, mapping.inode) not in self._elfs:
                files.append(mapping)
        if files:  # the hundreds of processes a program forks map the same files: found at once
            found = self._elf_cache.get_mapped_all(files, self._open_path)
            for mapping, elf in zip(files, found):
                self._elfs[(mapping.path, mapping.inode)] = elf
        return True

    def refresh(self, force: bool = False) -> bool:
        """Re-read the maps, at most once per interval; keep the old ones if the process is gone.

        Returns whether new maps were read.
        """
        now = self._clock()
        if not force and now - self._last_refresh < USER_REFRESH_INTERVAL_S:
            return False
        self._last_refresh = now
        self._maps_read = True
        maps = self._read_maps()
        if maps is None:
            return False
        self._maps = maps
        # A library may have been unmapped and another mapped at its addresses.
        self._frames.clear()
        return True

    def _read_maps(self) -> ProcessMaps | None:
        # A start time of 0 is "not known" (what a collector passes before it saw the leader).
        if self.start_time_ns and not self._is_same_process():
            return None
        maps = ProcessMaps.read(self.pid)
        # Checked again after reading, in case the pid was reused meanwhile.
        if maps is not None and self.start_time_ns and not self._is_same_process():
            return None
        return maps

    def _is_same_process(self) -> bool:
        started = process_start_time_ns(self.pid)
        tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        return started is not None and abs(started - self.start_time_ns) <= tick_ns

    def resolve(self, addr: int) -> Frame:
        frame = self._frames.get(addr)
        if frame is not None:
            return frame
        maps = self.maps
        mapping = maps.find(addr) if maps is not None else None
        if mapping is None and self.refresh():
            mapping = self._maps.find(addr)
        elf = None
        if mapping is not None and mapping.path == "[vdso]":
            elf = self._vdso_of(mapping)
        elif mapping is not None and mapping.is_file:
            elf = self._elf_of(mapping)
        if elf is not None:
            # An address in a readable ELF file is named by that file alone: cache it.
            frame = self._elf_frame(addr, mapping, elf)
            if len(self._frames) >= 1 << 16:
                self._frames.clear()
            self._frames[addr] = frame
            return frame
        # JIT code lives in anonymous memory (or memfd files, or memory mapped after the last
        # refresh): the JIT names it in its perf map.
        named = self._perf_map_lookup(addr)
        if named is not None:
            return Frame(addr, named[0], named[1], "[jit]", None, None, "user")
        if mapping is None:
            return Frame.unknown(addr, "user")
        if mapping.is_file:
            return Frame(addr, None, 0, mapping.path, None, None, "user")
        label = mapping.path if mapping.path.startswith("[") else "[anon]"
        return Frame(addr, None, 0, label, None, None, "user")

    def _elf_frame(self, addr: int, mapping: Mapping, elf: ElfSymbols) -> Frame:
        vaddr = elf.vaddr_of_file_offset(addr - mapping.start + mapping.offset)
        named = elf.resolve_vaddr(vaddr) if vaddr is not None else None
        if named is None:
            return Frame(addr, None, 0, mapping.path, elf.build_id, vaddr, "user")
        return Frame(addr, named[0], named[1], mapping.path, elf.build_id, vaddr, "user")

    def _elf_of(self, mapping: Mapping) -> ElfSymbols | None:
        key = (mapping.path, mapping.inode)
        if key not in self._elfs:
            self._elfs[key] = self._elf_cache.get_mapped(mapping, lambda: self._open_path(mapping))
        return self._elfs[key]

    def _open_path(self, mapping: Mapping) -> str | None:
        """Where to read a mapped file from.

        The path in maps is in the process's mount namespace. Our own path is preferred when it
        holds the same inode (it survives the process); otherwise the file is read through
        /proc/PID/root (a container's file system); the bare path is the last resort, except for
        a deleted file, where another file at that path is certainly not the one mapped.
        """
        deleted = mapping.file_path != mapping.path
        forms = [mapping.file_path]
        if "\n" in mapping.file_path:  # or a name that holds the four characters \012 (maps_path)
            forms.append(mapping.file_path.replace("\n", "\\012"))
        for path in forms:  # the file mapped, by its inode
            if _inode_of(path) == mapping.inode:
                return path
            if _inode_of(f"/proc/{self.pid}/root{path}") == mapping.inode:
                return f"/proc/{self.pid}/root{path}"
        if deleted:
            return None
        for path in forms:  # a file at its path since (rewritten in place): in the process's root first
            for candidate in (f"/proc/{self.pid}/root{path}", path):
                if _inode_of(candidate) is not None:
                    return candidate
        return None

    def _vdso_of(self, mapping: Mapping) -> ElfSymbols | None:
        # The vdso is an ELF image the kernel maps into every process: read it from the
        # process's memory (while it lives) and name its functions like any ELF.
        if not self._vdso_read:
            self._vdso_read = True
            try:
                with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
                    mem.seek(mapping.start)
                    image = mem.read(min(mapping.end - mapping.start, MAX_VDSO_BYTES))
            except (OSError, OverflowError, ValueError):
                image = b""
            self._vdso = self._elf_cache.get_image(image) if image else None
        return self._vdso

    def _perf_map_lookup(self, addr: int) -> tuple[str, int] | None:
        now = self._clock()
        if now - self._perf_map_checked >= USER_REFRESH_INTERVAL_S:
            self._perf_map_checked = now
            self._reload_perf_map()
        return self._perf_map.lookup(addr) if self._perf_map is not None else None

    def _reload_perf_map(self) -> None:
        # /tmp is anyone's: like perf, a map is read only when the process's own user (or root) owns it,
        # and only as a regular file (not a link to a file of root's, not a FIFO that would hang the read)
        owner = _owner_of(self.pid)
        for path in self._perf_map_paths():
            f = open_regular(path, MAX_PERF_MAP_BYTES)
            if f is None:
                continue
            with f:
                try:
                    st = os.fstat(f.fileno())
                    if st.st_uid not in (0, owner):
                        continue
                    stamp = (path, st.st_ino, st.st_size, st.st_mtime_ns)
                    if stamp == self._perf_map_stamp:
                        return
                    text = f.read(MAX_PERF_MAP_BYTES).decode("utf-8", "replace")
                except OSError:
                    continue
            self._perf_map = PerfMap.parse(text)
            self._perf_map_stamp = stamp
            return

    def _perf_map_paths(self) -> list[str]:
        paths = [os.path.join(PERF_MAP_DIR, f"perf-{self.pid}.map")]
        # A JIT in a container writes the map under its own pid, in its own /tmp.
        ns_pid = _namespace_pid(self.pid)
        if ns_pid is not None and ns_pid != self.pid:
            paths.append(f"/proc/{self.pid}/root{PERF_MAP_DIR}/perf-{ns_pid}.map")
        return paths


def _owner_of(pid: int) -> int | None:
    """The user a process runs as (the owner of /proc/PID), None when it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _inode_of(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _namespace_pid(pid: int) -> int | None:
    """The pid a process has in its innermost pid namespace (the last NSpid of its status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


# --------------------------------------------------------------------------------------------
# The collector's one entry point


class KernelDataSymbols:
    """The kernel's data symbols (kallsyms types d/D/b/B: CONFIG_KALLSYMS_ALL), to name a static
    object such as a lock by its variable. kallsyms gives no sizes: an address is named only within
    `MAX_OFFSET` of a symbol and inside the range the core kernel's data symbols span (a slab
    object elsewhere is never given a nearby variable's name)."""

    MAX_OFFSET = 4096
    TYPES = frozenset(_DATA_TYPES.decode())

    def __init__(self, starts: list[int], names: list[str]):
        self._starts, self._names = starts, names

    def __len__(self) -> int:
        return len(self._starts)

    @classmethod
    def parse(cls, data: bytes) -> KernelDataSymbols:
        """In C where analyzer/kallsyms.c is built, else py_parse."""
        return cls.py_parse(data) if _c_data_symbols is None else cls._of(_c_data_symbols(data, _DATA_TYPES))

    @classmethod
    def py_parse(cls, data: bytes) -> KernelDataSymbols:
        return cls._of(cls.py_pairs(data))

    @classmethod
    def _of(cls, pairs: list[tuple[int, str]]) -> KernelDataSymbols:
        return cls([a for a, _ in pairs], [n for _, n in pairs])

    @classmethod
    def py_pairs(cls, data: bytes) -> list[tuple[int, str]]:
        """The core kernel's data symbols, (address, name), sorted."""
        pairs = []
        for line in data.decode("ascii", "replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in cls.TYPES:  # core kernel only: module lines have a 4th field
                try:
                    addr = int(parts[0], 16)
                except ValueError:
                    continue
                if addr:
                    pairs.append((addr, parts[2]))
        pairs.sort()
        return pairs

    def resolve(self, addr: int) -> str | None:
        """`name` or `name+0xoff`, or None when no data symbol is near enough."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0 or addr - self._starts[i] >= self.MAX_OFFSET or addr > self._starts[-1] + self.MAX_OFFSET:
            return None
        off = addr - self._starts[i]
        return self._names[i] if not off else f"{self._names[i]}+{off:#x}"


class Symbolizer:
    """Names kernel and user stacks for the collector.

    Kernel symbols are loaded on first use; user resolvers are kept per process, keyed by
    (pid, start_time_ns) so a reused pid is a different process, in a bounded LRU so that a
    long recording over a busy system does not grow without bound. Not thread-safe: one owner.
    """

    def __init__(self, *, max_processes: int = 4096, kallsyms_path: str = "/proc/kallsyms",
                 elf_cache: ElfCache | None = None):
        self.max_processes = max_processes
        self._kallsyms_path = kallsyms_path
        self._elf_cache = elf_cache if elf_cache is not None else SHARED_ELF_CACHE
        self._kernel: KernelSymbols | None = None
        self._kernel_error: StallscopeError | None = None
        self._kernel_data: KernelDataSymbols | None = None
        self._processes: OrderedDict[tuple[int, int | None], UserSymbols] = OrderedDict()

    @property
    def kernel_symbols(self) -> KernelSymbols:
        """Loaded once; a failure is remembered and raised again rather than re-read each time."""
        if self._kernel is None:
            if self._kernel_error is not None:
                raise self._kernel_error
            try:
                self._kernel = KernelSymbols.load(self._kallsyms_path)
            except StallscopeError as e:
                self._kernel_error = e
                raise
        return self._kernel

    def preload_kernel(self, data: bool = False) -> None:
        """Read kallsyms now, rather than at the first drain: a recording's command starts after
        this, so the work does not take CPU from it. `data`: the data symbols too (the lock probe
        names static locks by them; their parse is ~60 ms more). A failure is kept for the first use
        to raise."""
        if data and self._kernel is None and self._kernel_error is None and self._kernel_data is None:
            try:  # read once for both (the kernel formats the file anew for each read: 30 ms)
                raw = read_whole(self._kallsyms_path)
            except OSError:  # as each would meet it alone, below
                pass
            else:
                try:
                    self._kernel = KernelSymbols.parse(raw, source=self._kallsyms_path)
                except StallscopeError as e:
                    self._kernel_error = e
                self._kernel_data = KernelDataSymbols.parse(raw)
                return
        try:
            self.kernel_symbols
        except StallscopeError:
            pass
        if data:
            self.kernel_data(0)

    def kernel_data(self, addr: int) -> str | None:
        """The static kernel variable at `addr` (a lock), when kallsyms lists data symbols."""
        if self._kernel_data is None:
            try:
                self._kernel_data = KernelDataSymbols.parse(read_whole(self._kallsyms_path))
            except OSError:
                self._kernel_data = KernelDataSymbols([], [])
        return self._kernel_data.resolve(addr) if len(self._kernel_data) else None

    def kernel(self, addr: int) -> Frame:
        """A kernel frame; raises StallscopeError when kallsyms hides addresses from us."""
        return self.kernel_symbols.resolve(addr)

    def process(self, pid: int, start_time_ns: int | None) -> UserSymbols:
        key = (pid, start_time_ns)
        resolver = self._processes.get(key)
        if resolver is None:
            resolver = UserSymbols(pid, start_time_ns, elf_cache=self._elf_cache)
            self._processes[key] = resolver
            while len(self._processes) > self.max_processes:
                self._processes.popitem(last=False)
        else:
            self._processes.move_to_end(key)
        return resolver

    def user(self, pid: int, start_time_ns: int | None, addr: int) -> Frame:
        return self.process(pid, start_time_ns).resolve(addr)

    def remember(self, pid: int, start_time_ns: int | None) -> bool:
        """Read a process now (e.g. at exec), so its stacks can be named after it exits."""
        return self.process(pid, start_time_ns).remember()

    def remember_fork(self, pid: int, start_time_ns: int | None, parent: int, parent_start_ns: int | None) -> bool:
        """Remember a process forked, with no exec since, from one already read: with its parent's
        maps (see UserSymbols.inherit), else by reading its own."""
        known = self._processes.get((parent, parent_start_ns))
        child = self.process(pid, start_time_ns)
        if known is not None:
            child.inherit(known)
        return child.remember()  # after inherit(), its ELF files and vdso are the parent's: nothing read

    def stack(self, kind: str, pid: int, start_time_ns: int | None, addrs) -> tuple[Frame, ...]:
        if kind == "kernel":
            symbols = self.kernel_symbols
            return tuple(symbols.resolve(a) for a in addrs)
        if kind == "user":
            resolver = self.process(pid, start_time_ns)
            return tuple(resolver.resolve(a) for a in addrs)
        raise ValueError(f"stack kind must be 'kernel' or 'user', not {kind!r}")
