"""The recording file: one SQLite database (WAL), readable by any SQLite tool.

Tables: `meta` (format version and the recording's metadata as JSON),
`intervals`, `tasks`, and one table per aggregate, each row a delta of one
interval; `stacks` holds symbolised frames (with build-ids and ELF offsets for
user code) so a recording reads the same on another machine. Each interval is
committed on its own: a killed recorder loses at most the interval in flight.

Format versions: a file of an older version opens in this one; a newer or
damaged file raises StallscopeError, never a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
import urllib.parse
from array import array
from collections import Counter
from dataclasses import asdict
from functools import partial
from operator import attrgetter, itemgetter
from typing import Container, Iterator

from stallscope.analyzer.sample import (
    LOCK_VALUES, CpuSamplesDelta, FutexDelta, Interval, IoDelta, IoQueueDelta, IoSubmitDelta, IoWakeDelta, LockDelta,
    OffcpuDelta, OncpuDelta, OngoingWait, ProbeStatus, ProgramCost, RecordingMeta, SlabCache, SlabDelta, Stack, TaskDelta, TaskId,
    TaskInfo, Throttled, Tuning, TuningChange, WaitLink, WaitSince, WakerDelta, record_maker, u64,
)
from stallscope.analyzer.recording_checks import (
    COLUMNS, RANGES, DamagedRow, check_meta, frames_cell, health_cell, hist_cell, nodes_cell, aliases_cell, row_ok_sql,
    sysfs_cell, woken_cell,
)
from stallscope.analyzer import rowread
from stallscope.analyzer.rowfold import LockRows, RowFoldError, fold_lock_rows
from stallscope.analyzer import wakefold
from stallscope.errors import StallscopeError
from stallscope.outputs import RecordingFile, create_recording, size_limit, storage_hint, storage_limit

# 2 (2026-11-26): the waits carried on through an interval (Interval.ongoing) have a table of their own,
# `ongoing`, each charged the interval's `ongoing_ns`, where version 1 stored them as the charge-only off-CPU
# and task rows they stand for (which a reader of version 1 alone would take, missing the new table)
FORMAT_VERSION = 2
# what reading a damaged file raises: SQLite's errors, and text that is not UTF-8 (a scribbled schema)
_READ_ERRORS = (sqlite3.Error, UnicodeDecodeError)
APPLICATION_ID = 0x53544C4C  # "STLL": lets `file` and we tell our databases from others
# the log is folded into the file at most this often (each fold costs two fsyncs); intervals of a
# second or more are each folded as they are written
FOLD_PERIOD_S = 1.0
# room kept allocated past the end of a recording for its next fold, at least (then twice the most a
# fold has needed)
_RESERVE_MIN = 64 << 10
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14
_SQLITE_READONLY = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intervals (
    idx INTEGER PRIMARY KEY, start_ns INTEGER, end_ns INTEGER, wall_start REAL,
    switches INTEGER, collector_cpu_ns INTEGER, health TEXT, kernel_switches INTEGER, ongoing_ns INTEGER);
CREATE TABLE IF NOT EXISTS ongoing (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, state INTEGER, kstack INTEGER, ustack INTEGER,
    why INTEGER, func INTEGER, since_ns INTEGER);
CREATE TABLE IF NOT EXISTS opened (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, state INTEGER, kstack INTEGER, ustack INTEGER,
    why INTEGER, func INTEGER, since_ns INTEGER);
CREATE TABLE IF NOT EXISTS tasks (
    pid INTEGER, start_ns INTEGER, tgid INTEGER, ptgid INTEGER, comm TEXT, flags INTEGER,
    first_idx INTEGER, policy INTEGER, nice INTEGER, rt_priority INTEGER, PRIMARY KEY (pid, start_ns));
CREATE TABLE IF NOT EXISTS task_deltas (
    idx INTEGER, pid INTEGER, start_ns INTEGER, offcpu_ns INTEGER, offcpu_count INTEGER,
    offcpu_max_ns INTEGER, runq_wait_ns INTEGER, runq_count INTEGER, runq_max_ns INTEGER,
    voluntary_switches INTEGER, involuntary_switches INTEGER, migrations INTEGER, runq_hist TEXT,
    runq_latency_ns INTEGER, run_ns INTEGER);
CREATE TABLE IF NOT EXISTS offcpu (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, state INTEGER, kstack INTEGER,
    ustack INTEGER, count INTEGER, total_ns INTEGER, max_ns INTEGER, hist TEXT, why INTEGER, func INTEGER,
    charged_ns INTEGER, weighted_ns INTEGER, var_us2 INTEGER, woken TEXT);
CREATE TABLE IF NOT EXISTS wakers (
    idx INTEGER, pid INTEGER, start_ns INTEGER, waker_pid INTEGER, waker_start_ns INTEGER,
    waker_tgid INTEGER, waker_comm TEXT, waker_kstack INTEGER, count INTEGER, total_ns INTEGER,
    in_interrupt INTEGER, exiting INTEGER, link_func INTEGER, link_state INTEGER,
    link_why INTEGER, weighted_ns INTEGER, link_blocked_ns INTEGER, link_runq_ns INTEGER, wakee_func INTEGER,
    wakee_state INTEGER, wakee_why INTEGER);
CREATE TABLE IF NOT EXISTS functions (addr INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE IF NOT EXISTS migrations (idx INTEGER, src INTEGER, dst INTEGER, count INTEGER);
CREATE TABLE IF NOT EXISTS stacks (id INTEGER PRIMARY KEY, kind TEXT, truncated INTEGER, frames TEXT);
CREATE TABLE IF NOT EXISTS locks (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, addr INTEGER, kstack INTEGER, flags INTEGER,
    kind INTEGER, count INTEGER, total_ns INTEGER, max_ns INTEGER, min_ns INTEGER, spin_ns INTEGER,
    sleep_ns INTEGER, owner_pid INTEGER, owner_comm TEXT, cache TEXT, symbol TEXT, blocked_ns INTEGER,
    runnable_ns INTEGER, weighted_ns INTEGER, var_us2 INTEGER, field TEXT, object TEXT);
CREATE TABLE IF NOT EXISTS slab (
    idx INTEGER, cache INTEGER, tgid INTEGER, exiting INTEGER, kmallocs INTEGER, cache_allocs INTEGER, kfrees INTEGER,
    cache_frees INTEGER, bytes_req INTEGER, bytes_alloc INTEGER, failed INTEGER, slab_switches INTEGER,
    switch_allocs INTEGER);
CREATE TABLE IF NOT EXISTS slab_caches (
    idx INTEGER, addr INTEGER, name TEXT, object_size INTEGER, size INTEGER, slab_order INTEGER,
    objs_per_slab INTEGER, min_order INTEGER, sheaf_capacity INTEGER, cpu_partial INTEGER, nodes TEXT,
    aliases TEXT, sysfs TEXT);
CREATE TABLE IF NOT EXISTS oncpu (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, comm TEXT, kstack INTEGER, ustack INTEGER,
    samples INTEGER, period_ns INTEGER);
CREATE TABLE IF NOT EXISTS oncpu_cpus (
    idx INTEGER, cpu INTEGER, samples INTEGER, period_ns INTEGER, idle_samples INTEGER, idle_ns INTEGER,
    event_ns INTEGER);
CREATE TABLE IF NOT EXISTS cgroups (idx INTEGER, tgid INTEGER, start_ns INTEGER, path TEXT);
CREATE TABLE IF NOT EXISTS throttled (
    idx INTEGER, cgroup TEXT, periods INTEGER, throttled_ns INTEGER, quota_us INTEGER, period_us INTEGER);
CREATE TABLE IF NOT EXISTS cpu_time (idx INTEGER, cpu INTEGER, busy_ns INTEGER, total_ns INTEGER);
CREATE TABLE IF NOT EXISTS cpu_runq (idx INTEGER, cpu INTEGER, runq_ns INTEGER, runq_count INTEGER);
CREATE TABLE IF NOT EXISTS futex (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, uaddr INTEGER, op INTEGER, ustack INTEGER,
    caller_addr INTEGER, caller TEXT, lock_name TEXT, count INTEGER, total_ns INTEGER, max_ns INTEGER,
    min_ns INTEGER, flags INTEGER, blocked_ns INTEGER, runnable_ns INTEGER, woken_irq INTEGER);
CREATE TABLE IF NOT EXISTS tuning (
    idx INTEGER, level INTEGER, walks_per_s INTEGER, min_stack_ns INTEGER, sample_hz INTEGER, reason TEXT,
    sample_ns INTEGER, user_walks_per_s INTEGER, lock_calls INTEGER);
CREATE TABLE IF NOT EXISTS programs (
    idx INTEGER, name TEXT, run_cnt INTEGER, run_time_ns INTEGER, recursion_misses INTEGER);
CREATE TABLE IF NOT EXISTS io (
    idx INTEGER, dev INTEGER, op INTEGER, requests INTEGER, sectors INTEGER, total_ns INTEGER, timed INTEGER,
    queued_ns INTEGER, device_ns INTEGER, bytes INTEGER, unaccounted INTEGER, size_hist TEXT, total_hist TEXT,
    queued_hist TEXT, device_hist TEXT);
CREATE TABLE IF NOT EXISTS io_queue (
    idx INTEGER, dev INTEGER, name TEXT, issued INTEGER, busy_ns INTEGER, depth_sum INTEGER, depth_hist TEXT,
    inflight INTEGER);
CREATE TABLE IF NOT EXISTS io_submitters (
    idx INTEGER, dev INTEGER, op INTEGER, tgid INTEGER, comm TEXT, requests INTEGER, sectors INTEGER);
CREATE TABLE IF NOT EXISTS io_wakes (
    idx INTEGER, pid INTEGER, start_ns INTEGER, tgid INTEGER, dev INTEGER, op INTEGER, submit_tgid INTEGER,
    submit_comm TEXT, wakee_func INTEGER, wakee_state INTEGER, wakee_why INTEGER, count INTEGER, wait_ns INTEGER,
    req_ns INTEGER, timed INTEGER, queued_ns INTEGER, device_ns INTEGER);
CREATE INDEX IF NOT EXISTS task_deltas_idx ON task_deltas (idx);
CREATE INDEX IF NOT EXISTS offcpu_idx ON offcpu (idx);
CREATE INDEX IF NOT EXISTS wakers_idx ON wakers (idx);
"""
# Every per-interval table is read by interval window (Recording.intervals): without an index a
# window of one interval scanned and sorted the whole table, so stepping through an hour cost
# the square of its length (11 ms a step at 3,600 intervals, growing with the file; 2.8 ms with).
_SCHEMA += "".join(f"CREATE INDEX IF NOT EXISTS {t}_idx ON {t} (idx);\n" for t in (
    "locks", "futex", "oncpu", "oncpu_cpus", "slab", "slab_caches", "migrations", "programs", "tuning", "cgroups",
    "throttled", "cpu_time", "cpu_runq", "io", "io_queue", "io_submitters", "io_wakes", "ongoing", "opened"))

