"""Where stallscope writes: output paths that never destroy what is there.

Every command that writes a file goes through here (`record -o`, `export -o`, `diff -o`):
- a new file is created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600: a recording holds kernel
  addresses, command lines and every user's thread names, and stallscope runs as root, which must
  not follow a symbolic link someone planted where it writes;
- an existing file is never written over silently: it is refused unless `--force`, and then
  replaced by a new file (a rename, for text), never written into;
- text may go through a character device, a FIFO or a descriptor stallscope inherited
  (`/dev/stdout`): opened without O_CREAT or O_TRUNC, nothing unlinked;
- a recording needs a regular file (SQLite seeks in it and writes FILE-wal and FILE-shm beside it),
  locked while it is written so that a second recorder cannot take it over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import re
import resource
import secrets
import stat
from typing import IO

from stallscope.errors import StallscopeError

MODE = 0o600
# files SQLite keeps beside a recording: the write-ahead log, its index, the rollback journal
SIDE_FILES = ("-wal", "-shm", "-journal")
_NEW = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# /dev/stdout and its kin: a descriptor stallscope already holds, written as it is (at its offset)
_INHERITED = re.compile(r"^/(?:dev/(?:stdout|stderr|stdin|fd/(\d+))|proc/(self|\d+)/fd/(\d+))$")
_STD_FDS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def inherited_fd(path: str) -> int | None:
    """The descriptor of this process that `path` names (/dev/stdout, /dev/fd/N, /proc/self/fd/N, or
    a symbolic link to one of them), else None."""
    for _ in range(8):
        m = _INHERITED.match(os.path.normpath(path)) if path.startswith("/") else None
        if m:
            if m.group(2) not in (None, "self", str(os.getpid())):
                return None
            return _STD_FDS.get(m.group(0)) if m.group(0) in _STD_FDS else int(m.group(1) or m.group(3))
        try:
            target = os.readlink(path)
        except OSError:
            return None
        path = os.path.join(os.path.dirname(path), target)
    return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a regular file"


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StallscopeError(f"cannot write {path}: {exc.strerror}", "check the path and its permissions") from None


def _check_name(path: str) -> None:
    if not path:
        raise StallscopeError("the output file name is empty", "give a file name after -o")
    if "\0" in path:
        raise StallscopeError("the output file name holds a NUL byte", "give a file name after -o")


def _check_directory(path: str) -> None:
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise StallscopeError(f"cannot write {path}: no directory {parent}", "create it first")


def _is_free(st: os.stat_result) -> bool:
    """An empty regular file of one's own (`-o $(mktemp)`): nothing there to lose."""
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.geteuid()


def _exists_error(path: str, st: os.stat_result) -> StallscopeError:
    return StallscopeError(f"{path} exists ({st.st_size} bytes)", "pass --force to replace it, or choose another name")


def _os_error(path: str, exc: OSError) -> StallscopeError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = storage_limit(path, exc.errno)
        return StallscopeError(why, storage_hint(why))
    return StallscopeError(f"cannot write {path}: {exc.strerror}", "check the path and its permissions")


# ---- why a write failed --------------------------------------------------------------------------

def _kib(n: int) -> str:
    return f"{n // 1024} KiB"


def size_limit() -> int | None:
    """RLIMIT_FSIZE (`ulimit -f`) in bytes, None when unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_limit(path: str, err: int | None = None, margin: int = 1 << 20) -> str:
    """What stopped a write to `path`, in words: the file size limit or no space left ("" when
    neither). `err`: the errno when known; otherwise (SQLite hides it) judged from the limit, the
    files' sizes and the free space (under `margin` bytes counts as full)."""
    limit = size_limit()
    sizes = [os.path.getsize(p) for p in (path, *(path + s for s in SIDE_FILES)) if os.path.isfile(p)]
    if limit is not None and (err == errno.EFBIG or err is None and max(sizes, default=0) + (64 << 10) >= limit):
        return f"{path} reached the file size limit (ulimit -f: {_kib(limit)})"
    if err == errno.EFBIG:
        return f"{path} reached the largest file size of its file system"
    if err == errno.EDQUOT:
        return f"the disk quota is exceeded writing {path}"
    free = free_bytes(path)
    if err == errno.ENOSPC or (free is not None and free < margin):
        return f"no space left on the file system of {path}" + (f" ({_kib(free)} free)" if free is not None else "")
    return ""


def storage_hint(why: str) -> str:
    """What to do about what storage_limit() said."""
    if "ulimit" in why:
        return "raise the limit (ulimit -f), or record for a shorter time"
    return "free space, or write to another file system"


# ---- recordings ----------------------------------------------------------------------------------

