"""The recording machine's description and the CPU side, from sysfs/procfs texts and snapshots."""

from __future__ import annotations

from dataclasses import replace

from stallscope import machine
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta, TaskInfo
from stallscope.analyzer.signals import signals, signals_doc, switch_kinds
from synthetic import A, B, interval, kstack, meta


def test_cpu_lists_parse_as_the_kernel_prints_them():
    assert machine.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert machine.parse_cpu_list("0") == [0]


def test_topology_reads_the_last_level_cache_each_cpu_shares(tmp_path):
    root = tmp_path / "cpu"
    (root).mkdir()
    (root / "online").write_text("0-3\n")
    for cpu in range(4):
        base = root / f"cpu{cpu}"
        for index, (level, shared) in enumerate(((1, str(cpu)), (2, str(cpu)), (3, "0-1" if cpu < 2 else "2-3"))):
            d = base / "cache" / f"index{index}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "shared_cpu_list").write_text(shared + "\n")
        (base / "topology").mkdir()
        (base / "topology" / "core_id").write_text(f"{cpu}\n")
        (base / "node0").mkdir()
    topo = machine.topology(str(root))
    assert topo["online"] == [0, 1, 2, 3]
    assert topo["cpus"]["3"]["llc"] == [2, 3] and topo["cpus"]["3"]["llc_level"] == 3 and topo["cpus"]["3"]["node"] == 0


def test_cpu_side_is_the_difference_of_two_snapshots():
    start = {"psi": {"cpu": {"some": 1_000_000, "full": 0}}, "steal_ns": 5_000_000_000,
             "throttling": {"/sys/fs/cgroup/a": (10, 1_000_000), "/sys/fs/cgroup/b": (3, 0)}}
    end = {"psi": {"cpu": {"some": 1_500_000, "full": 100_000}}, "steal_ns": 5_400_000_000,
           "throttling": {"/sys/fs/cgroup/a": (30, 81_000_000), "/sys/fs/cgroup/b": (3, 0)}}
    side = machine.cpu_side(start, end, 2.0, 2)
    assert side["psi"]["cpu"] == {"some_pct": 25.0, "full_pct": 5.0}
    assert side["steal_ns"] == 400_000_000 and side["steal_pct"] == 10.0
    assert side["throttled"] == [{"cgroup": "/sys/fs/cgroup/a", "nr_throttled": 20, "throttled_ns": 80_000_000}]
    assert side["cgroup_psi"] == []


def test_cgroup_pressure_is_per_cgroup_and_per_resource():
    start = {"psi": {}, "steal_ns": 0, "throttling": {}, "cgroup_psi": {"/cg/a": {"cpu": {"some": 0}}}}
    end = {"psi": {}, "steal_ns": 0, "throttling": {}, "cgroup_psi": {"/cg/a": {"cpu": {"some": 400_000}},
                                                                      "/cg/b": {"cpu": {"some": 100_000}}}}
    side = machine.cpu_side(start, end, 1.0, 2)
    assert side["cgroup_psi"] == [{"cgroup": "/cg/a", "cpu": {"some_pct": 40.0}}, {"cgroup": "/cg/b", "cpu": {"some_pct": 10.0}}]


def test_signals_compare_switches_with_runnable_tasks():
    iv = interval(0, switches=20_000, task_info=(TaskInfo(A, 100, 1, "a"), TaskInfo(B, 100, 1, "b")),
                  tasks=(TaskDelta(A, runq_wait_ns=500_000_000, migrations=40), TaskDelta(B, runq_wait_ns=500_000_000)))
    m = replace(meta(), machine={"cpu_busy_pct": {"0": 100.0, "1": 100.0}})
    s = signals(Model.from_intervals(m, [iv], {i.task: i for i in iv.task_info}, {}))
    assert s.waiting_avg == 1.0 and s.runnable_avg == 3.0 and round(s.cs_per_runnable) == 6667 and s.cs_high
    assert s.runq_pressure == 0.5 and s.top_migrating[0][:2] == ("a", 100)
    assert s.voluntary_share is None and s.top_wait is None
    assert switch_kinds(s.voluntary_share, s.top_wait) == "tasks block and wake often"


def test_a_high_switch_rate_says_how_much_of_it_is_blocking_on_what_and_how_much_preemption_or_yield():
    """sysbench's threads test: two thirds of its switches are sched_yield() (the kernel's nivcsw), a third
    its mutex's sleeps; stress-ng's yield stressor: all yields, no lock to look at; fio's synchronous reads:
    all blocking, on I/O, not on a lock."""
    io = kstack(0x50, "__schedule", "io_schedule", "blk_mq_get_tag", "submit_bio")
    pipe = kstack(0x51, "__schedule", "schedule", "anon_pipe_read", "vfs_read")

    def kinds(vol, invol, waits=()):
        iv = interval(0, switches=20_000, task_info=(TaskInfo(A, 100, 1, "a"),), stacks=(io, pipe),
                      tasks=(TaskDelta(A, voluntary_switches=vol, involuntary_switches=invol),),
                      offcpu=tuple(OffcpuDelta(A, 100, 2, st.id, 0, n, n * 50_000) for st, n in waits))
        s = signals(Model.from_intervals(meta(), [iv], {i.task: i for i in iv.task_info}, {io.id: io, pipe.id: pipe}))
        doc = signals_doc(s)
        return switch_kinds(s.voluntary_share, s.top_wait), doc["voluntary_pct"], doc["top_wait"]

    assert kinds(1000, 2000) == ("67% involuntary (preempted, or calling sched_yield()), 33% voluntary (blocking)",
                                 33.3, None)
    assert kinds(0, 5000) == ("100% involuntary (preempted, or calling sched_yield())", 0.0, None)
    assert kinds(970, 30, ((io, 900), (pipe, 100))) == (
        "97% voluntary (blocking; most waits: Waiting for I/O, 90%)", 97.0,
        {"cause": "Waiting for I/O", "waits_pct": 90.0})


