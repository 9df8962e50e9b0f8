"""A thin, typed ctypes binding over the system libbpf (libbpf.so.1).

Only what stallscope uses: open/configure/load an object, attach programs, map
file descriptors, element and batch lookups, ring buffers, per-program run-time
statistics. Every failure becomes a `BpfError` carrying the errno text and the
last lines libbpf printed (the verifier log, when there is one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from stallscope.errors import StallscopeError

_LIB_NAMES = ("libbpf.so.1", "libbpf.so")


class BpfError(StallscopeError):
    """A libbpf or bpf(2) call failed; `errno` is the positive error number."""

    def __init__(self, what: str, err: int, log: str = "", hint: str = ""):
        self.errno = abs(err)
        text = os.strerror(self.errno) if self.errno else "failed"
        message = f"{what}: {text}"
        self.log = log
        if not hint:
            hint = _hint_for(self.errno)
        super().__init__(message, hint)


def _hint_for(err: int) -> str:
    if err == errno.EPERM:
        return "run as root, or grant CAP_BPF and CAP_PERFMON"
    if err == errno.ENOENT:
        return "this kernel lacks the attach point; see `stallscope doctor`"
    if err == errno.EINVAL:
        return "the kernel rejected the program; see `stallscope doctor`"
    return ""


class _LogCapture:
    """Keeps libbpf's recent messages so errors can quote them."""

    def __init__(self, keep: int = 200):
        self.keep = keep
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def add(self, level: int, text: str) -> None:
        with self.lock:
            self.lines.extend(line for line in text.splitlines() if line.strip())
            del self.lines[: -self.keep]

    def take(self) -> str:
        with self.lock:
            text = "\n".join(self.lines)
            self.lines.clear()
            return text


LIBBPF_DEBUG = 2  # enum libbpf_print_level: LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_LOG_FILTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "liblogfilter.so")
_log_filter_lib = None  # kept: libbpf holds its function for the process's life


def _log_filter(callback) -> ctypes.c_void_p | None:
    """libbpf's print function that drops debug lines in C and passes the others to `callback`
    (bpf/logfilter.c: a Python callback per line waited for the interpreter's lock while another thread held
    it); None where it is not built."""
    global _log_filter_lib
    if _log_filter_lib is None:
        try:
            _log_filter_lib = ctypes.CDLL(_LOG_FILTER)
        except OSError:
            return None
        _log_filter_lib.logfilter_forward.argtypes = [_PRINT_FN]
        _log_filter_lib.logfilter_forward.restype = None
    _log_filter_lib.logfilter_forward(callback)
    return ctypes.cast(_log_filter_lib.logfilter_print, ctypes.c_void_p)


class _UprobeOpts(ctypes.Structure):
    """struct bpf_uprobe_opts (libbpf.h, 1.1)."""

    _fields_ = [("sz", ctypes.c_size_t), ("ref_ctr_offset", ctypes.c_size_t), ("bpf_cookie", ctypes.c_uint64),
                ("retprobe", ctypes.c_bool), ("func_name", ctypes.c_char_p)]


_RB_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)

BPF_STATS_RUN_TIME = 0
BPF_NOEXIST = 1
BPF_ANY = 0


class _BatchOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class BpfTestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (libbpf's bpf.h)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32),
    ]


BPF_F_TEST_RUN_ON_CPU = 1


