"""The machine's block devices, from sysfs: which are request-based (blk-mq: the block request
tracepoints see their requests) and which bio-based (dm, md, zram, brd: no requests, so those
tracepoints never fire for them; the io group counts their bios), and each queue's settings,
which the I/O advice weighs requests against (max_sectors_kb, optimal_io_size, nr_requests, ...).
"""

from __future__ import annotations

import os

from stallscope.machine import read_value

SYS_BLOCK = "/sys/block"
QUEUE_FIELDS = ("rotational", "nr_requests", "max_sectors_kb", "max_hw_sectors_kb", "optimal_io_size",
                "minimum_io_size", "logical_block_size", "physical_block_size", "scheduler", "wbt_lat_usec",
                "write_cache", "iostats")


def _value(field: str, text: str) -> int | str:
    if field == "scheduler":  # "none [mq-deadline] kyber": the one in brackets is in use
        if "[" in text:
            return text[text.index("[") + 1:text.index("]")]
        return text or "none"
    try:
        return int(text)
    except ValueError:
        return text


def kernel_dev(major: int, minor: int) -> int:
    """dev_t as the kernel encodes it inside (MAJOR << 20 | MINOR), which the probe keys devices by."""
    return (major << 20) | minor


def describe(root: str = SYS_BLOCK) -> dict[str, dict]:
    """Each block device by name: its dev_t (`dev`, kernel encoding, and `major`, `minor`), whether it is
    request-based (`requests`: it has a blk-mq `mq` directory), its hardware queues, and its queue
    settings when readable."""
    out: dict[str, dict] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        base = os.path.join(root, name)
        numbers = read_value(os.path.join(base, "dev"))
        if not numbers or ":" not in numbers:
            continue
        try:
            major, minor = (int(x) for x in numbers.split(":"))
        except ValueError:
            continue
        mq = os.path.join(base, "mq")
        requests = os.path.isdir(mq)
        entry: dict = {"dev": kernel_dev(major, minor), "major": major, "minor": minor, "requests": requests}
        if requests:
            try:
                entry["hw_queues"] = len(os.listdir(mq))
            except OSError:
                pass
        queue = {}
        for field in QUEUE_FIELDS:
            text = read_value(os.path.join(base, "queue", field))
            if text is not None:
                queue[field] = _value(field, text)
        entry["queue"] = queue
        out[name] = entry
    return out


def bio_based(devices: dict[str, dict]) -> list[str]:
    """The devices whose I/O the request tracepoints cannot see."""
    return [name for name, d in sorted(devices.items()) if not d.get("requests")]
