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

import json
import os
import sqlite3
from dataclasses import asdict
from operator import attrgetter
from typing import Iterator

from stallscope.analyzer.sample import (
    CpuSamplesDelta, FutexDelta, Interval, IoDelta, IoQueueDelta, IoSubmitDelta, IoWakeDelta, LockDelta, OffcpuDelta,
    OncpuDelta, ProbeStatus, ProgramCost, RecordingMeta, SlabCache, SlabDelta, Stack, TaskDelta, TaskId, TaskInfo, Tuning,
    TuningChange, WaitLink, WakerDelta,
)
from stallscope.analyzer.symbols import Frame
from stallscope.errors import StallscopeError

FORMAT_VERSION = 1
# what reading a damaged file raises: SQLite's errors, and text that is not UTF-8 (a scribbled schema)
_READ_ERRORS = (sqlite3.Error, UnicodeDecodeError)
APPLICATION_ID = 0x53544C4C  # "STLL": lets `file` and we tell our databases from others

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intervals (
    idx INTEGER PRIMARY KEY, start_ns INTEGER, end_ns INTEGER, wall_start REAL,
    switches INTEGER, collector_cpu_ns INTEGER, health TEXT, kernel_switches INTEGER);
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

_FRAME_FIELDS = ("addr", "symbol", "offset", "module", "build_id", "module_offset", "kind")
_FRAME_ROW = attrgetter(*_FRAME_FIELDS)  # a frame's stored row, in one C call


def _s64(v: int) -> int:
    """Stack ids are unsigned 64-bit hashes; SQLite integers are signed."""
    return v - (1 << 64) if v >= (1 << 63) else v


def _u64(v: int) -> int:
    return v + (1 << 64) if v < 0 else v


def _disk_error(path: str, exc: sqlite3.Error) -> StallscopeError:
    text = str(exc)
    if "full" in text:
        return StallscopeError(f"disk full while writing {path}",
                               "free space; what was recorded so far is readable")
    return StallscopeError(f"cannot write {path}: {text}", "check the path and free space")


def _hist_text(hist: tuple[tuple[int, int], ...]) -> str | None:
    """A log2 histogram's (slot, count) pairs as the JSON array json.dumps would write, without its
    per-call set-up: one row in two carries one, thousands a second on a busy machine."""
    if not hist:
        return None
    return "[" + ",".join(f"[{s},{n}]" for s, n in hist) + "]"


class RecordingWriter:
    """Appends intervals to a new recording file."""

    def __init__(self, path: str, meta: RecordingMeta):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            self.db.executescript(_SCHEMA)
            self._put_meta(meta)
        except sqlite3.Error as exc:
            raise _disk_error(path, exc) from None
        self._stacks: set[int] = set()
        self._tasks: set[TaskId] = set()
        self.intervals = 0

    def _put_meta(self, meta: RecordingMeta) -> None:
        doc = asdict(meta)
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('meta', ?)", (json.dumps(doc, sort_keys=True),))

    def update_meta(self, meta: RecordingMeta) -> None:
        try:
            self._put_meta(meta)
        except sqlite3.Error as exc:
            raise _disk_error(self.path, exc) from None

    def append(self, iv: Interval) -> None:
        try:
            self._append(iv)
        except sqlite3.Error as exc:
            raise _disk_error(self.path, exc) from None
        self.intervals += 1

    def _append(self, iv: Interval) -> None:
        db = self.db
        db.execute("BEGIN")
        try:
            i = iv.index
            db.execute("INSERT INTO intervals VALUES (?,?,?,?,?,?,?,?)",
                       (i, iv.start_ns, iv.end_ns, iv.wall_start, iv.switches, iv.collector_cpu_ns,
                        json.dumps(iv.health, sort_keys=True), iv.kernel_switches))
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
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.db.close()
        except sqlite3.Error:
            pass


