"""A reading command leaves without taking its work apart.

A report of a 10-minute recording builds a model of millions of objects; freeing them one by one when the
command's functions return, then at the interpreter's exit, took 0.6-1.3 s of a 10-12 s `report`, for
nothing: the process ends. The command line (`run`) marks what is read as kept until the process ends
(`keep`, a no-op anywhere else: a view, a test or a library caller frees as usual), then, once the output
is flushed, leaves with os._exit. Only the reading commands do (cli.READERS): they hold no resource that
needs closing at exit (a recording is read-only; output files are written and closed before).
"""

from __future__ import annotations

import os
import sys

_kept: list | None = None  # what is kept until the process ends; None: not leaving early


def keep_until_exit() -> None:
    """From now on, `keep` holds what it is given until the process leaves (`leave`)."""
    global _kept
    if _kept is None:
        _kept = []


def keep(obj) -> None:
    """`obj` is not freed before the process leaves, when it is to leave early; else nothing."""
    if _kept is not None:
        _kept.append(obj)


def leave(code: int) -> None:
    """Flushes the standard streams and ends the process with `code`, freeing nothing. A stream that
    cannot be flushed (its reader gone) is not an error here: the command said what it had to."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def leaving_early() -> bool:
    return _kept is not None
