"""What stallscope works out from files that rarely change, kept between runs: a C library's lock call sites
(objdump, readelf and ELF reads, 0.3 s of a live view's start), the report's templates compiled (0.12-0.16 s of
each report).

One JSON file per kind of result in `/var/cache/stallscope`, or a file kept whole (read_bytes)
(`STALLSCOPE_CACHE_DIR` names another directory; an empty value turns the cache off). Each entry is keyed by its
caller from the file it was worked out from (path and identity, or a template's checksum), so that a changed file
is worked out again. The cache only saves time: a file that cannot be read or
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
MAX_FILE_BYTES = 8 << 20  # a file kept whole (read_bytes): the report's compiled templates take 0.3 MB


def directory() -> str | None:
    value = os.environ.get("STALLSCOPE_CACHE_DIR")
    if value is None:
        return DEFAULT_DIR
    return value or None


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read(kind: str) -> dict:
    """The entries kept for `kind` ({} when there are none, or none to trust)."""
    raw = _read_trusted(f"{kind}.json", 1 << 20)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def write(kind: str, key: str, value) -> None:
    """`value` (JSON) kept for `kind` under `key`, with the entries kept before (the oldest go past MAX_ENTRIES).
    Written to a new file renamed over the old: a reader never sees half of it. Never raises."""
    try:
        entries = read(kind)
        entries.pop(key, None)
        entries[key] = value
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        data = json.dumps(entries).encode()
    except (TypeError, ValueError):
        return
    _write_trusted(f"{kind}.json", data)


def read_bytes(name: str) -> bytes | None:
    """The file `name` kept whole (compiled code, which only a file this user alone could have written may give),
    or None."""
    return _read_trusted(name, MAX_FILE_BYTES)


def write_bytes(name: str, data: bytes) -> None:
    """`data` kept as the file `name`, replacing it whole. Never raises."""
    if len(data) <= MAX_FILE_BYTES:
        _write_trusted(name, data)


def _read_trusted(name: str, limit: int) -> bytes | None:
    where = directory()
    if where is None:
        return None
    try:
        if not _trusted(os.stat(where)):
            return None
        fd = os.open(os.path.join(where, name), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _trusted(os.fstat(f.fileno())):
                return None
            return f.read(limit)
    except OSError:
        return None


def _write_trusted(name: str, data: bytes) -> None:
    """`data` as the file `name` in the cache directory: written to a new file (0600) renamed over the old."""
    where = directory()
    if where is None:
        return
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        if not _trusted(os.stat(where)):
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=where)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(where, name))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