class Recording:
    """A recording opened for reading."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.exists(path):
            raise StallscopeError(f"{path}: no such recording", "record one with `stallscope record -o FILE`")
        try:
            with open(path, "rb") as f:
                head = f.read(100)
        except OSError as exc:
            raise StallscopeError(f"{path}: {exc.strerror}", "check the path and permissions") from None
        if not head.startswith(b"SQLite format 3\0"):
            raise StallscopeError(f"{path} is not a stallscope recording", "it is not an SQLite database")
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            self.db.execute("PRAGMA query_only=1")
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            self.tables = tables
            if "meta" not in tables:
                raise StallscopeError(f"{path} is not a stallscope recording", "it is an SQLite database of something else")
            rows = dict(self.db.execute("SELECT key, value FROM meta"))
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None
        if "format_version" not in rows or "meta" not in rows:
            raise StallscopeError(f"{path} is not a stallscope recording", "it has no stallscope metadata")
        try:
            version = int(rows["format_version"])
        except ValueError:
            raise StallscopeError(f"{path} has a damaged header", "the format version is unreadable") from None
        if version > FORMAT_VERSION:
            raise StallscopeError(
                f"{path} was written by a newer stallscope (format {version}, this one reads up to {FORMAT_VERSION})",
                "upgrade stallscope to read it")
        try:
            self.meta = _meta_from_json(json.loads(rows["meta"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise StallscopeError(f"{path} has damaged metadata ({exc})", "the recording cannot be read") from None
        self.format_version = version

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

    def _hist(self, text: str | None) -> tuple[tuple[int, int], ...]:
        if not text:
            return ()
        try:
            return tuple((int(s), int(c)) for s, c in json.loads(text))
        except (ValueError, TypeError) as exc:
            raise self._damaged(exc) from None

    def stacks(self) -> dict[int, Stack]:
        out = {}
        for sid, kind, truncated, frames in self._rows("SELECT id, kind, truncated, frames FROM stacks"):
            try:
                fr = tuple(Frame(**dict(zip(_FRAME_FIELDS, f))) for f in json.loads(frames))
            except (ValueError, TypeError) as exc:
                raise self._damaged(exc) from None
            out[_u64(sid)] = Stack(_u64(sid), kind, fr, bool(truncated))
        return out

    def tasks(self) -> dict[TaskId, TaskInfo]:
        sched = ", ".join(self._col("tasks", c, "0") for c in ("policy", "nice", "rt_priority"))
        return {TaskId(pid, st): TaskInfo(TaskId(pid, st), tgid, ptgid, comm, flags, policy or 0, nice or 0, rt or 0)
                for pid, st, tgid, ptgid, comm, flags, policy, nice, rt in
                self._rows(f"SELECT pid, start_ns, tgid, ptgid, comm, flags, {sched} FROM tasks")}

    def functions(self) -> dict[int, str]:
        """Kernel functions named in the recording (a kernel thread's, a work item's), by address."""
        if "functions" not in self.tables:
            return {}
        return {_u64(addr): name for addr, name in self._rows("SELECT addr, name FROM functions")}

    def _col(self, table: str, column: str, default: str) -> str:
        """`column`, or `default` in a recording made before the column was added."""
        return column if column in self._columns(table) else default

    def slab_caches(self) -> dict[int, SlabCache]:
        """Every cache described in the recording (each once, when first seen), by address."""
        if "slab_caches" not in self.tables:
            return {}
        rows = self._rows("SELECT idx, addr, name, object_size, size, slab_order, objs_per_slab, min_order, "
                          "sheaf_capacity, cpu_partial, nodes, aliases, sysfs FROM slab_caches ORDER BY idx")
        return {c.addr: c for c in map(self._slab_cache, rows)}

    def interval_count(self) -> int:
        return self._rows("SELECT COUNT(*) FROM intervals")[0][0]

    def intervals(self, first: int = 0, last: int | None = None) -> Iterator[Interval]:
        """Intervals in [first, last], each rebuilt with its deltas (stacks and task info separate).

        Streamed: each table is read in interval order by a cursor of its own and merged, so only the
        interval being yielded is held in memory, not the whole window (an hour's recording holds
        millions of rows)."""
        hi = last if last is not None else 1 << 62
        window = (first, hi)
        tasks = self._stream(
            "SELECT idx, pid, start_ns, offcpu_ns, offcpu_count, offcpu_max_ns, runq_wait_ns, runq_count, "
            "runq_max_ns, voluntary_switches, involuntary_switches, migrations, runq_hist, runq_latency_ns, "
            f"{self._col('task_deltas', 'run_ns', '0')} FROM task_deltas", window,
            lambda r: TaskDelta(TaskId(r[1], r[2]), *r[3:12],
                                runq_hist=tuple(tuple(x) for x in json.loads(r[12])) if r[12] else (),
                                runq_latency_ns=r[13] or 0, run_ns=r[14] or 0))
        # a column added after a recording was made reads as empty in it (charged_ns: NULL, the wait's total)
        extra = ", ".join(self._col("offcpu", c, d) for c, d in (
            ("hist", "NULL"), ("why", "0"), ("func", "0"), ("charged_ns", "NULL"), ("weighted_ns", "0"),
            ("var_us2", "0"), ("woken", "NULL")))
        offcpu = self._stream(
            f"SELECT idx, pid, start_ns, tgid, state, kstack, ustack, count, total_ns, max_ns, {extra} FROM offcpu",
            window,
            lambda r: OffcpuDelta(TaskId(r[1], r[2]), r[3], r[4], _u64(r[5]), _u64(r[6]), r[7], r[8], r[9],
                                  self._hist(r[10]), r[11] or 0, _u64(r[12] or 0), r[13], r[14] or 0, r[15] or 0,
                                  self._woken(r[16])))
        link = ", ".join(self._col("wakers", c, d) for c, d in (
            ("exiting", "0"), ("link_func", "0"), ("link_state", "0"), ("link_why", "0"),
            ("weighted_ns", "NULL"), ("link_blocked_ns", "0"), ("link_runq_ns", "0"), ("wakee_func", "0"),
            ("wakee_state", "0"), ("wakee_why", "0")))
        wakers = self._stream(
            "SELECT idx, pid, start_ns, waker_pid, waker_start_ns, waker_tgid, waker_comm, waker_kstack, count, "
            f"total_ns, in_interrupt, {link} FROM wakers", window,
            lambda r: WakerDelta(TaskId(r[1], r[2]), TaskId(r[3], r[4]), r[5], r[6], _u64(r[7]), r[8], r[9],
                                 bool(r[10]), bool(r[11]), WaitLink(_u64(r[12] or 0), r[13] or 0, r[14] or 0),
                                 r[15], r[16] or 0, r[17] or 0, WaitLink(_u64(r[18] or 0), r[19] or 0, r[20] or 0)))
        migrations = self._stream("SELECT idx, src, dst, count FROM migrations", window, lambda r: (r[1], r[2], r[3]))
        # a table added after a recording was made is empty in it
        split = ", ".join(self._col("locks", c, d) for c, d in (
            ("symbol", "''"), ("blocked_ns", "NULL"), ("runnable_ns", "NULL"), ("weighted_ns", "0"), ("var_us2", "0"),
            ("field", "''"), ("object", "''")))
        locks = self._stream(
            "SELECT idx, pid, start_ns, tgid, addr, kstack, flags, kind, count, total_ns, max_ns, min_ns, spin_ns, "
            f"sleep_ns, owner_pid, owner_comm, cache, {split} FROM locks", window,
            lambda r: LockDelta(TaskId(r[1], r[2]), r[3], _u64(r[4]), _u64(r[5]), *r[6:18], r[18], r[19],
                                r[20] or 0, r[21] or 0, r[22] or "", r[23] or ""), "locks")
        slab = self._stream(
            "SELECT idx, cache, tgid, exiting, kmallocs, cache_allocs, kfrees, cache_frees, bytes_req, bytes_alloc, "
            "failed, slab_switches, switch_allocs FROM slab", window,
            lambda r: SlabDelta(_u64(r[1]), r[2], bool(r[3]), *r[4:]), "slab")
        slab_caches = self._stream(
            "SELECT idx, addr, name, object_size, size, slab_order, objs_per_slab, min_order, sheaf_capacity, "
            "cpu_partial, nodes, aliases, sysfs FROM slab_caches", window, self._slab_cache, "slab_caches")
        cgroups = self._stream("SELECT idx, tgid, start_ns, path FROM cgroups", window, lambda r: (r[1], r[2], r[3]),
                               "cgroups")
        oncpu = self._stream(
            "SELECT idx, pid, start_ns, tgid, comm, kstack, ustack, samples, period_ns FROM oncpu", window,
            lambda r: OncpuDelta(TaskId(r[1], r[2]), r[3], r[4], _u64(r[5]), _u64(r[6]), r[7], r[8]), "oncpu")
        oncpu_cpus = self._stream(
            "SELECT idx, cpu, samples, period_ns, idle_samples, idle_ns, event_ns FROM oncpu_cpus", window,
            lambda r: CpuSamplesDelta(*r[1:]), "oncpu_cpus")
        split = ", ".join(self._col("futex", c, d) for c, d in (
            ("flags", "0"), ("blocked_ns", "NULL"), ("runnable_ns", "NULL"), ("woken_irq", "0")))
        futex = self._stream(
            "SELECT idx, pid, start_ns, tgid, uaddr, op, ustack, caller_addr, caller, lock_name, count, total_ns, "
            f"max_ns, min_ns, {split} FROM futex", window,
            lambda r: FutexDelta(TaskId(r[1], r[2]), r[3], _u64(r[4]), r[5], _u64(r[6]), _u64(r[7]), *r[8:14],
                                 r[14] or 0, r[15], r[16], r[17] or 0), "futex")
        programs = self._stream("SELECT idx, name, run_cnt, run_time_ns, recursion_misses FROM programs", window,
                                lambda r: ProgramCost(*r[1:]))
        tuning = self._stream(
            "SELECT idx, level, walks_per_s, min_stack_ns, sample_hz, reason, "
            f"{self._col('tuning', 'sample_ns', '0')}, {self._col('tuning', 'user_walks_per_s', '0')}, "
            f"{self._col('tuning', 'lock_calls', '1')} FROM tuning",
            window, lambda r: TuningChange(r[0], Tuning(*r[1:5], r[6] or 0, r[7] or 0, r[8] != 0), r[5]), "tuning")
        io, io_queue, io_submitters, io_wakes = self._io_streams(window)
        rows = self._stream("SELECT idx, start_ns, end_ns, wall_start, switches, collector_cpu_ns, health, "
                            "kernel_switches FROM intervals", window, lambda r: r)
        for idx, start, end, wall, switches, cpu, health, kswitches in rows.all():
            try:
                h = json.loads(health) if health else {}
            except ValueError as exc:
                raise self._damaged(exc) from None
            yield Interval(idx, start, end, wall, switches, tasks.take(idx), (), offcpu.take(idx),
                           wakers.take(idx), migrations.take(idx), (), h, programs.take(idx), cpu,
                           kswitches or 0, locks.take(idx), slab.take(idx), slab_caches.take(idx),
                           oncpu.take(idx), oncpu_cpus.take(idx), cgroups.take(idx),
                           futex.take(idx), tuning.take(idx), io=io.take(idx), io_queue=io_queue.take(idx),
                           io_submitters=io_submitters.take(idx), io_wakes=io_wakes.take(idx))

    def _io_streams(self, window: tuple[int, int]) -> tuple[_ByInterval, ...]:
        """The io group's tables (empty in recordings made before they were kept)."""
        io = self._stream(
            "SELECT idx, dev, op, requests, sectors, total_ns, timed, queued_ns, device_ns, bytes, unaccounted, "
            "size_hist, total_hist, queued_hist, device_hist FROM io", window,
            lambda r: IoDelta(*r[1:11], self._hist(r[11]), self._hist(r[12]), self._hist(r[13]), self._hist(r[14])),
            "io")
        queue = self._stream(
            "SELECT idx, dev, name, issued, busy_ns, depth_sum, depth_hist, inflight FROM io_queue", window,
            lambda r: IoQueueDelta(*r[1:6], self._hist(r[6]), r[7]), "io_queue")
        submitters = self._stream(
            "SELECT idx, dev, op, tgid, comm, requests, sectors FROM io_submitters", window,
            lambda r: IoSubmitDelta(*r[1:]), "io_submitters")
        wakes = self._stream(
            "SELECT idx, pid, start_ns, tgid, dev, op, submit_tgid, submit_comm, wakee_func, wakee_state, wakee_why, "
            "count, wait_ns, req_ns, timed, queued_ns, device_ns FROM io_wakes", window,
            lambda r: IoWakeDelta(TaskId(r[1], r[2]), *r[3:8], WaitLink(_u64(r[8]), r[9], r[10]), *r[11:]), "io_wakes")
        return io, queue, submitters, wakes

    def _woken(self, text: str | None) -> tuple[int, int, int]:
        if not text:
            return (0, 0, 0)
        try:
            a, b, c = (int(x) for x in text.split(","))
        except ValueError as exc:
            raise self._damaged(exc) from None
        return (a, b, c)

    def _stream(self, select: str, window: tuple[int, int], make, table: str | None = None) -> _ByInterval:
        """`select`'s rows in the window, in interval order, made into records; empty when `table` (a
        table added after some recordings were made) is missing from this one."""
        if table is not None and table not in self.tables:
            return _ByInterval(iter(()), make, self._damaged)
        try:
            cursor = self.db.execute(f"{select} WHERE idx BETWEEN ? AND ? ORDER BY idx", window)
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None
        return _ByInterval(cursor, make, self._damaged)

    def _slab_cache(self, r) -> SlabCache:
        try:
            nodes = tuple(int(n) for n in json.loads(r[10]))
            aliases = tuple(json.loads(r[11]))
            sysfs = tuple(sorted(json.loads(r[12]).items()))
        except (ValueError, TypeError, AttributeError) as exc:
            raise self._damaged(exc) from None
        return SlabCache(_u64(r[1]), r[2], *r[3:10], nodes=nodes, aliases=aliases, sysfs=sysfs)

    def close(self) -> None:
        self.db.close()


class _ByInterval:
    """Rows ordered by their interval (column 0), handed out one interval at a time."""

    def __init__(self, rows, make, damaged):
        self._rows = rows
        self._make = make
        self._damaged = damaged
        self._head = None

    def _next(self):
        try:
            return next(self._rows, None)
        except _READ_ERRORS as exc:
            raise self._damaged(exc) from None

    def take(self, idx: int) -> tuple:
        """The records of interval `idx`; rows of earlier intervals (none without an interval row) are skipped."""
        out = []
        row = self._head if self._head is not None else self._next()
        while row is not None and row[0] <= idx:
            if row[0] == idx:
                out.append(self._make(row))
            row = self._next()
        self._head = row
        return tuple(out)

    def all(self) -> Iterator:
        row = self._head if self._head is not None else self._next()
        while row is not None:
            yield row
            row = self._next()


def _meta_from_json(doc: dict) -> RecordingMeta:
    probes = {name: ProbeStatus(**p) for name, p in doc.pop("probes").items()}
    return RecordingMeta(probes=probes, **doc)
