"""Names that come from other users' processes (comm, paths, symbols) and from recording files made
safe to print.

Plain text only: HTML and Textual markup have their own escaping, applied where they render. And the
files such processes choose (their executables, their libraries), opened and read within bounds.
"""

from __future__ import annotations

import os
import selectors
import stat
import subprocess
import time
from typing import BinaryIO


def printable(text: str, replacement: str = "?") -> str:
    """Control characters (a terminal escape, a newline that would split a record) replaced."""
    if text.isprintable():  # nearly every name and frame: checked in C, returned as it is
        return text
    return "".join(ch if ch.isprintable() else replacement for ch in text)


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(text: object) -> str:
    """`text` with every character that is not printable written as a backslash escape (`\\x1b`, `\\n`,
    `\\u2028`; a byte that was not UTF-8, kept as a surrogate by surrogateescape, as `\\xff`): a message
    keeps what the user typed or the file held, legibly, on one line, and sends no escape sequence to
    the terminal. For messages (stderr), where nothing is aligned in columns; tables use `printable`."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for an undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


# ---- files other users control ------------------------------------------------------------------
# stallscope runs as root and reads what traced processes map (their executables and libraries): a
# hostile process chooses those files. They are opened only as regular files of a bounded size, read
# within a byte and time budget, and the tools run on them are bounded too.


def open_regular(path: str, max_bytes: int, follow_symlinks: bool = False) -> BinaryIO | None:
    """`path` opened for reading when it is a regular file of at most `max_bytes`; None otherwise.

    Checked with stat before it is opened, so that no device is ever opened (a driver's open can act);
    opened non-blocking (a FIFO put in its place meanwhile cannot hang the open) and, unless asked,
    without following a link in its last component; checked again on the descriptor, which must be the
    file stat saw."""
    try:
        seen = os.stat(path) if follow_symlinks else os.lstat(path)
        if not stat.S_ISREG(seen.st_mode) or seen.st_size > max_bytes:
            return None
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
        fd = os.open(path, flags)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size <= max_bytes and (st.st_dev, st.st_ino) == (seen.st_dev, seen.st_ino):
            return os.fdopen(fd, "rb")
    except OSError:
        pass
    os.close(fd)
    return None


class BudgetExceeded(Exception):
    """A read past its byte or time budget."""


class BudgetedReader:
    """A binary stream (read, seek, tell) that stops a parser past `max_bytes` read in all or past
    `seconds`: whatever a file's headers claim (a symbol table of 50 GB in a sparse file, a loop of
    section links), reading it costs at most that much memory and time."""

    def __init__(self, stream, max_bytes: int, seconds: float):
        self._stream = stream
        self._left = max_bytes
        self._deadline = time.monotonic() + seconds

    def read(self, size: int = -1) -> bytes:
        if time.monotonic() > self._deadline:
            raise BudgetExceeded("read past its time budget")
        if size is None or size < 0 or size > self._left:
            size = self._left + 1  # read one byte more than allowed: past the budget only if the file has it
        data = self._stream.read(size)
        self._left -= len(data)
        if self._left < 0:
            raise BudgetExceeded("read past its byte budget")
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()

    def fileno(self) -> int:
        return self._stream.fileno()

    def close(self) -> None:
        self._stream.close()


def run_bounded(argv: list[str], seconds: float, max_output: int, pass_fds: tuple[int, ...] = ()) -> str:
    """A tool's standard output (stderr discarded), as text; raises BudgetExceeded (the tool killed) when it
    runs longer than `seconds` or writes more than `max_output` bytes, OSError when it cannot run."""
    deadline = time.monotonic() + seconds
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            pass_fds=pass_fds)
    chunks, size = [], 0
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BudgetExceeded(f"{os.path.basename(argv[0])} ran past {seconds:g} s")
                if not sel.select(left):
                    continue
                data = os.read(proc.stdout.fileno(), 1 << 16)
                if not data:
                    break
                size += len(data)
                if size > max_output:
                    raise BudgetExceeded(f"{os.path.basename(argv[0])} wrote more than {max_output} bytes")
                chunks.append(data)
        proc.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BudgetExceeded(f"{os.path.basename(argv[0])} ran past {seconds:g} s") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    return b"".join(chunks).decode("utf-8", "replace")
