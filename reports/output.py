"""Where a report is written: the one function every page goes out through."""

from __future__ import annotations

import os

from stallscope.errors import StallscopeError


def write_page(path: str, text: str) -> None:
    """`text` to `path`, whole or not at all: written beside it under a temporary name, then renamed
    over it, so that a reader never sees half a page."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StallscopeError(f"cannot write {path}: {exc.strerror}", "check the path and free space") from None