def _holders(st: os.stat_result) -> set[int]:
    """Processes holding a lock on this inode (/proc/locks): a recorder (stallscope's flock, SQLite's
    POSIX locks), or a reader."""
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = set()
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "->" in fields:  # a waiter on the lock above: not a holder
                    continue
                if len(fields) >= 6 and fields[5] == want and fields[4].isdigit():
                    out.add(int(fields[4]))
    except OSError:
        pass
    out.discard(os.getpid())
    return out


def _in_use(path: str) -> set[int]:
    pids = set()
    for p in (path, path + "-shm"):
        st = _lstat(p)
        if st is not None and stat.S_ISREG(st.st_mode):
            pids |= _holders(st)
    return pids


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc = None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> int:
    """fallocate(2) (os has only posix_fallocate, which grows the file): 0, or the errno."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    if _libc.fallocate(fd, mode, offset, length) == 0:
        return 0
    return ctypes.get_errno()


class RecordingFile:
    """A new, empty recording file that this process created and holds (flock) while it writes."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd
        st = os.fstat(fd)
        self._id = (st.st_dev, st.st_ino)
        self._reserved_from = None

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def verify(self) -> None:
        """The path still names the file created here (SQLite opens it by name)."""
        st = _lstat(self.path)
        if st is None or not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self._id:
            raise StallscopeError(f"{self.path} was replaced while stallscope was opening it",
                                  "something else writes there: choose another name")

    def reserve(self, length: int) -> bool:
        """Keep `length` bytes allocated past the end of the file (not counted in its size), so that
        the last writes of a recording never meet a full disk. False: no room. Where the file
        system cannot reserve, the free space is checked instead."""
        offset = self.size()
        err = _fallocate(self.fd, _FALLOC_FL_KEEP_SIZE, offset, length)
        if err == 0:
            self._reserved_from = offset
            return True
        if err in (errno.ENOSPC, errno.EDQUOT):
            return False
        free = free_bytes(self.path)
        return free is None or free >= length

    def release(self) -> None:
        """Give back what reserve() kept past the end of the file."""
        if self._reserved_from is not None:
            end = self.size()
            _fallocate(self.fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, end, 1 << 40)
            self._reserved_from = None

    def discard(self) -> None:
        """Nothing worth keeping was written: remove the file and what SQLite made beside it."""
        st = _lstat(self.path)
        if st is not None and (st.st_dev, st.st_ino) == self._id:
            os.unlink(self.path)
            for suffix in SIDE_FILES:
                side = _lstat(self.path + suffix)
                if side is not None and stat.S_ISREG(side.st_mode):
                    os.unlink(self.path + suffix)
        self.close()

    def close(self) -> None:
        """After SQLite has closed the file: closing a descriptor of it while SQLite holds it open would
        drop SQLite's own locks (POSIX locks belong to the process and the file)."""
        if self.fd >= 0:
            self._reserved_from = None
            os.close(self.fd)
            self.fd = -1


def create_recording(path: str, force: bool = False) -> RecordingFile:
    """A new recording file at `path`, mode 0600, locked. Refused: an empty name, a directory, a
    symbolic link, anything but a regular file, an existing file (unless `force`), SQLite's side
    files of another recording, and a file another process holds (even with `force`)."""
    _check_name(path)
    non_regular = ("a recording must be a regular file: SQLite seeks in it and writes FILE-wal beside it; "
                   "record to a file, then `stallscope export FILE -o ...`")
    if inherited_fd(path) is not None:
        raise StallscopeError(f"cannot record to {path}: it names a descriptor", non_regular)
    st = _lstat(path)
    if st is None:
        _check_directory(path)
    elif stat.S_ISDIR(st.st_mode):
        raise StallscopeError(f"{path} is a directory", "give a file name, e.g. -o DIR/run.stall")
    elif not stat.S_ISREG(st.st_mode):
        raise StallscopeError(f"cannot record to {path}: it is {_kind(st.st_mode)}", non_regular)
    busy = _in_use(path)
    if busy:
        raise StallscopeError(f"{path} is in use by process {', '.join(map(str, sorted(busy)))}",
                              "another stallscope records or reads it: choose another name")
    replace = [path] if st is not None and not _is_free(st) else []
    if replace and not force:
        raise _exists_error(path, st)
    for suffix in SIDE_FILES:
        side = _lstat(path + suffix)
        if side is None:
            continue
        if stat.S_ISDIR(side.st_mode):
            raise StallscopeError(f"cannot record to {path}: {path + suffix} is a directory", "choose another name")
        if not force:
            raise StallscopeError(f"{path + suffix} exists (left by a recording that was cut off?)",
                                  "move it away, or pass --force to remove it")
        replace.append(path + suffix)
    try:
        if st is not None and path not in replace:
            os.unlink(path)  # an empty file of one's own: replaced, so that the new one is 0600
        for p in replace:
            os.unlink(p)
        fd = os.open(path, os.O_RDWR | _NEW, MODE)
    except FileExistsError:
        raise StallscopeError(f"{path} appeared while stallscope was creating it",
                              "another process writes there: choose another name") from None
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StallscopeError(f"{path} was taken by another process as stallscope created it",
                              "choose another name") from None
    return RecordingFile(path, fd)