def test_a_cgroups_cpu_quota_is_read_from_either_hierarchy(tmp_path):
    v2, v1, none, bad = (tmp_path / n for n in ("v2", "v1", "none", "bad"))
    for d in (v2, v1, none, bad):
        d.mkdir()
    (v2 / "cpu.max").write_text("50000 100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("20000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (none / "cpu.max").write_text("max 100000\n")
    (bad / "cpu.max").write_text("x y\n")
    assert machine.cpu_quota(str(v2)) == {"quota_us": 50_000, "period_us": 100_000}
    assert machine.cpu_quota(str(v1)) == {"quota_us": 20_000, "period_us": 100_000}
    assert machine.cpu_quota(str(none)) == {} and machine.cpu_quota(str(bad)) == {}
    assert machine.cpu_quota(str(tmp_path / "gone")) == {}
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no limit"
    assert machine.cpu_quota(str(v1)) == {}


def test_the_limited_cgroups_throttling_is_read_at_each_drain_and_who_is_limited_is_walked_for_now_and_then(
        tmp_path):
    """What a session puts in each interval: the periods and time since the last read of the cgroups with a CPU
    limit (v2's counts in us, v1's in ns); which those are, walked for every THROTTLE_RESCAN_S; one found by a
    later walk counted from there, not from its creation; one gone, left out."""
    from stallscope.analyzer.sample import Throttled

    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    for d in (v2, v1):
        d.mkdir()
    (v2 / "cpu.max").write_text("20000 100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")

    def stat(d, n, us=None, ns=None):
        (d / "cpu.stat").write_text(f"usage_usec 5\nnr_periods 99\nnr_throttled {n}\n"
                                    + (f"throttled_usec {us}\n" if us is not None else f"throttled_time {ns}\n"))

    now, limited = [0.0], [str(v2)]
    t = machine.Throttling(clock=lambda: now[0], walk=lambda: list(limited))
    stat(v2, 10, us=1000)
    assert t.since_last() == ()  # the baseline
    stat(v2, 13, us=1600)
    now[0] = 1.0
    assert t.since_last() == (Throttled(str(v2), 3, 600_000, 20_000, 100_000),)
    now[0] = 2.0
    assert t.since_last() == ()  # not throttled since
    # v1 limited since; not seen until the next walk, then counted from it
    limited.append(str(v1))
    stat(v1, 500, ns=7_000_000_000)
    now[0] = 3.0
    assert t.since_last() == ()
    now[0] = 2.0 + machine.THROTTLE_RESCAN_S
    assert t.since_last() == ()
    stat(v1, 504, ns=7_300_000_000)
    stat(v2, 14, us=1700)
    now[0] += 1
    assert t.since_last() == (Throttled(str(v1), 4, 300_000_000, 50_000, 100_000),
                              Throttled(str(v2), 1, 100_000, 20_000, 100_000))
    (v2 / "cpu.stat").unlink()  # gone
    stat(v1, 505, ns=7_400_000_000)
    now[0] += 1
    assert t.since_last() == (Throttled(str(v1), 1, 100_000_000, 50_000, 100_000),)


def test_a_cgroup_reached_by_two_roots_is_walked_once(tmp_path):
    """cgroup v1's cpu hierarchy is often mounted at cpu,cpuacct with cpu a link to it, and the cgroup root holds
    both: each cgroup once (its throttling counted once), by the first path met."""
    root = tmp_path / "cgroup"
    real = root / "cpu,cpuacct"
    (real / "a" / "b").mkdir(parents=True)
    for d in (real, real / "a", real / "a" / "b"):
        (d / "cpu.stat").write_text("nr_periods 1\nnr_throttled 0\nthrottled_time 0\n")
    (root / "cpu").symlink_to(real)
    roots = (str(root), str(root / "cpu"), str(real))
    assert list(machine._cgroup_stats(roots)) == [str(real), str(real / "a"), str(real / "a" / "b")]


def test_the_cpu_side_line_leaves_out_throttling_entries_no_kernel_writes():
    from stallscope.analyzer.signals import Signals
    from stallscope.tui.causes import signals_text

    side = {"steal_pct": 0.0, "throttled": ["x", {"cgroup": 5}, {"cgroup": "/a", "nr_throttled": "3"},
                                           {"cgroup": "/b", "nr_throttled": 3, "throttled_ns": 2_000_000}]}
    text = signals_text(Signals(1.0, 1.0, 0.0, 1.0, 0.0, 0.0, (), side))
    assert "CFS throttled /b: 3 times, 2.00ms" in text and "/a" not in text
