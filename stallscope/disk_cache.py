"""What a session works out from files that rarely change, kept between runs (a C library's lock call sites:
objdump, readelf and ELF reads, 0.3 s of a live view's start).

One JSON file per kind of result in `/var/cache/stallscope` (`STALLSCOPE_CACHE_DIR` names another directory; an
empty value turns the cache off). Each entry is keyed by its caller from the file it was worked out from (path and
identity), so that a changed file is worked out again. The cache only saves time: a file that cannot be read or
written, a damaged one, or one that another user could have written (not owned by this user, or writable by its
group or others, or in such a directory) is ignored, and the result worked out as if there were none.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile

DEFAULT_DIR = "/var/cache/stallscope"
MAX_ENTRIES = 64  # per kind: a machine's few C libraries, kept when one is updated


def directory() -> str | None:
    value = os.environ.get("STALLSCOPE_CACHE_DIR")
    if value is None:
        return DEFAULT_DIR
    return value or None


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read(kind: str) -> dict:
    """The entries kept for `kind` ({} when there are none, or none to trust)."""
    where = directory()
    if where is None:
        return {}
    path = os.path.join(where, f"{kind}.json")
    try:
        if not _trusted(os.stat(where)):
            return {}
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as f:
            if not _trusted(os.fstat(f.fileno())):
                return {}
            data = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def write(kind: str, key: str, value) -> None:
    """`value` (JSON) kept for `kind` under `key`, with the entries kept before (the oldest go past MAX_ENTRIES).
    Written to a new file renamed over the old: a reader never sees half of it. Never raises."""
    where = directory()
    if where is None:
        return
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        if not _trusted(os.stat(where)):
            return
        entries = read(kind)
        entries.pop(key, None)
        entries[key] = value
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}.", dir=where)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f)
            os.replace(tmp, os.path.join(where, f"{kind}.json"))
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError):
        pass