# ---- text outputs --------------------------------------------------------------------------------

class TextOutput:
    """Where `export -o` and `diff -o` write, opened by open_text(); commit() when all is written,
    abandon() otherwise (a new file is removed, an existing one left as it was)."""

    def __init__(self, path: str, fd: int, new_path: str | None = None, replaces: bool = False):
        self.path = path
        self.file: IO[str] = os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape")
        self._new_path = new_path  # the file created here (removed if abandoned)
        self._replaces = replaces  # rename it over `path` on commit

    def write(self, text: str) -> None:
        try:
            self.file.write(text)
        except OSError as exc:
            self.abandon()
            raise _os_error(self.path, exc) from None

    def commit(self) -> None:
        try:
            self.file.close()
            if self._replaces:
                os.replace(self._new_path, self.path)
        except OSError as exc:
            self.abandon()
            raise _os_error(self.path, exc) from None
        self._new_path = None

    def abandon(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        if self._new_path is not None:
            try:
                os.unlink(self._new_path)
            except OSError:
                pass
            self._new_path = None


def _writable_fd(path: str, fd: int) -> None:
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        raise StallscopeError(f"cannot write {path}: descriptor {fd} is not open", "redirect it, or give a file") from None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise StallscopeError(f"cannot write {path}: descriptor {fd} is open for reading only", "give a file")


def _existing(path: str, st: os.stat_result, force: bool) -> bool:
    """What is at `path` may be written: True to write through it (a device or FIFO), False to replace
    it (a regular file, with --force or empty and one's own); refused otherwise."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise StallscopeError(f"{path} is a dangling symbolic link", "stallscope does not create files through "
                                  "symbolic links: name the file itself") from None
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise StallscopeError(f"{path} is a symbolic link to {_kind(mode)}",
                                  "stallscope writes through a link only to a device or FIFO: name the file itself")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISDIR(mode):
        raise StallscopeError(f"{path} is a directory", "give a file name inside it")
    if not stat.S_ISREG(mode):
        raise StallscopeError(f"cannot write {path}: it is {_kind(mode)}", "give a file, a character device or a FIFO")
    if not force and not _is_free(st):
        raise _exists_error(path, st)
    return False


def check_text(path: str, force: bool = False) -> None:
    """open_text()'s refusals, made before the work whose text goes there (a report of a long
    recording takes seconds): a refused `-o` costs nothing. Nothing is created or opened; open_text()
    checks again when the text is ready."""
    _check_name(path)
    fd = inherited_fd(path)
    if fd is not None:
        _writable_fd(path, fd)
        return
    st = _lstat(path)
    if st is None:
        _check_directory(path)
    else:
        _existing(path, st, force)


def open_text(path: str, force: bool = False) -> TextOutput:
    """An output for text at `path`; see the module's rules."""
    _check_name(path)
    fd = inherited_fd(path)
    if fd is not None:
        _writable_fd(path, fd)
        return TextOutput(path, os.dup(fd))
    st = _lstat(path)
    if st is None:
        _check_directory(path)
        try:
            return TextOutput(path, os.open(path, os.O_WRONLY | _NEW, MODE), new_path=path)
        except FileExistsError:
            raise StallscopeError(f"{path} appeared while stallscope was creating it", "choose another name") from None
        except OSError as exc:
            raise _os_error(path, exc) from None
    if _existing(path, st, force):
        return _open_through(path)
    # replaced by a new file renamed over it: never written into (someone else's file keeps its
    # owner's data; a failed write leaves the old one whole)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | _NEW, MODE)
    except OSError as exc:
        raise _os_error(path, exc) from None
    return TextOutput(path, fd, new_path=tmp, replaces=True)


def _open_through(path: str) -> TextOutput:
    """A character device or a FIFO (also through a symbolic link such as /dev/stdout): written as
    it is, never created, truncated or unlinked."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_error(path, exc) from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped for something else meanwhile
        os.close(fd)
        raise StallscopeError(f"{path} changed while stallscope opened it", "name a file, device or FIFO")
    return TextOutput(path, fd)


def write_text(path: str, text: str, force: bool = False) -> None:
    """`text` to `path` by the rules above."""
    out = open_text(path, force)
    out.write(text)
    out.commit()