# the lock columns added after recordings were first made, read as their defaults in older ones
_LOCK_DEFAULTS = {"symbol": ("symbol", "''"), "blocked_ns": ("blocked_ns", "NULL"), "runnable_ns": ("runnable_ns", "NULL"),
                  "weighted_ns": ("weighted_ns", "0"), "var_us2": ("var_us2", "0"), "field": ("field", "''"),
                  "object": ("object", "''")}

# what a lock fold reads of a row (Recording.lock_rows, lock_statement): its interval, then LOCK_VALUES
_LOCK_FOLD_COLUMNS = ("idx",) + tuple(_LOCK_DEFAULTS.get(c, c) for c in LOCK_VALUES)
_FRAME_FIELDS = ("addr", "symbol", "offset", "module", "build_id", "module_offset", "kind")
_FRAME_ROW = attrgetter(*_FRAME_FIELDS)  # a frame's stored row, in one C call


def _s64(v: int) -> int:
    """Stack ids are unsigned 64-bit hashes; SQLite integers are signed."""
    return v - (1 << 64) if v >= (1 << 63) else v


_u64 = u64


def _write_failure(path: str, exc: sqlite3.Error) -> str:
    """What stopped a write, in words: SQLite says "database or disk is full" or "disk I/O error"
    and hides the errno, so the file size limit and the free space are looked at."""
    code = getattr(exc, "sqlite_errorcode", None)
    why = storage_limit(path, margin=_RESERVE_MIN if code != _SQLITE_FULL else 1 << 62)
    return why or f"cannot write {path}: {exc}"


def _hist_text(hist: tuple[tuple[int, int], ...]) -> str | None:
    """A log2 histogram's (slot, count) pairs as the JSON array json.dumps would write, without its
    per-call set-up: one row in two carries one, thousands a second on a busy machine."""
    if not hist:
        return None
    return "[" + ",".join(f"[{s},{n}]" for s, n in hist) + "]"


