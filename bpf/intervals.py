"""User space's interval numbers, by which the BPF side keeps each interval's extremes (bpf/interval.h).

An object's `.data.epoch` section holds its numbers (one, or the scheduler's two: struct max_epoch),
each starting at 1 in the object itself; a drain moves one on just before it reads what that number
covers, and takes from each pair only the interval that just ended.
"""

from __future__ import annotations

import struct


class IntervalNumbers:
    def __init__(self, count: int = 1):
        self._next = [1] * count

    def advance(self, obj, which: int = 0) -> int:
        """Number the next interval (written to `obj`'s .data.epoch; None: maps not made, as when a drain
        is replayed on faked maps) and return the number of the one ending."""
        ending = self._next[which]
        self._next[which] = ending + 1
        if obj is not None:
            obj.section_map(".data.epoch").update(b"\0\0\0\0", struct.pack(f"<{len(self._next)}I", *self._next))
        return ending