class BpfProgInfo(ctypes.Structure):
    """struct bpf_prog_info (uapi/linux/bpf.h); checked against the header in tests."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("nr_jited_ksyms", ctypes.c_uint32),
        ("nr_jited_func_lens", ctypes.c_uint32),
        ("jited_ksyms", ctypes.c_uint64),
        ("jited_func_lens", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("nr_func_info", ctypes.c_uint32),
        ("nr_line_info", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("jited_line_info", ctypes.c_uint64),
        ("nr_jited_line_info", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("jited_line_info_rec_size", ctypes.c_uint32),
        ("nr_prog_tags", ctypes.c_uint32),
        ("prog_tags", ctypes.c_uint64),
        ("run_time_ns", ctypes.c_uint64),
        ("run_cnt", ctypes.c_uint64),
        ("recursion_misses", ctypes.c_uint64),
        ("verified_insns", ctypes.c_uint32),
        ("attach_btf_obj_id", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class ProgStats:
    """Kernel-side cost of one program. run_time_ns excludes the dispatch cost."""

    name: str
    run_cnt: int
    run_time_ns: int
    recursion_misses: int


class _Lib:
    """The loaded shared library with typed prototypes; one per process."""

    _instance: "_Lib | None" = None
    _guard = threading.Lock()

    @classmethod
    def get(cls) -> "_Lib":
        with cls._guard:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self) -> None:
        lib = None
        for name in _LIB_NAMES:
            try:
                lib = ctypes.CDLL(name, use_errno=True)
                break
            except OSError:
                continue
        if lib is None:
            raise StallscopeError("libbpf.so.1 not found", "install Debian's libbpf1 (make install does)")
        self.lib = lib
        self.log = _LogCapture()
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        self._libc.syscall.restype = ctypes.c_long
        self._print_cb = _PRINT_FN(self._on_print)
        self._proto()
        self._keep_lock(name)
        lib.libbpf_set_print(_log_filter(self._print_cb) or self._print_cb)

    def _on_print(self, level: int, fmt: bytes, args: int) -> int:
        # 2,500 lines a session's start-up, none of them a reason; warnings and info kept (dropped in C before
        # they reach here where bpf/logfilter.c is built)
        if level >= LIBBPF_DEBUG:
            return 0
        buf = _chars(4096)
        self._libc.vsnprintf(buf, len(buf), fmt, args)
        self.log.add(level, buf.value.decode(errors="replace"))
        return 0

    def _proto(self) -> None:
        L = self.lib
        vp, cp, i, u32, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t

        def p(name, res, *args):
            fn = getattr(L, name)
            fn.restype = res
            fn.argtypes = list(args)

        p("libbpf_set_print", vp, vp)  # a _PRINT_FN, or bpf/logfilter.c's function
        p("bpf_object__open_file", vp, cp, vp)
        p("bpf_object__load", i, vp)
        p("bpf_object__close", None, vp)
        p("bpf_object__next_program", vp, vp, vp)
        p("bpf_object__next_map", vp, vp, vp)
        p("bpf_object__find_map_by_name", vp, vp, cp)
        p("bpf_object__find_program_by_name", vp, vp, cp)
        p("bpf_program__name", cp, vp)
        p("bpf_program__section_name", cp, vp)
        p("bpf_program__set_autoload", i, vp, ctypes.c_bool)
        p("bpf_program__autoload", ctypes.c_bool, vp)
        p("bpf_program__fd", i, vp)
        p("bpf_program__attach", vp, vp)
        p("bpf_program__attach_perf_event", vp, vp, i)
        p("bpf_program__attach_uprobe", vp, vp, ctypes.c_bool, i, cp, sz)
        p("bpf_program__attach_uprobe_opts", vp, vp, i, cp, sz, ctypes.POINTER(_UprobeOpts))
        p("bpf_link__destroy", i, vp)
        p("bpf_program__attach_iter", vp, vp, vp)
        p("bpf_link__fd", i, vp)
        p("bpf_iter_create", i, i)
        p("bpf_map__fd", i, vp)
        p("bpf_map__name", cp, vp)
        p("bpf_map__set_max_entries", i, vp, u32)
        p("bpf_map__reuse_fd", i, vp, i)
        p("bpf_map__max_entries", u32, vp)
        p("bpf_map__key_size", u32, vp)
        p("bpf_map__value_size", u32, vp)
        p("bpf_map__initial_value", vp, vp, ctypes.POINTER(sz))
        p("bpf_map_lookup_elem", i, i, vp, vp)
        p("bpf_map_update_elem", i, i, vp, vp, ctypes.c_uint64)
        p("bpf_map_delete_elem", i, i, vp)
        p("bpf_map_lookup_and_delete_elem", i, i, vp, vp)
        p("bpf_map_get_next_key", i, i, vp, vp)
        p("bpf_map_lookup_batch", i, i, vp, vp, vp, vp, ctypes.POINTER(u32), ctypes.POINTER(_BatchOpts))
        p("bpf_map_delete_batch", i, i, vp, ctypes.POINTER(u32), ctypes.POINTER(_BatchOpts))
        p("bpf_obj_get_info_by_fd", i, i, vp, ctypes.POINTER(u32))
        p("bpf_enable_stats", i, i)
        p("bpf_prog_test_run_opts", i, i, ctypes.POINTER(BpfTestRunOpts))
        p("ring_buffer__new", vp, i, _RB_SAMPLE_FN, vp, vp)
        p("ring_buffer__poll", i, vp, i)
        p("ring_buffer__consume", i, vp)
        p("ring_buffer__free", None, vp)

    def _keep_lock(self, name: str) -> None:
        """The calls that never wait (NO_WAIT) made through ctypes.PyDLL, which keeps the interpreter's lock,
        with the same prototypes. Through ctypes.CDLL each let the lock go and took it back, and beside a thread
        busy in Python (the screen importing and drawing its first frames while the probes load) taking it back
        waited for that thread's switch interval, up to 5 ms a call: making the scheduler's maps took 0.4-2.7 s
        rather than 0.05 s. Calls that may wait in the kernel (a program verified, a probe attached or removed,
        a batch over a large map) still let it go, so that the screen runs meanwhile."""
        keeping = ctypes.PyDLL(name, use_errno=True)
        for fn in NO_WAIT:
            released = getattr(self.lib, fn)
            kept = getattr(keeping, fn)
            kept.restype, kept.argtypes = released.restype, released.argtypes
            setattr(self.lib, fn, kept)

    def check(self, what: str, rc: int) -> int:
        """libbpf 1.x returns -errno on failure."""
        if rc < 0:
            raise BpfError(what, -rc, self.log.take())
        return rc

    def check_ptr(self, what: str, ptr: int | None) -> int:
        if not ptr:
            err = ctypes.get_errno() or errno.EINVAL
            raise BpfError(what, err, self.log.take())
        return ptr


# libbpf's calls that return at once: they read or write the object's own memory, or make one bpf() call on a
# single map element, which for these map types (no map of maps, whose update waits for an RCU grace period)
# never sleeps (_Lib._keep_lock)
NO_WAIT = ("bpf_object__next_program", "bpf_object__next_map", "bpf_object__find_map_by_name",
           "bpf_object__find_program_by_name", "bpf_program__name", "bpf_program__section_name",
           "bpf_program__set_autoload", "bpf_program__autoload", "bpf_program__fd", "bpf_link__fd", "bpf_map__fd",
           "bpf_map__name", "bpf_map__set_max_entries", "bpf_map__reuse_fd", "bpf_map__max_entries",
           "bpf_map__key_size", "bpf_map__value_size", "bpf_map__initial_value", "bpf_map_lookup_elem",
           "bpf_map_update_elem", "bpf_map_delete_elem", "bpf_map_lookup_and_delete_elem", "bpf_map_get_next_key",
           "bpf_obj_get_info_by_fd")


def libbpf_available() -> bool:
    try:
        _Lib.get()
        return True
    except StallscopeError:
        return False


class Link:
    """An attachment; destroyed explicitly or with its object."""

    def __init__(self, lib: _Lib, ptr: int, name: str):
        self._lib, self._ptr, self.name = lib, ptr, name

    def destroy(self) -> None:
        if self._ptr:
            self._lib.lib.bpf_link__destroy(self._ptr)
            self._ptr = None


class IterLink(Link):
    """An attached iterator program: each read() walks everything once (a new iterator fd)."""

    def read(self) -> bytes:
        lib = self._lib.lib
        fd = self._lib.check(f"create iterator {self.name}", lib.bpf_iter_create(lib.bpf_link__fd(self._ptr)))
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise BpfError(f"read iterator {self.name}", exc.errno or errno.EIO) from None
        finally:
            os.close(fd)


class Program:
    def __init__(self, obj: "BpfObject", ptr: int):
        self._obj, self._ptr = obj, ptr
        self._lib = obj._lib

    @property
    def name(self) -> str:
        return self._lib.lib.bpf_program__name(self._ptr).decode()

    @property
    def section(self) -> str:
        return self._lib.lib.bpf_program__section_name(self._ptr).decode()

    @property
    def autoload(self) -> bool:
        return bool(self._lib.lib.bpf_program__autoload(self._ptr))

    @autoload.setter
    def autoload(self, value: bool) -> None:
        self._lib.check(f"set autoload of {self.name}", self._lib.lib.bpf_program__set_autoload(self._ptr, value))

    @property
    def fd(self) -> int:
        return self._lib.lib.bpf_program__fd(self._ptr)

    def attach(self) -> Link:
        """Attach by section name (tp_btf/, raw_tp/, tp/, ...)."""
        ptr = self._lib.lib.bpf_program__attach(self._ptr)
        return Link(self._lib, self._lib.check_ptr(f"attach {self.name} ({self.section})", ptr), self.name)

    def attach_perf_event(self, pfd: int) -> Link:
        ptr = self._lib.lib.bpf_program__attach_perf_event(self._ptr, pfd)
        return Link(self._lib, self._lib.check_ptr(f"attach {self.name} to perf event", ptr), self.name)

    def attach_tracepoint_id(self, tp_id: int, label: str = "") -> Link:
        """Attach a tracepoint program (SEC("tracepoint/...")) to the tracefs event with this id
        (see tracepoint_ids); one program may be attached to several events."""
        pfd = open_tracepoint_event(tp_id)
        ptr = self._lib.lib.bpf_program__attach_perf_event(self._ptr, pfd)
        if not ptr:
            err = ctypes.get_errno() or errno.EINVAL
            os.close(pfd)
            raise BpfError(f"attach {self.name} to tracepoint {label or tp_id}", err, self._lib.log.take())
        return Link(self._lib, ptr, self.name)  # the link owns the perf event and closes it

    def attach_uprobe(self, binary: str, offset: int, pid: int = -1, retprobe: bool = False, cookie: int = 0) -> Link:
        """`cookie`: what the program reads with bpf_get_attach_cookie() (5.15+)."""
        if cookie:
            opts = _UprobeOpts(sz=ctypes.sizeof(_UprobeOpts), bpf_cookie=cookie, retprobe=retprobe)
            ptr = self._lib.lib.bpf_program__attach_uprobe_opts(self._ptr, pid, binary.encode(), offset,
                                                                ctypes.byref(opts))
        else:
            ptr = self._lib.lib.bpf_program__attach_uprobe(self._ptr, retprobe, pid, binary.encode(), offset)
        return Link(self._lib, self._lib.check_ptr(f"attach uprobe {self.name} at {binary}+{offset:#x}", ptr), self.name)

    def attach_iter(self) -> "IterLink":
        """Attach an iterator program (SEC("iter/...")); each IterLink.read() runs it once."""
        ptr = self._lib.lib.bpf_program__attach_iter(self._ptr, None)
        return IterLink(self._lib, self._lib.check_ptr(f"attach iterator {self.name}", ptr), self.name)

    def iterate(self) -> bytes:
        """Run an iterator program once over everything it walks; returns what it wrote."""
        link = self.attach_iter()
        try:
            return link.read()
        finally:
            link.destroy()

    def test_run(self, ctx: bytes = b"", cpu: int | None = None) -> int:
        """Run the loaded program once on `ctx` (BPF_PROG_TEST_RUN), on `cpu` if given
        (raw_tp programs only); returns the program's return value."""
        buf = _chars(len(ctx), ctx) if ctx else None
        opts = BpfTestRunOpts(sz=ctypes.sizeof(BpfTestRunOpts))
        if buf is not None:
            opts.ctx_in, opts.ctx_size_in = ctypes.addressof(buf), len(ctx)
        if cpu is not None:
            opts.flags, opts.cpu = BPF_F_TEST_RUN_ON_CPU, cpu
        self._lib.check(f"test run of {self.name}", self._lib.lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)))
        return opts.retval

    def stats(self) -> ProgStats:
        info = BpfProgInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        self._lib.check(f"info of {self.name}", self._lib.lib.bpf_obj_get_info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)))
        return ProgStats(self.name, info.run_cnt, info.run_time_ns, info.recursion_misses)


