"""A long command's status line: what it is doing now, on stderr, only where stderr is a terminal.

A report or a diff of long recordings takes seconds to tens of seconds (benchmarks/RESULTS-report.md); a
person at a terminal sees which step it is at and how long it has taken, on one line rewritten in place and
cleared when the command is done or fails. Piped or redirected, stderr gets nothing: the messages a script
reads stay as they were. File names pass through `escaped` (no escape sequence reaches the terminal).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from stallscope.analyzer.untrusted import escaped


class Progress:
    """`say(text)` shows a step; `close()` clears the line. A context manager: cleared however the block ends."""

    def __init__(self, stream: TextIO | None = None, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.shown = False
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):  # no such method, or closed
            self.tty = False

    def say(self, text: str) -> None:
        if not self.tty:
            return
        self._write(f"\rstallscope: {escaped(text)} ({self.clock() - self.start:.1f} s)\x1b[K")
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self._write("\r\x1b[K")
            self.shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the status line is only a courtesy
            self.tty = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
