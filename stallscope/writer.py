"""A recording written in a thread of its own, so that the session's drains keep their time.

The session's thread drains the probes at each tick; a write that waits (a slow disk, or the file
system's journal thread kept from a CPU: under real-time busy loops a recording's 1 s intervals lasted
1.0 and 2.7 s, the drain waiting for the file) no longer stretches the intervals. Intervals are
written in order; at most `depth` wait, after which the session waits for the disk as before (memory
stays bounded). A write that fails is raised at the next `append` or at `flush`/`update_meta` (one
interval later than when written in place), and nothing after it is written: what was written before
stays readable, as `RecordingWriter` keeps it.
"""

from __future__ import annotations

import queue
import threading

_DONE = object()


class WriterThread:
    """`RecordingWriter`'s appends, in a thread; the rest (meta, close) in the caller's, after a flush."""

    def __init__(self, writer, depth: int = 8):
        self.writer = writer
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._reported = False  # the error raised to the caller once: never said twice
        self._thread = threading.Thread(target=self._run, name="stallscope-writer", daemon=True)
        self._thread.start()

    @property
    def intervals(self) -> int:
        """Intervals written so far (all of them once flushed)."""
        return self.writer.intervals

    def _run(self) -> None:
        while True:
            iv = self._queue.get()
            try:
                if iv is _DONE:
                    return
                if self._error is None:
                    try:
                        self.writer.append(iv)
                    except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                        self._error = exc
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            self._reported = True
            raise self._error

    def append(self, iv) -> None:
        """Queue one interval (waits while `depth` intervals wait); raises the error of an earlier write."""
        self._raise()
        self._queue.put(iv)

    def flush(self) -> None:
        """Every queued interval written; raises the error of a write that failed."""
        self._queue.join()
        self._raise()

    def update_meta(self, meta) -> None:
        self.flush()
        self.writer.update_meta(meta)

    def close(self) -> None:
        """What is queued written, the thread ended, then the file closed as `RecordingWriter.close` does;
        a failed write not raised yet is raised then (once the file is closed)."""
        if self._thread.is_alive():
            self._queue.put(_DONE)
            self._thread.join()
        self.writer.close()
        if self._error is not None and not self._reported:
            self._raise()