class Map:
    def __init__(self, obj: "BpfObject", ptr: int):
        self._obj, self._ptr = obj, ptr
        self._lib = obj._lib

    @property
    def name(self) -> str:
        return self._lib.lib.bpf_map__name(self._ptr).decode()

    @property
    def fd(self) -> int:
        return self._lib.lib.bpf_map__fd(self._ptr)

    @property
    def key_size(self) -> int:
        return self._lib.lib.bpf_map__key_size(self._ptr)

    @property
    def value_size(self) -> int:
        return self._lib.lib.bpf_map__value_size(self._ptr)

    @property
    def max_entries(self) -> int:
        return self._lib.lib.bpf_map__max_entries(self._ptr)

    def set_max_entries(self, n: int) -> None:
        self._lib.check(f"resize map {self.name}", self._lib.lib.bpf_map__set_max_entries(self._ptr, n))

    def reuse_fd(self, fd: int) -> None:
        """Before load: this map is the one behind `fd` (another object's), not a new one."""
        self._lib.check(f"share map {self.name}", self._lib.lib.bpf_map__reuse_fd(self._ptr, fd))

    def initial_value(self) -> ctypes.Array:
        """The writable image of a .rodata/.data/.bss map before load (mmap'ed after)."""
        size = ctypes.c_size_t(0)
        ptr = self._lib.lib.bpf_map__initial_value(self._ptr, ctypes.byref(size))
        if not ptr:
            raise BpfError(f"initial value of map {self.name}", errno.EINVAL)
        return (ctypes.c_char * size.value).from_address(ptr)

    def lookup(self, key: bytes | ctypes.Structure, value_size: int | None = None) -> bytes | None:
        kbuf = _buffer(key)
        vbuf = _chars(value_size or self.value_size)
        rc = self._lib.lib.bpf_map_lookup_elem(self.fd, kbuf, vbuf)
        if rc < 0:
            if -rc == errno.ENOENT:
                return None
            raise BpfError(f"lookup in map {self.name}", -rc)
        return vbuf.raw

    def update(self, key, value, flags: int = BPF_ANY) -> None:
        rc = self._lib.lib.bpf_map_update_elem(self.fd, _buffer(key), _buffer(value), flags)
        self._lib.check(f"update map {self.name}", rc)

    def delete(self, key) -> bool:
        rc = self._lib.lib.bpf_map_delete_elem(self.fd, _buffer(key))
        if rc < 0 and -rc != errno.ENOENT:
            raise BpfError(f"delete from map {self.name}", -rc)
        return rc == 0

    def delete_many(self, keys: list[bytes]) -> int:
        """Delete these keys in as few BPF_MAP_DELETE_BATCH calls as possible (one when all exist);
        keys already gone are skipped. Falls back to one delete per key where unsupported.
        Returns how many were deleted."""
        ks = self.key_size
        keys = [k for k in keys if len(k) == ks]
        if not keys:
            return 0
        buf = _chars(ks * (1 << (len(keys) - 1).bit_length()), b"".join(keys))  # a size of a few: its type is kept
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        deleted = start = 0
        while start < len(keys):
            count = ctypes.c_uint32(len(keys) - start)
            rc = self._lib.lib.bpf_map_delete_batch(self.fd, ctypes.byref(buf, start * ks), ctypes.byref(count),
                                                    ctypes.byref(opts))
            if rc >= 0:
                return deleted + len(keys) - start
            # the kernel stops at the first key it cannot delete; `count` is how many it did before it
            done = min(count.value, len(keys) - start)
            deleted += done
            err = -rc
            if err == errno.ENOENT:
                start += done + 1
                continue
            if err in (errno.EINVAL, 524):  # ENOTSUPP: no batch operations for this map type
                return deleted + sum(self.delete(k) for k in keys[start + done:])
            raise BpfError(f"batch delete from map {self.name}", err)
        return deleted

    def take_many(self, keys: list[bytes]) -> tuple[bytes, bytes] | None:
        """These keys' entries taken out of the map, each with the value it held as it was deleted
        (BPF_MAP_LOOKUP_AND_DELETE_ELEM: an update between a read and the delete is not lost): the values packed
        in the keys' order (zeros for a key already gone) and a byte each, 1 where the entry was there. None
        where the kernel cannot for this map type (a hash map's before 5.14)."""
        ks, vs, fd = self.key_size, self.value_size, self.fd
        take = self._lib.lib.bpf_map_lookup_and_delete_elem
        kbuf, vbuf = _chars(ks), _chars(vs)
        vals, present = [], bytearray(len(keys))
        for i, k in enumerate(keys):
            ctypes.memmove(kbuf, k, ks)
            rc = take(fd, kbuf, vbuf)
            if rc >= 0:
                vals.append(vbuf.raw)
                present[i] = 1
            elif -rc == errno.ENOENT:
                vals.append(bytes(vs))
            elif -rc in (errno.EINVAL, errno.EOPNOTSUPP, 524) and not i:  # 524: ENOTSUPP
                return None
            else:
                raise BpfError(f"take entries out of map {self.name}", -rc)
        return b"".join(vals), bytes(present)

    def keys(self) -> Iterator[bytes]:
        prev = None
        nxt = _chars(self.key_size)
        while True:
            rc = self._lib.lib.bpf_map_get_next_key(self.fd, prev, nxt)
            if rc < 0:
                if -rc == errno.ENOENT:
                    return
                raise BpfError(f"iterate map {self.name}", -rc)
            key = nxt.raw
            yield key
            prev = _chars(self.key_size, key)

    def items_batch(self, chunk: int = 4096, value_size: int | None = None) -> list[tuple[bytes, bytes]]:
        """All entries with BPF_MAP_LOOKUP_BATCH; falls back to key iteration where unsupported.
        A per-CPU map's value is one 8-byte aligned slot per possible CPU: pass its full size."""
        ks, vs = self.key_size, value_size or self.value_size
        out: list[tuple[bytes, bytes]] = []
        for keys, vals, n in self.batches(chunk, vs):
            # only the part the kernel filled is copied
            kr, vr = ctypes.string_at(keys, n * ks), ctypes.string_at(vals, n * vs)
            out += zip([kr[i:i + ks] for i in range(0, n * ks, ks)], [vr[i:i + vs] for i in range(0, n * vs, vs)])
        return out

    def batches(self, chunk: int = 4096, value_size: int | None = None):
        """Every entry, read with BPF_MAP_LOOKUP_BATCH: (keys, values, n) for each batch, the keys and values
        packed in buffers that the next batch reuses (copy what is kept). Where the kernel has no batch
        operations for the map, one batch of the entries read key by key."""
        ks, vs = self.key_size, value_size or self.value_size
        token_in = None
        token_out = _chars(max(ks, 8))
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        # the buffers are lent by a pool (a drain reads every cumulative map each interval: a zeroed buffer of
        # 4,096 task entries made each call cost 1% of a CPU in `top`, clearing pages and faulting them in)
        keys = vals = None
        try:
            while True:
                if keys is None:
                    keys = _POOL.take(ks * chunk)
                    vals = _POOL.take(vs * chunk)
                count = ctypes.c_uint32(chunk)
                rc = self._lib.lib.bpf_map_lookup_batch(self.fd, token_in, token_out, keys, vals, ctypes.byref(count),
                                                        ctypes.byref(opts))
                err = -rc if rc < 0 else 0
                if err and err not in (errno.ENOENT,):
                    if err == errno.ENOSPC:  # one bucket holds more than `chunk`: retry larger
                        chunk *= 4
                        _POOL.give(keys, vals)
                        keys = None
                        continue
                    if err in (errno.EINVAL, errno.ENOTSUPP if hasattr(errno, "ENOTSUPP") else 524, 524):
                        items = [(k, v) for k in self.keys() if (v := self.lookup(k, vs)) is not None]
                        if items:
                            yield b"".join(k for k, _ in items), b"".join(v for _, v in items), len(items)
                        return
                    raise BpfError(f"batch lookup in map {self.name}", err)
                if count.value:
                    yield keys, vals, count.value
                if err == errno.ENOENT:
                    return
                if token_in is None:
                    token_in = _chars(max(ks, 8))
                ctypes.memmove(token_in, token_out, len(token_out))
        finally:
            if keys is not None:
                _POOL.give(keys, vals)


