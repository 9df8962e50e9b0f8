"""SIGTERM and SIGHUP (a closed terminal) while the live screen runs: the probes are detached whatever the
screen does.

The signal asks the screen to quit as `q` does. A screen can fail to close, though: when its terminal is
gone, Textual's output thread can die on the dead terminal while the screen's shutdown waits for it to
drain a full queue, and the process would stay, its probes attached, tracing for no one. So a thread of
its own, woken by the signal through a pipe (a write is all the handler does besides asking the screen),
stops the collection itself (the last interval drained, the recording closed, the probes detached) and,
should the process still be there a few seconds later, ends it with the signal's status (128 + its
number) and one line on stderr.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
JOIN_S = 15.0  # the collection's last drain, its recording closed and its probes detached (as cmd_top waits)
GRACE_S = 5.0  # then the screen's own shutdown, normally well within a second


class Leaving:
    """Installed while a screen runs over `source` (anything with stop() and join(timeout)); `ask_exit` asks
    the screen to quit and must be safe to call from a signal handler (loop.call_soon_threadsafe)."""

    def __init__(self, source, ask_exit: Callable[[], None], join_s: float = JOIN_S, grace_s: float = GRACE_S):
        self.source = source
        self.ask_exit = ask_exit
        self.join_s, self.grace_s = join_s, grace_s
        self.signum: int | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old: dict[int, object] = {}

    def install(self) -> None:
        """Handle the leave signals not ignored (a caller's `nohup` keeps SIGHUP ignored); main thread only."""
        for sig in LEAVE_SIGNALS:
            if signal.getsignal(sig) != signal.SIG_IGN:
                self._old[sig] = signal.signal(sig, self._on_signal)
        threading.Thread(target=self._watch, name="stallscope-leaving", daemon=True).start()

    def uninstall(self) -> None:
        """The screen has closed: the handlers put back, and the thread, unless a signal woke it, ended."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        if self._write >= 0:
            os.close(self._write)  # the thread reads what a signal wrote, else the end of the pipe
            self._write = -1

    def _on_signal(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            try:
                os.write(self._write, b"!")
            except OSError:
                pass
        try:
            self.ask_exit()
        except RuntimeError:  # the screen's loop already closed: it is leaving anyway
            pass

    def _watch(self) -> None:
        try:
            woken = os.read(self._read, 1)
        except OSError:
            woken = b""
        os.close(self._read)
        if not woken:
            return
        self.source.stop()
        stopped = self.source.join(self.join_s)
        time.sleep(self.grace_s)
        # still here: the screen did not close (its terminal gone); the collection is over, so end
        name = signal.Signals(self.signum).name if self.signum else "a signal"
        done = ("the probes were detached and the recording closed" if stopped is not False else
                f"the collection did not stop within {self.join_s:g} s either: the probes go with the process, and "
                "a recording keeps what was written")
        try:  # a raw write: the screen's thread may hold the stream's lock where it is stuck
            os.write(2, f"stallscope: the screen did not close within {self.grace_s:g} s of {name}; {done}; "
                        "exiting\n".encode())
        except OSError:
            pass
        os._exit(128 + (self.signum or signal.SIGTERM))
