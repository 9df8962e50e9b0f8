"""A stage of a page made beside the others, in a forked process.

Once a recording is folded, a report's stages read the same model and none needs another's result: the
JSON export document takes seconds of one CPU (a 10-minute hackbench recording's: 4-5 s), the series and
the flame graphs' stacks nearly as long. On a machine with a CPU to spare, `Beside(fn, *args)` forks: the
child makes `fn(*args)` from the model it shares copy-on-write and sends it back pickled through a pipe, while
this process makes the document; `result()` waits for it. Work that comes in parts is shared out by `Taken`:
the child takes parts one after another (a report's series and stacks: reports/build.py PageJobs), and this
process, its document made, takes those left, so that neither waits while the other still has work.

The answer is the same either way: the page is byte-identical (a test). Whenever the child cannot give
its answer (no second CPU, not enough free memory for the pages it may copy, the fork refused, the child
killed or failing), the stage is made here as it would be without a child, and raises here what it
raises. The child writes nothing but its answer and leaves with `os._exit`: no buffer flushed twice, no
exit handler run in it.
"""

from __future__ import annotations

import os
import pickle
import signal
from typing import Any, Callable

_MEMINFO = "/proc/meminfo"


def _available_bytes() -> int | None:
    try:
        with open(_MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def cpus_to_spare() -> bool:
    """More than one CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def worth_forking() -> bool:
    """A second CPU, and free memory for every page of this process to be copied (the child's reads of
    the model touch its objects' reference counts, which copies their pages)."""
    if not hasattr(os, "fork") or not cpus_to_spare():
        return False
    available, resident = _available_bytes(), _resident_bytes()
    return available is not None and resident is not None and available > 2 * resident


class Beside:
    """`fn(*args)` made in a forked child when `worth_forking()`, else when `result()` asks for it."""

    def __init__(self, fn: Callable[..., Any], *args: Any, fork: bool | None = None):
        self._fn, self._args = fn, args
        self._pid: int | None = None
        self._read = -1
        if not (worth_forking() if fork is None else fork):
            return
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:
            os.close(r)
            _child(w, fn, args)  # never returns
        os.close(w)
        self._pid, self._read = pid, r

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def result(self) -> Any:
        """The child's answer, or (no child, or none from it) `fn(*args)` made here."""
        if self._pid is None:
            return self._fn(*self._args)
        chunks = []
        try:
            while chunk := os.read(self._read, 1 << 20):
                chunks.append(chunk)
        finally:
            self._reap(kill=False)
        try:
            ok, value = pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - killed midway (out of memory, say): no answer, made here
            ok = False
        return value if ok else self._fn(*self._args)

    def close(self) -> None:
        """Ends a child whose answer is no longer wanted (this process is leaving on an error)."""
        self._reap(kill=True)

    def _reap(self, kill: bool) -> None:
        pid, self._pid = self._pid, None
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        if pid is None:
            return
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                os.waitpid(pid, 0)
                return
            except InterruptedError:
                continue
            except ChildProcessError:
                return

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Taken:
    """Jobs numbered 0..n - 1, each taken once, by whichever process asks first: this one, or a child forked
    after they were made (a Beside's), so that the one free first goes on with what is left rather than waiting
    for the other. The numbers wait in a pipe whose writing end is closed: a read takes one, atomically, and
    reads nothing once they are all taken. Without a pipe (no descriptor to be had) this process takes them all
    and a child none."""

    def __init__(self, n: int):
        if not 0 <= n <= 255:
            raise ValueError("from 0 to 255 jobs")
        self._owner, self._left, self._read = os.getpid(), list(range(n - 1, -1, -1)), -1
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            os.write(w, bytes(range(n)))  # far less than a pipe holds: never blocks
        except OSError:
            os.close(r)
            return
        finally:
            os.close(w)
        self._read, self._left = r, []

    def take(self) -> int | None:
        """The next job not taken, or None."""
        if self._read < 0:
            return self._left.pop() if self._left and os.getpid() == self._owner else None
        try:
            got = os.read(self._read, 1)
        except OSError:
            return None
        return got[0] if got else None

    def close(self) -> None:
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        self._left = []

    def __enter__(self) -> "Taken":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _child(w: int, fn: Callable[..., Any], args: tuple) -> None:
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with its parent, quietly
        try:
            data = pickle.dumps((True, fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 - the parent makes it again and raises it there
            data = pickle.dumps((False, None))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the pipe closed: the parent left
        pass
    finally:
        os._exit(code)