class _BufferPool:
    """Buffers lent and given back, a few of each size: the batch reads' (none is zeroed again: the kernel
    writes the entries it returns, and only those are read)."""

    PER_SIZE, SIZES = 4, 64

    def __init__(self) -> None:
        self._free: dict[int, list[ctypes.Array]] = {}

    def take(self, size: int) -> ctypes.Array:
        free = self._free.get(size)
        try:
            return free.pop() if free else _chars(size)  # list.pop is atomic: threads may share the pool
        except IndexError:  # another thread took the last one
            return _chars(size)

    def give(self, *bufs: ctypes.Array) -> None:
        for buf in bufs:
            free = self._free.get(len(buf))
            if free is None:
                if len(self._free) >= self.SIZES:
                    continue
                free = self._free.setdefault(len(buf), [])
            if len(free) < self.PER_SIZE:
                free.append(buf)


_POOL = _BufferPool()


def _buffer(data) -> ctypes.Array | ctypes.Structure:
    if isinstance(data, (bytes, bytearray)):
        return _chars(len(data), data)
    return data


# ctypes keeps the array types it makes only weakly: `create_string_buffer(n)` made a type for each
# call whose size was not in use, and left it in a reference cycle (a type and its descriptors) when the
# buffer went, tens of them a drain, for the cycle collector to find. Kept here, each is made once.
_ARRAY_TYPES: dict[int, type] = {}
_MAX_ARRAY_TYPES = 1024


