"""An error stallscope did not expect (a bug): one line on stderr, the traceback kept in a file.

Every error a user can act on is a StallscopeError with its one line; anything else is a fault of
stallscope's own. A traceback over a terminal (or over the live view's screen, which Textual prints after
it) is no use to a user and loses what a developer needs once the terminal scrolls: it is written, with the
version, the command line and the kernel, to a file of its own, whose path the line gives. With
STALLSCOPE_DEBUG=1 the traceback is printed as well.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import traceback

from stallscope.analyzer.untrusted import escaped

EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): an internal software error
DEBUG_ENV = "STALLSCOPE_DEBUG"


def report(exc: BaseException, argv: list[str] | None = None) -> str:
    """The one line to print for `exc`; its traceback is saved (a new file, mode 0600) or, when no file can
    be made, printed to stderr, so that it is never lost."""
    what = escaped(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    text = _details(exc, sys.argv[1:] if argv is None else argv)
    if os.environ.get(DEBUG_ENV):
        print(text, file=sys.stderr, end="")
    try:
        fd, path = tempfile.mkstemp(prefix="stallscope-crash-", suffix=".txt")  # O_EXCL, mode 0600
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
    except OSError as err:
        if not os.environ.get(DEBUG_ENV):
            print(text, file=sys.stderr, end="")
        return (f"stallscope: internal error: {what} (a bug in stallscope; its traceback is above, as no file "
                f"could be written: {escaped(err.strerror or str(err))})")
    return (f"stallscope: internal error: {what} (a bug in stallscope: its traceback is in {escaped(path)}; "
            "please attach that file to a bug report)")


def _details(exc: BaseException, argv: list[str]) -> str:
    from stallscope import __version__

    return (f"stallscope {__version__}, Python {platform.python_version()}, kernel {platform.release()}\n"
            f"command: stallscope {' '.join(argv)}\n\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
