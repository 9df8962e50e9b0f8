"""The recording's writes in a thread of their own (stallscope/writer.py): the session's drains keep
their time while a write waits; order, errors and closing as when written in place."""

from __future__ import annotations

import threading
import time

import pytest

from stallscope.errors import StallscopeError
from stallscope.writer import WriterThread


class SlowWriter:
    """A RecordingWriter stand-in whose appends wait for `gate` (a disk that stalls) and may fail."""

    def __init__(self, fail_at: int | None = None):
        self.gate = threading.Event()
        self.written: list[int] = []
        self.intervals = 0
        self.fail_at = fail_at
        self.meta = None
        self.closed = False

    def append(self, iv: int) -> None:
        self.gate.wait(5)
        if iv == self.fail_at:
            raise StallscopeError("disk full")
        self.written.append(iv)
        self.intervals += 1

    def update_meta(self, meta) -> None:
        self.meta = meta

    def close(self) -> None:
        self.closed = True


def test_appends_return_while_a_write_waits_and_land_in_order():
    w = SlowWriter()
    t = WriterThread(w, depth=4)
    start = time.monotonic()
    for i in range(4):
        t.append(i)  # the first waits in the thread, three more are queued
    assert time.monotonic() - start < 1 and w.written == []
    w.gate.set()
    t.update_meta("meta")
    assert w.written == [0, 1, 2, 3] and t.intervals == 4 and w.meta == "meta"
    t.close()
    assert w.closed


def test_a_failed_write_is_raised_once_and_nothing_after_it_is_written():
    w = SlowWriter(fail_at=1)
    w.gate.set()
    t = WriterThread(w)
    t.append(0)
    t.append(1)
    t.append(2)  # queued before the failure was seen
    with pytest.raises(StallscopeError, match="disk full"):
        t.flush()
    with pytest.raises(StallscopeError):  # still failed: a caller that goes on hears it again
        t.append(3)
    t.close()  # said already: not raised again
    assert w.written == [0] and w.closed


def test_a_failure_not_yet_heard_is_raised_when_the_file_is_closed():
    w = SlowWriter(fail_at=0)
    w.gate.set()
    t = WriterThread(w)
    t.append(0)
    with pytest.raises(StallscopeError, match="disk full"):
        t.close()
    assert w.closed