def _chars(size: int, init: bytes | bytearray = b"") -> ctypes.Array:
    """A zeroed buffer of `size` bytes (create_string_buffer's), `init` copied to its start."""
    t = _ARRAY_TYPES.get(size)
    if t is None:
        t = ctypes.c_char * size
        if len(_ARRAY_TYPES) < _MAX_ARRAY_TYPES:
            _ARRAY_TYPES[size] = t
    buf = t()
    if init:
        ctypes.memmove(buf, bytes(init), min(len(init), size))
    return buf


class RingBuffer:
    """libbpf ring buffer; `callback(bytes)` is called for each record from poll()."""

    def __init__(self, lib: _Lib, map_fd: int, callback: Callable[[bytes], None]):
        self._lib = lib
        self.errors = 0

        def on_sample(_ctx, data, size):
            try:
                callback(ctypes.string_at(data, size))
            except Exception:  # noqa: BLE001 - a Python exception must not unwind through C
                self.errors += 1
            return 0

        self._cb = _RB_SAMPLE_FN(on_sample)
        self._ptr = lib.check_ptr("create ring buffer", lib.lib.ring_buffer__new(map_fd, self._cb, None, None))

    def poll(self, timeout_ms: int = 0) -> int:
        rc = self._lib.lib.ring_buffer__poll(self._ptr, timeout_ms)
        if rc < 0 and -rc != errno.EINTR:
            raise BpfError("poll ring buffer", -rc)
        return max(rc, 0)

    def close(self) -> None:
        if self._ptr:
            self._lib.lib.ring_buffer__free(self._ptr)
            self._ptr = None