class RecordingWriter:
    """Appends intervals to a new recording file.

    The file is new (stallscope/outputs.py creates it, 0600, never over anything) and holds its
    schema and metadata before any interval: they are written in one rollback-journal transaction,
    then the file goes to WAL mode for the recording, so every file that exists opens. Each interval is
    one transaction; about once a second the log is folded into the file (a checkpoint), and room for
    the next fold is kept allocated past the file's end, so that a full disk stops the recording with
    every interval written in the file itself. A recording killed mid-way opens whole with its -wal;
    copied without it, it holds what the last fold wrote, unless the kill came during a fold, which
    SQLite writes into the file in place (then it reads as damaged, with the way to recover it). close() folds
    the rest and leaves WAL mode: a cleanly closed recording is one file, readable read-only, copied
    alone, or by another user.
    """

    def __init__(self, path: str, meta: RecordingMeta, target: RecordingFile | None = None):
        self.path = path
        self.target = target if target is not None else create_recording(path)
        self.intervals = 0
        self._stacks: set[int] = set()
        self._tasks: set[TaskId] = set()
        self._reserve = _RESERVE_MIN
        self._folded_at = time.monotonic()
        self.db = None
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._create(meta)
        except (sqlite3.Error, StallscopeError) as exc:
            if self.db is not None:
                self.db.close()
            self.target.discard()
            if isinstance(exc, StallscopeError):
                raise
            why = _write_failure(path, exc)
            raise StallscopeError(f"{why}: nothing recorded in {path}", storage_hint(why)) from None

    def _create(self, meta: RecordingMeta) -> None:
        db = self.db
        db.execute("PRAGMA busy_timeout=1000")  # close() waits that long for a reader to let go
        db.execute("PRAGMA schema_version").fetchone()  # SQLite opens the file on first use...
        self.target.verify()  # ... the one created for it, not one swapped in since: checked before writing
        db.execute("BEGIN")
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
        self._insert_meta(meta)
        db.execute("COMMIT")
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            raise StallscopeError(f"{self.path}: SQLite cannot keep a write-ahead log there",
                                  "record to a local file system")
        db.execute("PRAGMA synchronous=NORMAL")
        self._page_size, = db.execute("PRAGMA page_size").fetchone()
        self._keep_room()

    def _insert_meta(self, meta: RecordingMeta) -> None:
        doc = asdict(meta)
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('meta', ?)", (json.dumps(doc, sort_keys=True),))

    def _stopped(self, exc: sqlite3.Error | StallscopeError) -> StallscopeError:
        """A write failed: the recording stops here; say why and what the file holds."""
        why = exc.message if isinstance(exc, StallscopeError) else _write_failure(self.path, exc)
        held = (f"recording stopped after {self.intervals} intervals, which {self.path} holds" if self.intervals else
                f"recording stopped before its first interval: {self.path} holds only its metadata")
        return StallscopeError(f"{why}: {held}", storage_hint(why))

    def update_meta(self, meta: RecordingMeta) -> None:
        try:
            self._transaction(lambda: self._insert_meta(meta))
        except sqlite3.Error as exc:
            raise self._stopped(exc) from None

    def append(self, iv: Interval) -> None:
        """One interval, committed; a write that fails raises StallscopeError (nothing of the interval
        is kept) and the recording should stop: what was appended before stays readable."""
        try:
            self._append(iv)
        except sqlite3.Error as exc:
            raise self._stopped(exc) from None
        self.intervals += 1
        if time.monotonic() - self._folded_at >= FOLD_PERIOD_S or self._unfolded() >= self._reserve // 2:
            try:
                self._fold()
            except (sqlite3.Error, StallscopeError) as exc:
                raise self._stopped(exc) from None

    def _transaction(self, body) -> None:
        self.db.execute("BEGIN")
        try:
            body()
            self.db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """SQLite has already rolled back a transaction that met a full disk: a second ROLLBACK
        would fail ("no transaction is active") and hide why."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _unfolded(self) -> int:
        """Bytes the next fold will add to the file: the database's size, log included, past the file's."""
        pages, = self.db.execute("PRAGMA page_count").fetchone()
        return pages * self._page_size - self.target.size()

    def _fold(self) -> None:
        """Copy the log into the file, then keep room past its end for the next fold: twice the
        most a fold has grown it."""
        before = self.target.size()
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self._reserve = max(self._reserve, 2 * (self.target.size() - before))
        self._folded_at = time.monotonic()
        self._keep_room()

    def _keep_room(self) -> None:
        limit = size_limit()
        if limit is not None and self.target.size() + self._reserve > limit:
            raise StallscopeError(storage_limit(self.path, errno.EFBIG))
        if not self.target.reserve(self._reserve):
            raise StallscopeError(storage_limit(self.path, errno.ENOSPC))

    def _append(self, iv: Interval) -> None:
        db = self.db
        db.execute("BEGIN")
        try:
            i = iv.index
            db.execute("INSERT INTO intervals VALUES (?,?,?,?,?,?,?,?,?)",
                       (i, iv.start_ns, iv.end_ns, iv.wall_start, iv.switches, iv.collector_cpu_ns,
                        json.dumps(iv.health, sort_keys=True), iv.kernel_switches, iv.ongoing_ns))
            for t in iv.task_info:
                db.execute(
                    "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (pid, start_ns) DO UPDATE SET "
                    "comm=excluded.comm, flags=excluded.flags, tgid=excluded.tgid, policy=excluded.policy, "
                    "nice=excluded.nice, rt_priority=excluded.rt_priority",
                    (t.task.pid, t.task.start_time_ns, t.tgid, t.ptgid, t.comm, t.flags, i, t.policy, t.nice,
                     t.rt_priority))
            db.executemany("INSERT INTO task_deltas VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, d.task.pid, d.task.start_time_ns, d.offcpu_ns, d.offcpu_count, d.offcpu_max_ns,
                 d.runq_wait_ns, d.runq_count, d.runq_max_ns, d.voluntary_switches, d.involuntary_switches,
                 d.migrations, _hist_text(d.runq_hist), d.runq_latency_ns, d.run_ns)
                for d in iv.tasks])
            db.executemany("INSERT INTO offcpu VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, o.task.pid, o.task.start_time_ns, o.tgid, o.state, _s64(o.kstack), _s64(o.ustack), o.count,
                 o.total_ns, o.max_ns, _hist_text(o.hist), o.why, _s64(o.func), o.charged_ns, o.weighted_ns,
                 o.var_us2, None if not any(o.woken) else "%d,%d,%d" % o.woken) for o in iv.offcpu])
            since = iv.ongoing_since if iv.beginnings_kept else (None,) * len(iv.ongoing)
            db.executemany("INSERT INTO ongoing VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (i, w.task.pid, w.task.start_time_ns, w.tgid, w.state, _s64(w.kstack), _s64(w.ustack), w.why,
                 _s64(w.func), at) for w, at in zip(iv.ongoing, since)])
            db.executemany("INSERT INTO opened VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (i, w.task.pid, w.task.start_time_ns, w.tgid, w.state, _s64(w.kstack), _s64(w.ustack), w.why,
                 _s64(w.func), at) for w, at in iv.opened or ()])
            db.executemany("INSERT INTO wakers VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, w.task.pid, w.task.start_time_ns, w.waker.pid, w.waker.start_time_ns, w.waker_tgid,
                 w.waker_comm, _s64(w.waker_kstack), w.count, w.total_ns, int(w.in_interrupt), int(w.exiting),
                 _s64(w.link.func), w.link.state, w.link.why, w.weighted_ns, w.link_blocked_ns,
                 w.link_runq_ns, _s64(w.wakee.func), w.wakee.state, w.wakee.why)
                for w in iv.wakers])
            db.executemany("INSERT OR IGNORE INTO functions VALUES (?,?)",
                           [(_s64(addr), name) for addr, name in iv.functions])
            db.executemany("INSERT INTO migrations VALUES (?,?,?,?)", [(i, *m) for m in iv.migrations])
            db.executemany("INSERT INTO locks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, lk.task.pid, lk.task.start_time_ns, lk.tgid, _s64(lk.addr), _s64(lk.kstack), lk.flags, lk.kind,
                 lk.count, lk.total_ns, lk.max_ns, lk.min_ns, lk.spin_ns, lk.sleep_ns, lk.owner_pid, lk.owner_comm,
                 lk.cache, lk.symbol, lk.blocked_ns, lk.runnable_ns, lk.weighted_ns, lk.var_us2, lk.field or None,
                 lk.object or None) for lk in iv.locks])
            db.executemany("INSERT INTO slab VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, _s64(d.cache), d.tgid, int(d.exiting), d.kmallocs, d.cache_allocs, d.kfrees, d.cache_frees, d.bytes_req,
                 d.bytes_alloc, d.failed, d.slab_switches, d.switch_allocs) for d in iv.slab])
            db.executemany("INSERT INTO slab_caches VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, _s64(c.addr), c.name, c.object_size, c.size, c.order, c.objs_per_slab, c.min_order,
                 c.sheaf_capacity, c.cpu_partial, json.dumps([str(n) for n in c.nodes]), json.dumps(list(c.aliases)),
                 json.dumps(dict(c.sysfs))) for c in iv.slab_caches])
            db.executemany("INSERT INTO oncpu VALUES (?,?,?,?,?,?,?,?,?)", [
                (i, o.task.pid, o.task.start_time_ns, o.tgid, o.comm, _s64(o.kstack), _s64(o.ustack), o.samples,
                 o.period_ns) for o in iv.oncpu])
            db.executemany("INSERT INTO oncpu_cpus VALUES (?,?,?,?,?,?,?)", [
                (i, c.cpu, c.samples, c.period_ns, c.idle_samples, c.idle_ns, c.event_ns) for c in iv.oncpu_cpus])
            db.executemany("INSERT INTO cgroups VALUES (?,?,?,?)", [(i, *c) for c in iv.cgroups])
            db.executemany("INSERT INTO throttled VALUES (?,?,?,?,?,?)", [(i, *t) for t in iv.throttled])
            db.executemany("INSERT INTO cpu_time VALUES (?,?,?,?)", [(i, *c) for c in iv.cpu_time])
            db.executemany("INSERT INTO cpu_runq VALUES (?,?,?,?)", [(i, *c) for c in iv.cpu_runq])
            db.executemany("INSERT INTO futex VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, fx.task.pid, fx.task.start_time_ns, fx.tgid, _s64(fx.uaddr), fx.op, _s64(fx.ustack),
                 _s64(fx.caller_addr), fx.caller, fx.lock_name, fx.count, fx.total_ns, fx.max_ns, fx.min_ns,
                 fx.flags, fx.blocked_ns, fx.runnable_ns, fx.woken_irq)
                for fx in iv.futex])
            db.executemany("INSERT INTO io VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, d.dev, d.op, d.requests, d.sectors, d.total_ns, d.timed, d.queued_ns, d.device_ns, d.bytes,
                 d.unaccounted, _hist_text(d.size_hist), _hist_text(d.total_hist), _hist_text(d.queued_hist),
                 _hist_text(d.device_hist)) for d in iv.io])
            db.executemany("INSERT INTO io_queue VALUES (?,?,?,?,?,?,?,?)", [
                (i, q.dev, q.name, q.issued, q.busy_ns, q.depth_sum, _hist_text(q.depth_hist), q.inflight)
                for q in iv.io_queue])
            db.executemany("INSERT INTO io_submitters VALUES (?,?,?,?,?,?,?)", [
                (i, d.dev, d.op, d.tgid, d.comm, d.requests, d.sectors) for d in iv.io_submitters])
            db.executemany("INSERT INTO io_wakes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (i, w.task.pid, w.task.start_time_ns, w.tgid, w.dev, w.op, w.submit_tgid, w.submit_comm,
                 _s64(w.wakee.func), w.wakee.state, w.wakee.why, w.count, w.wait_ns, w.req_ns, w.timed, w.queued_ns,
                 w.device_ns) for w in iv.io_wakes])
            db.executemany("INSERT OR IGNORE INTO stacks VALUES (?,?,?,?)", [
                (_s64(s.id), s.kind, int(s.truncated),
                 json.dumps([_FRAME_ROW(f) for f in s.frames]))
                for s in iv.stacks])
            db.executemany("INSERT INTO programs VALUES (?,?,?,?,?)", [
                (i, p.name, p.run_cnt, p.run_time_ns, p.recursion_misses) for p in iv.programs])
            db.executemany("INSERT INTO tuning VALUES (?,?,?,?,?,?,?,?,?)", [
                (i, c.to.level, c.to.walks_per_s, c.to.min_stack_ns, c.to.sample_hz, c.reason, c.to.sample_ns,
                 c.to.user_walks_per_s, int(c.to.lock_calls)) for c in iv.tuning])
            db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def close(self) -> None:
        """Fold the log into the file and leave WAL mode (a cleanly closed recording is one file).
        StallscopeError when it cannot: the file then keeps its -wal, with which it opens."""
        problem = ""
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if self.db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] != "delete":
                problem = "another process has it open"
        except sqlite3.Error as exc:
            problem = _write_failure(self.path, exc)
            if "locked" in str(exc):
                problem = "another process has it open"
        finally:
            self.db.close()
            self.target.release()
            self.target.close()
        if problem and os.path.exists(self.path + "-wal"):
            raise StallscopeError(f"{self.path} is not folded into one file ({problem}): its last intervals are in "
                                  f"{self.path}-wal", "keep the two together: copy it with its -wal file")


class Recording:
    """A recording opened for reading. Nothing in it is trusted (analyzer/recording_checks.py): damaged
    metadata is a StallscopeError naming the field; a damaged row is skipped and counted in `damaged`
    (by table), and the rest is read."""

    def __init__(self, path: str):
        self.path = path
        self.damaged: Counter[str] = Counter()
        if not os.path.exists(path):
            raise StallscopeError(f"{path}: no such recording", "record one with `stallscope record -o FILE`")
        if not os.path.isfile(path):  # a FIFO or a device would block the read below, or never end
            raise StallscopeError(f"{path} is not a recording", "a recording is a regular file")
        try:
            with open(path, "rb") as f:
                head = f.read(100)
        except OSError as exc:
            raise StallscopeError(f"{path}: {exc.strerror}", "check the path and permissions") from None
        if not head:
            raise StallscopeError(f"{path} is empty", "its recorder stopped before the recording began")
        if not head.startswith(b"SQLite format 3\0"):
            raise StallscopeError(f"{path} is not a stallscope recording", "it is not an SQLite database")
        # bytes 18-19 of the header are 2 in WAL mode: a recording not closed cleanly (or made before
        # recordings left WAL mode on close), whose last writes may be in FILE-wal
        self._wal = head[18:20] == b"\2\2"
        self._wal_beside = os.path.exists(path + "-wal")  # before SQLite opens it: it may create one
        try:
            self.db = self._connect("mode=ro")
            self.db.text_factory = _text
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            self.tables = tables
            if "meta" not in tables:
                if self._wal and not self._wal_beside:
                    raise StallscopeError(f"{path} was cut off before it was closed and its contents are in "
                                          f"{path}-wal, which is not beside it", "copy it with its -wal file")
                raise StallscopeError(f"{path} is not a stallscope recording", "it is an SQLite database of something else")
            rows = dict(self.db.execute("SELECT key, value FROM meta"))
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None
        if "format_version" not in rows or "meta" not in rows:
            raise StallscopeError(f"{path} is not a stallscope recording", "it has no stallscope metadata")
        try:
            version = int(rows["format_version"])
        except (ValueError, TypeError):
            raise StallscopeError(f"{path} has a damaged header", "the format version is unreadable") from None
        if version < 1:
            raise StallscopeError(f"{path} has a damaged header (format version {version})",
                                  "stallscope's formats start at 1: the file was altered")
        if version > FORMAT_VERSION:
            raise StallscopeError(
                f"{path} was written by a newer stallscope (format {version}, this one reads up to {FORMAT_VERSION})",
                "upgrade stallscope to read it")
        try:
            doc = json.loads(rows["meta"])
            wrong = check_meta(doc)
            if wrong:
                raise ValueError(wrong)
            self.meta = _meta_from_json(doc)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise StallscopeError(f"{path} has damaged metadata ({exc})", "the recording cannot be read") from None
        self.format_version = version

    def _connect(self, mode: str) -> sqlite3.Connection:
        """Read-only. A file in WAL mode without its -wal (an older recording, closed) is read as it
        stands where SQLite cannot create the -shm index beside it (a read-only place, another user);
        with its -wal present, SQLite needs that index."""
        uri = f"file:{urllib.parse.quote(self.path)}?"
        db = sqlite3.connect(uri + mode, uri=True, check_same_thread=False)
        try:
            db.execute("PRAGMA query_only=1")
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            self.uri = uri + mode  # as it opened: another reader of the file (analyzer/rowfold.py) opens it so
        except sqlite3.OperationalError as exc:
            db.close()
            # no -shm to be had: SQLite cannot create it (CANTOPEN) or not write it (READONLY_CANTINIT)
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (_SQLITE_CANTOPEN, _SQLITE_READONLY) or not self._wal:
                raise
            if self._wal_beside:
                raise StallscopeError(
                    f"{self.path} was not closed cleanly: reading it with {self.path}-wal needs a place where SQLite "
                    f"can create {self.path}-shm", "copy the two together to a directory you can write to") from None
            return self._connect("immutable=1")
        return db

    def _damaged(self, exc: Exception) -> StallscopeError:
        return StallscopeError(f"{self.path} is damaged: {exc}",
                               "a truncated or corrupted file; record again, or recover with `sqlite3 FILE .recover`")

    def _rows(self, sql: str, args=()) -> list[tuple]:
        try:
            return self.db.execute(sql, args).fetchall()
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None

    def _columns(self, table: str) -> set[str]:
        cache = self.__dict__.setdefault("_column_cache", {})
        if table not in cache:
            cache[table] = {r[1] for r in self._rows(f"PRAGMA table_info({table})")}
        return cache[table]

    def _select(self, table: str, columns) -> str:
        """`SELECT columns, ok FROM table`: each column, or its default (`(name, default)`) in a recording
        made before the column was added; `ok` is whether the row holds what the writer writes."""
        ok = row_ok_sql(table, self._columns(table), self.meta.cpus)
        return f"SELECT {self._exprs(table, columns)}, {ok} FROM {table}"

    def _exprs(self, table: str, columns) -> str:
        present = self._columns(table)
        return ", ".join(c if isinstance(c, str) else (c[0] if c[0] in present else c[1]) for c in columns)

    def _checked(self, table: str, rows, make) -> Iterator:
        """`make(row)` of each row that holds what the writer writes (its last column, `ok`, true; `make`
        reads the others by position); the others counted in `damaged`."""
        for row in rows:
            if row[-1]:
                try:
                    yield make(row)
                    continue
                except DamagedRow:
                    pass
            self.damaged[table] += 1

    def stacks(self) -> dict[int, Stack]:
        out = {}
        rows = self._rows(self._select("stacks", ("id", "kind", "truncated", "frames")))
        for s in self._checked("stacks", rows, _stack):
            out[s.id] = s
        return out

    def tasks(self) -> dict[TaskId, TaskInfo]:
        cols = ("pid", "start_ns", "tgid", "ptgid", "comm", "flags", ("policy", "0"), ("nice", "0"),
                ("rt_priority", "0"))
        rows = self._rows(self._select("tasks", cols))
        infos = self._checked("tasks", rows, lambda r: TaskInfo(TaskId(r[0], r[1]), r[2], r[3], r[4], r[5],
                                                                 r[6] or 0, r[7] or 0, r[8] or 0))
        return {i.task: i for i in infos}

    def functions(self) -> dict[int, str]:
        """Kernel functions named in the recording (a kernel thread's, a work item's), by address."""
        if "functions" not in self.tables:
            return {}
        rows = self._rows(self._select("functions", ("addr", "name")))
        return dict(self._checked("functions", rows, lambda r: (_u64(r[0]), r[1])))

    _SLAB_CACHE_COLUMNS = ("idx", "addr", "name", "object_size", "size", "slab_order", "objs_per_slab", "min_order",
                           "sheaf_capacity", "cpu_partial", "nodes", "aliases", "sysfs")

    def slab_caches(self) -> dict[int, SlabCache]:
        """Every cache described in the recording (each once, when first seen), by address."""
        if "slab_caches" not in self.tables:
            return {}
        rows = self._rows(self._select("slab_caches", self._SLAB_CACHE_COLUMNS) + " ORDER BY idx")
        return {c.addr: c for c in self._checked("slab_caches", rows, _slab_cache)}

    def interval_count(self) -> int:
        return self._rows("SELECT COUNT(*) FROM intervals")[0][0]

    def intervals(self, first: int = 0, last: int | None = None, without: frozenset[str] = frozenset()
                  ) -> Iterator[Interval]:
        """Intervals in [first, last], each rebuilt with its deltas (stacks and task info separate).
        Tables named in `without` (e.g. "wakers") are not read: their records come out empty, for a
        reader that has no use for them (they are the largest: a wakeup a row).

        Streamed: each table is read in interval order by a cursor of its own and merged, so only the
        interval being yielded is held in memory, not the whole window (an hour's recording holds
        millions of rows). A column added after a recording was made reads as its default in it
        (charged_ns: NULL, the wait's total); a table added since, as empty."""
        hi = last if last is not None else 1 << 62
        window = (first, hi)
        migrations = self._stream("migrations", ("idx", "src", "dst", "count"), window, lambda r: (r[1], r[2], r[3]))
        locks = self._stream("locks", tuple(_LOCK_DEFAULTS.get(c, c) for c in (
            "idx", "pid", "start_ns", "tgid", "addr", "kstack", "flags", "kind", "count", "total_ns", "max_ns",
            "min_ns", "spin_ns", "sleep_ns", "owner_pid", "owner_comm", "cache", "symbol", "blocked_ns", "runnable_ns",
            "weighted_ns", "var_us2", "field", "object")), window,
            lambda r: _LockDelta(TaskId(r[1], r[2]), r[3], _u64(r[4]), _u64(r[5]), *r[6:18], r[18], r[19],
                                r[20] or 0, r[21] or 0, r[22] or "", r[23] or ""), without)
        slab = self._stream("slab", (
            "idx", "cache", "tgid", "exiting", "kmallocs", "cache_allocs", "kfrees", "cache_frees", "bytes_req",
            "bytes_alloc", "failed", "slab_switches", "switch_allocs"), window,
            lambda r: SlabDelta(_u64(r[1]), r[2], bool(r[3]), *r[4:13]))
        slab_caches = self._stream("slab_caches", self._SLAB_CACHE_COLUMNS, window, _slab_cache)
        cgroups = self._stream("cgroups", ("idx", "tgid", "start_ns", "path"), window, lambda r: (r[1], r[2], r[3]))
        throttled = self._stream("throttled", ("idx", "cgroup", "periods", "throttled_ns", "quota_us", "period_us"),
                                 window, _throttled)
        cpu_time = self._stream("cpu_time", ("idx", "cpu", "busy_ns", "total_ns"), window, lambda r: (r[1], r[2], r[3]))
        cpu_runq = self._stream("cpu_runq", ("idx", "cpu", "runq_ns", "runq_count"), window,
                                lambda r: (r[1], r[2], r[3]))
        oncpu_cpus = self._stream("oncpu_cpus", (
            "idx", "cpu", "samples", "period_ns", "idle_samples", "idle_ns", "event_ns"), window,
            lambda r: CpuSamplesDelta(*r[1:7]))
        futex = self._stream("futex", (
            "idx", "pid", "start_ns", "tgid", "uaddr", "op", "ustack", "caller_addr", "caller", "lock_name", "count",
            "total_ns", "max_ns", "min_ns", ("flags", "0"), ("blocked_ns", "NULL"), ("runnable_ns", "NULL"),
            ("woken_irq", "0")), window,
            lambda r: _FutexDelta(TaskId(r[1], r[2]), r[3], _u64(r[4]), r[5], _u64(r[6]), _u64(r[7]), *r[8:14],
                                 r[14] or 0, r[15], r[16], r[17] or 0))
        programs = self._stream("programs", ("idx", "name", "run_cnt", "run_time_ns", "recursion_misses"), window,
                                lambda r: ProgramCost(*r[1:5]))
        tuning = self._stream("tuning", (
            "idx", "level", "walks_per_s", "min_stack_ns", "sample_hz", "reason", ("sample_ns", "0"),
            ("user_walks_per_s", "0"), ("lock_calls", "1")), window,
            lambda r: TuningChange(r[0], Tuning(*r[1:5], r[6] or 0, r[7] or 0, r[8] != 0), r[5]))
        io, io_queue, io_submitters, io_wakes = self._io_streams(window)
        rows = self._stream("intervals", (
            "idx", "start_ns", "end_ns", "wall_start", "switches", "collector_cpu_ns", "health", "kernel_switches",
            ("ongoing_ns", "0")), window, lambda r: (*r[:6], health_cell(r[6]), r[7], r[8] or 0))
        # the largest tables, and the waits in progress at each interval's end, read in C when the extension is
        # built (analyzer/rowread.py): after the intervals' cursor began this connection's read, so that the other
        # connection's snapshot holds every interval this one does
        tasks = self._stream_c("task_deltas", _TASK_DELTA_COLUMNS, window, _task_delta)
        offcpu = self._stream_c("offcpu", _OFFCPU_COLUMNS, window, _offcpu_delta)
        wakers = self._stream_c("wakers", _WAKER_COLUMNS, window, _waker_delta, without)
        oncpu = self._stream_c("oncpu", _ONCPU_COLUMNS, window, _oncpu_delta)
        # the waits carried on (ongoing) and handed over (opened), with their beginnings (since_ns: NULL, and no
        # `opened` table, in recordings made before they were kept)
        ongoing = self._stream_c("ongoing", _WAIT_SINCE_COLUMNS, window, _wait_and_since)
        opened = self._stream_c("opened", _WAIT_SINCE_COLUMNS, window, _wait_since)
        kept = "opened" in self.tables
        for idx, start, end, wall, switches, cpu, health, kswitches, ongoing_ns in rows.all():
            yield Interval(idx, start, end, wall, switches, tasks.take(idx), (), offcpu.take(idx),
                           wakers.take(idx), migrations.take(idx), (), health, programs.take(idx), cpu,
                           kswitches or 0, locks.take(idx), slab.take(idx), slab_caches.take(idx),
                           oncpu.take(idx), oncpu_cpus.take(idx), cgroups.take(idx),
                           futex.take(idx), tuning.take(idx), io=io.take(idx), io_queue=io_queue.take(idx),
                           io_submitters=io_submitters.take(idx), io_wakes=io_wakes.take(idx),
                           throttled=throttled.take(idx), cpu_time=cpu_time.take(idx), cpu_runq=cpu_runq.take(idx),
                           ongoing_ns=ongoing_ns,
                           **_interval_waits(ongoing.take(idx), opened.take(idx), kept))

    def lock_rows(self, intervals: Container[int]) -> Iterator[tuple[int, tuple]]:
        """The kernel lock contentions of `intervals` (those read), in interval order, each as (its interval,
        its values in LOCK_VALUES order, addresses and stack ids signed): what a lock fold reads, no record
        made for each of a long recording's million (`intervals(without={"locks"})` reads the rest). Rows
        of other intervals are skipped, as `intervals` skips them; damaged ones are counted and left out."""
        if "locks" not in self.tables:
            return
        try:
            sql = self._select("locks", _LOCK_FOLD_COLUMNS)
            cursor = self.db.execute(f"{sql} WHERE idx BETWEEN ? AND ? ORDER BY idx",
                                     (min(intervals, default=0), max(intervals, default=-1)))
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None
        try:
            for row in cursor:
                if row[0] not in intervals:
                    continue
                if row[-1]:
                    yield row[0], row[1:-1]
                else:
                    self.damaged["locks"] += 1
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None

    def fold_lock_rows(self, limits: dict[int, int], count_damaged: bool = True) -> LockRows | None:
        """The kernel lock contentions of the intervals `limits` names (each with its longest possible wait),
        folded per key in C, as LockFold folds `lock_rows` (analyzer/rowfold.py); damaged rows counted
        (`count_damaged`: here; else the caller counts `damaged` of what it keeps). None when the C fold is
        not to be had (not built, or a total beyond 64 bits): fold `lock_rows` then. Once `lock_statement`
        was called, it reads nothing through this reader's connection: another thread may run it."""
        if "locks" not in self.tables or not limits:
            return LockRows(array("q"), array("q"), [], 0, 0, 0, {})
        sql, kinds = self.lock_statement()
        try:
            rows = fold_lock_rows(self.uri, sql, kinds, limits, _text)
        except RowFoldError as exc:
            raise self._damaged(exc) from None
        if rows is not None and rows.damaged and count_damaged:
            self.damaged["locks"] += rows.damaged
        return rows

    def fold_waker_rows(self, first: int, last: int) -> tuple[dict[tuple, list], int] | None:
        """The wakeup rows of intervals first..last folded per key in C, as the model folds the records
        (analyzer/wakefold.py: the fold's accumulators and the rows left out as damaged, which the caller counts
        where it keeps the fold). None when the C fold is not to be had (not built, or a sum beyond 64 bits):
        fold `waker_records` then. Once `waker_statement` was called, it reads nothing through this reader's
        connection: another thread may run it."""
        if "wakers" not in self.tables or not wakefold.available():
            return None
        try:
            sql, kinds = self.waker_statement()
            return wakefold.fold(self.uri, sql, kinds, first, last)
        except wakefold.WakeFoldError as exc:
            raise self._damaged(exc) from None

    def waker_statement(self) -> tuple[str, list | None]:
        """The statement a wakeup fold steps (idx, the wakers columns, ok; the first and last interval its
        parameters) and the kinds of its columns it checks (None: `ok` checks them)."""
        kept = self.__dict__.get("_waker_statement")
        if kept is None:
            kept = self._waker_statement = self._c_statement("wakers", _WAKER_COLUMNS)
        return kept

    def waker_records(self, order: list[int], last: int | None = None) -> Iterator[tuple[WakerDelta, ...]]:
        """The wakeup records of the intervals `order` names (those an `intervals(without={"wakers"})` read, in
        its order; `last` its window's end), as that read would have made them: damaged rows counted alike."""
        if not order:
            return
        stream = self._stream_c("wakers", _WAKER_COLUMNS, (min(order), last if last is not None else 1 << 62),
                                _waker_delta)
        for idx in order:
            yield stream.take(idx)

    def lock_statement(self) -> tuple[str, list | None]:
        """The statement a lock fold steps (idx, LOCK_VALUES, ok; the first and last interval its parameters)
        and the kinds of its columns it checks (None: `ok` checks them)."""
        kept = self.__dict__.get("_lock_statement")
        if kept is None:
            kept = self._lock_statement = self._c_statement("locks", _LOCK_FOLD_COLUMNS)
        return kept

    def _c_statement(self, table: str, columns) -> tuple[str, list | None]:
        """The statement a reader in C steps over `table`'s rows of a window (the first and last interval its
        parameters): `columns`, then `ok`; and the kinds of those columns the reader checks, as row_ok_sql
        would have SQLite check them (None: `ok` checks the rows, where values have bounds or columns are
        not read)."""
        names = [c if isinstance(c, str) else c[0] for c in columns]
        present = self._columns(table)
        if RANGES.get(table) or (set(COLUMNS[table]) & present) - set(names):
            sql, kinds = self._select(table, columns), None
        else:
            sql = f"SELECT {self._exprs(table, columns)}, 1 FROM {table}"
            kinds = [COLUMNS[table].get(n) if n in present else None for n in names]
        return f"{sql} WHERE idx BETWEEN ? AND ? ORDER BY idx", kinds

    def last_interval_index(self) -> int:
        """The highest interval index the file holds (-1: none)."""
        row = self._rows("SELECT MAX(idx) FROM intervals WHERE typeof(idx) = 'integer'")[0][0]
        return row if row is not None else -1

    def _io_streams(self, window: tuple[int, int]) -> tuple["_ByInterval", ...]:
        """The io group's tables (empty in recordings made before they were kept)."""
        io = self._stream("io", (
            "idx", "dev", "op", "requests", "sectors", "total_ns", "timed", "queued_ns", "device_ns", "bytes",
            "unaccounted", "size_hist", "total_hist", "queued_hist", "device_hist"), window,
            lambda r: IoDelta(*r[1:11], hist_cell(r[11]), hist_cell(r[12]), hist_cell(r[13]), hist_cell(r[14])))
        queue = self._stream("io_queue", (
            "idx", "dev", "name", "issued", "busy_ns", "depth_sum", "depth_hist", "inflight"), window,
            lambda r: IoQueueDelta(*r[1:6], hist_cell(r[6]), r[7]))
        submitters = self._stream("io_submitters", (
            "idx", "dev", "op", "tgid", "comm", "requests", "sectors"), window,
            lambda r: IoSubmitDelta(*r[1:7]))
        wakes = self._stream("io_wakes", (
            "idx", "pid", "start_ns", "tgid", "dev", "op", "submit_tgid", "submit_comm", "wakee_func", "wakee_state",
            "wakee_why", "count", "wait_ns", "req_ns", "timed", "queued_ns", "device_ns"), window,
            lambda r: IoWakeDelta(TaskId(r[1], r[2]), *r[3:8], WaitLink(_u64(r[8]), r[9], r[10]), *r[11:17]))
        return io, queue, submitters, wakes

    def _stream(self, table: str, columns, window: tuple[int, int], make,
                without: frozenset[str] = frozenset()) -> _ByInterval:
        """`table`'s rows in the window, in interval order, made into records (damaged ones skipped and
        counted); empty when the table was added after this recording was made, or is named in `without`."""
        if table not in self.tables or table in without:
            return _ByInterval(iter(()), make, self._damaged, None)
        try:
            cursor = self.db.execute(f"{self._select(table, columns)} WHERE idx BETWEEN ? AND ? ORDER BY idx", window)
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None
        return _ByInterval(cursor, make, self._damaged, lambda: self.damaged.update((table,)))

    def _stream_c(self, table: str, columns, window: tuple[int, int], make,
                  without: frozenset[str] = frozenset()) -> "_ByInterval | rowread.Rows":
        """As _stream, the rows read and made into records in C (analyzer/rowread.py) when the extension is
        built and the rows' checks are types alone; else in Python."""
        if not rowread.available() or table not in self.tables or table in without:
            return self._stream(table, columns, window, make, without)
        sql, kinds = self._c_statement(table, columns)
        if kinds is None:
            return self._stream(table, columns, window, make)
        return rowread.Rows(self.uri, sql, window, table, kinds, _C_MAKERS[table],
                            lambda: self.damaged.update((table,)), self._damaged)

    def close(self) -> None:
        self.db.close()


# Text cells as UTF-8, a byte that is not UTF-8 replaced (as the collector decodes names): a partial of
# str, called in C for each of the millions of text cells an hour's recording holds.
_text = partial(str, encoding="utf-8", errors="replace")


def _throttled(r: tuple) -> Throttled:
    return Throttled(*r[1:6])  # checked in SQL (recording_checks: types and ranges)


_TaskDelta, _OffcpuDelta, _WakerDelta, _LockDelta, _OncpuDelta, _FutexDelta = (
    record_maker(c) for c in (TaskDelta, OffcpuDelta, WakerDelta, LockDelta, OncpuDelta, FutexDelta))


_TASK_DELTA_COLUMNS = (
    "idx", "pid", "start_ns", "offcpu_ns", "offcpu_count", "offcpu_max_ns", "runq_wait_ns", "runq_count",
    "runq_max_ns", "voluntary_switches", "involuntary_switches", "migrations", "runq_hist", "runq_latency_ns",
    ("run_ns", "0"))
_OFFCPU_COLUMNS = (
    "idx", "pid", "start_ns", "tgid", "state", "kstack", "ustack", "count", "total_ns", "max_ns", ("hist", "NULL"),
    ("why", "0"), ("func", "0"), ("charged_ns", "NULL"), ("weighted_ns", "0"), ("var_us2", "0"), ("woken", "NULL"))


_ONCPU_COLUMNS = ("idx", "pid", "start_ns", "tgid", "comm", "kstack", "ustack", "samples", "period_ns")


def _oncpu_delta(r) -> OncpuDelta:
    return _OncpuDelta(TaskId(r[1], r[2]), r[3], r[4], _u64(r[5]), _u64(r[6]), r[7], r[8])


def _task_delta(r) -> TaskDelta:
    return _TaskDelta(TaskId(r[1], r[2]), *r[3:12], hist_cell(r[12]), r[13] or 0, r[14] or 0)


def _offcpu_delta(r) -> OffcpuDelta:
    return _OffcpuDelta(TaskId(r[1], r[2]), r[3], r[4], _u64(r[5]), _u64(r[6]), r[7], r[8], r[9], hist_cell(r[10]),
                        r[11] or 0, _u64(r[12] or 0), r[13], r[14] or 0, r[15] or 0, woken_cell(r[16]))


_WAKER_COLUMNS = (
    "idx", "pid", "start_ns", "waker_pid", "waker_start_ns", "waker_tgid", "waker_comm", "waker_kstack", "count",
    "total_ns", "in_interrupt", ("exiting", "0"), ("link_func", "0"), ("link_state", "0"), ("link_why", "0"),
    ("weighted_ns", "NULL"), ("link_blocked_ns", "0"), ("link_runq_ns", "0"), ("wakee_func", "0"),
    ("wakee_state", "0"), ("wakee_why", "0"))


def _waker_delta(r) -> WakerDelta:
    return _WakerDelta(TaskId(r[1], r[2]), TaskId(r[3], r[4]), r[5], r[6], _u64(r[7]), r[8], r[9], bool(r[10]),
                       bool(r[11]), WaitLink(_u64(r[12] or 0), r[13] or 0, r[14] or 0), r[15], r[16] or 0, r[17] or 0,
                       WaitLink(_u64(r[18] or 0), r[19] or 0, r[20] or 0))


# the records the reader in C makes of each table's rows (analyzer/rowread.c), the columns as above
_C_MAKERS = {"task_deltas": rowread.fields_of(TaskDelta), "offcpu": rowread.fields_of(OffcpuDelta),
             "wakers": rowread.fields_of(WakerDelta), "oncpu": rowread.fields_of(OncpuDelta),
             # (OngoingWait, since) pairs, and WaitSince records (_wait_and_since, _wait_since)
             "ongoing": (tuple, ("wait", "since_ns")), "opened": (WaitSince, ("wait", "since_ns"))}


_WAIT_SINCE_COLUMNS = ("idx", "pid", "start_ns", "tgid", "state", "kstack", "ustack", "why", "func",
                       ("since_ns", "NULL"))


def _wait_and_since(r) -> tuple[OngoingWait, int | None]:
    """A row of `ongoing` (thousands an interval on a machine of sleeping threads): a pair, not a record."""
    return OngoingWait(TaskId(r[1], r[2]), r[3], r[4], _u64(r[5]), _u64(r[6]), r[7], _u64(r[8])), r[9]


def _wait_since(r) -> WaitSince:
    return WaitSince(*_wait_and_since(r))


def _interval_waits(ongoing: tuple[tuple, ...], opened: tuple[WaitSince, ...], kept: bool) -> dict:
    """An interval's ongoing, ongoing_since and opened from its rows of the two tables; where their beginnings
    were not kept, only the waits carried on."""
    waits = tuple(map(itemgetter(0), ongoing))
    since = tuple(map(itemgetter(1), ongoing))
    if not kept or None in since or any(w.since_ns is None for w in opened):
        return {"ongoing": waits}
    return {"ongoing": waits, "ongoing_since": since, "opened": opened}


def _stack(r) -> Stack:
    if r[1] not in ("kernel", "user"):
        raise DamagedRow("not a stack kind")
    return Stack(_u64(r[0]), r[1], frames_cell(r[3]), bool(r[2]))


def _slab_cache(r) -> SlabCache:
    return SlabCache(_u64(r[1]), r[2], *r[3:10], nodes=nodes_cell(r[10]), aliases=aliases_cell(r[11]),
                     sysfs=sysfs_cell(r[12]))


class _ByInterval:
    """Rows ordered by their interval (column 0), made into records and handed out one interval at a time.
    A row whose last column (`ok`) is false, or that `make` finds damaged, is counted and left out."""

    def __init__(self, rows, make, damaged, count_damaged):
        self._rows = rows
        self._make = make
        self._damaged = damaged
        self._count_damaged = count_damaged
        self._head = None

    def _next(self):
        try:
            return next(self._rows, None)
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None

    def _record(self, row, out: list) -> None:
        if row[-1]:
            try:
                out.append(self._make(row))
                return
            except DamagedRow:
                pass
        self._count_damaged()

    def take(self, idx: int) -> tuple:
        """The records of interval `idx`; rows of earlier intervals (none without an interval row) are skipped."""
        out: list = []
        row = self._head if self._head is not None else self._next()
        while row is not None and row[0] <= idx:
            if row[0] == idx:
                self._record(row, out)
            row = self._next()
        self._head = row
        return tuple(out)

    def all(self) -> Iterator:
        row = self._head if self._head is not None else self._next()
        while row is not None:
            out: list = []
            self._record(row, out)
            yield from out
            row = self._next()


def _meta_from_json(doc: dict) -> RecordingMeta:
    probes = {name: ProbeStatus(**p) for name, p in doc.pop("probes").items()}
    return RecordingMeta(probes=probes, **doc)