class BpfObject:
    """One compiled BPF object file: configure before load(), attach after."""

    def __init__(self, path: str):
        self._lib = _Lib.get()
        self.path = path
        self._lib.log.take()
        ptr = self._lib.lib.bpf_object__open_file(path.encode(), None)
        self._ptr = self._lib.check_ptr(f"open BPF object {os.path.basename(path)}", ptr)
        self.links: list[Link] = []
        self._rings: list[RingBuffer] = []
        # maps found by name, and data sections' maps: a drain finds several each interval, and a section's by
        # reading every map's name through ctypes; made anew once loaded
        self._found: dict[tuple[str, str], Map] = {}

    def programs(self) -> list[Program]:
        out, cur = [], None
        while True:
            cur = self._lib.lib.bpf_object__next_program(self._ptr, cur)
            if not cur:
                return out
            out.append(Program(self, cur))

    def maps(self) -> list[Map]:
        out, cur = [], None
        while True:
            cur = self._lib.lib.bpf_object__next_map(self._ptr, cur)
            if not cur:
                return out
            out.append(Map(self, cur))

    def program(self, name: str) -> Program:
        ptr = self._lib.lib.bpf_object__find_program_by_name(self._ptr, name.encode())
        if not ptr:
            raise BpfError(f"no program {name} in {os.path.basename(self.path)}", errno.ENOENT)
        return Program(self, ptr)

    def map(self, name: str) -> Map:
        found = self._found.get(("map", name))
        if found is not None:
            return found
        ptr = self._lib.lib.bpf_object__find_map_by_name(self._ptr, name.encode())
        if not ptr:
            raise BpfError(f"no map {name} in {os.path.basename(self.path)}", errno.ENOENT)
        found = self._found[("map", name)] = Map(self, ptr)
        return found

    def section_map(self, section: str) -> Map:
        """The internal map of a data section ('.rodata', '.bss'); libbpf prefixes its name."""
        found = self._found.get(("section", section))
        if found is not None:
            return found
        for m in self.maps():
            if m.name.endswith(section):
                self._found[("section", section)] = m
                return m
        raise BpfError(f"no {section} section in {os.path.basename(self.path)}", errno.ENOENT)

    def load(self) -> None:
        self._lib.log.take()
        self._found.clear()  # libbpf's maps as loaded, found again
        self._lib.check(f"load BPF object {os.path.basename(self.path)}", self._lib.lib.bpf_object__load(self._ptr))

    def attach(self, program: Program) -> Link:
        link = program.attach()
        self.links.append(link)
        return link

    def ring_buffer(self, map_name: str, callback: Callable[[bytes], None]) -> RingBuffer:
        rb = RingBuffer(self._lib, self.map(map_name).fd, callback)
        self._rings.append(rb)
        return rb

    def last_log(self) -> str:
        return self._lib.log.take()

    def close(self) -> None:
        for rb in self._rings:
            rb.close()
        self._rings.clear()
        for link in self.links:
            link.destroy()
        self.links.clear()
        if self._ptr:
            self._lib.lib.bpf_object__close(self._ptr)
            self._ptr = None

    def __enter__(self) -> "BpfObject":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Where tracefs is usually mounted; libbpf 1.1 looks in the same two places.
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")

_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}
PERF_TYPE_TRACEPOINT = 2
PERF_FLAG_FD_CLOEXEC = 8


class _PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr up to config1 (PERF_ATTR_SIZE_VER0): all a tracepoint event needs."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


def tracepoint_ids(category: str, names) -> dict[str, int]:
    """The ids of tracefs events (events/CATEGORY/NAME/id), what perf_event_open takes as a
    PERF_TYPE_TRACEPOINT config; an event this kernel lacks is left out.

    Where tracefs is not mounted they are read from a tracefs mounted in a private mount namespace
    (unshare(1)), which leaves the system's mounts as they are: the ids are the kernel's, the same
    in every mount. Raises BpfError when no tracefs can be read at all."""
    names = list(names)
    for root in TRACEFS_DIRS:
        if os.path.isdir(f"{root}/events"):
            return {n: int(open(f"{root}/events/{category}/{n}/id").read()) for n in names
                    if os.path.exists(f"{root}/events/{category}/{n}/id")}
    unshare = shutil.which("unshare")
    if unshare is None:
        raise BpfError("tracefs is not mounted and unshare(1) is missing", errno.ENOENT,
                       hint="mount -t tracefs nodev /sys/kernel/tracing")
    mnt = tempfile.mkdtemp(prefix="stallscope-tracefs-")
    script = ('mount -t tracefs nodev "$0" || exit 1; d="$0/events/$1"; shift; '
              'for n; do [ -r "$d/$n/id" ] && echo "$n $(cat "$d/$n/id")"; done; exit 0')
    try:
        r = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", script, mnt, category,
                            *names], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BpfError(f"read tracepoint ids in a private mount namespace ({exc})", errno.ENOENT) from None
    finally:
        os.rmdir(mnt)
    if r.returncode:
        raise BpfError(f"tracefs is not mounted and cannot be mounted privately ({r.stderr.strip()})",
                       errno.ENOENT, hint="mount -t tracefs nodev /sys/kernel/tracing")
    return {n: int(i) for n, i in (line.split() for line in r.stdout.splitlines())}


def open_tracepoint_event(tp_id: int) -> int:
    """A perf event on one tracepoint for every task (pid -1, cpu 0: a BPF program attached to it
    runs on every CPU, as with libbpf's bpf_program__attach_tracepoint); raises BpfError."""
    nr = _PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise BpfError(f"perf_event_open number unknown on {platform.machine()}", errno.ENOSYS)
    attr = _PerfEventAttr(type=PERF_TYPE_TRACEPOINT, size=ctypes.sizeof(_PerfEventAttr), config=tp_id)
    libc = _Lib.get()._libc
    fd = libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(-1), ctypes.c_int(0), ctypes.c_int(-1),
                      ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        raise BpfError(f"perf_event_open of tracepoint {tp_id}", ctypes.get_errno())
    return fd


class RunTimeStats:
    """Keeps the kernel's BPF run-time accounting on while held (BPF_ENABLE_STATS)."""

    def __init__(self) -> None:
        lib = _Lib.get()
        rc = lib.lib.bpf_enable_stats(BPF_STATS_RUN_TIME)
        self.fd = rc if rc >= 0 else -1
        self.error = "" if rc >= 0 else os.strerror(-rc)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
