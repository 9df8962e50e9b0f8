"""Run against run: the change that matters leads, noise does not."""

from __future__ import annotations

import json

from conftest import ALL_STACKS, example, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.diff import NoiseGuard, diff, differential_folded
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta, TaskId, TaskInfo
from synthetic import SEC, interval, kstack, meta

SLEEP = kstack(0x10, "__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep")
PIPE = kstack(0x20, "__schedule", "schedule", "anon_pipe_read", "vfs_read")
FSYNC = kstack(0x30, "jbd2_log_wait_commit", "ext4_sync_file", "vfs_fsync_range", "do_fsync")
APP = TaskId(10, 1)


def _model(seconds: int, *waits: tuple) -> Model:
    """`seconds` one-second intervals; each wait (stack, count, total_ns) is spread over them."""
    ivs = []
    for i in range(seconds):
        ivs.append(interval(i, task_info=(TaskInfo(APP, 10, 1, "app"),) if i == 0 else (),
                            stacks=tuple(s for s, *_ in waits) if i == 0 else (),
                            tasks=(TaskDelta(APP, offcpu_ns=sum(t for _, _, t in waits) // seconds),),
                            offcpu=tuple(OffcpuDelta(APP, 10, 1, s.id, 0, max(n // seconds, 1), t // seconds)
                                         for s, n, t in waits)))
    return Model.from_intervals(meta(), ivs, {APP: TaskInfo(APP, 10, 1, "app")}, {s.id: s for s, *_ in waits})


def test_an_injected_blocker_leads_the_diff_and_per_second_rates_make_run_lengths_comparable():
    base = _model(2, (SLEEP, 100, 1 * SEC))  # 0.5 s of sleep per second
    new = _model(4, (SLEEP, 200, 2 * SEC), (FSYNC, 400, 400_000_000))  # same sleep rate, fsync injected
    changes = diff(base, new)
    assert (changes[0].kind, changes[0].name) == ("cause", "fsync() on a file")
    assert changes[0].significant and changes[0].delta_pct is None  # new in this run
    assert round(changes[0].new_ns_per_s) == 100_000_000
    sleep = next(c for c in changes if c.name == "Application requested delay")
    assert sleep.delta_ns_per_s == 0 and not sleep.significant


def test_regressions_lead_then_improvements_the_largest_first_so_that_a_cut_keeps_the_largest_of_both():
    base = _model(1, (SLEEP, 100, 500_000_000), (PIPE, 100, 300_000_000))
    new = _model(1, (SLEEP, 100, 400_000_000), (PIPE, 100, 100_000_000), (FSYNC, 100, 50_000_000))
    significant = [(c.name, round(c.delta_ns_per_s / 1e6)) for c in diff(base, new)
                   if c.significant and c.kind == "cause"]
    # the fsync grew; the pipe shrank by 200 ms/s, the sleep by 100 ms/s: the larger first
    assert significant == [("fsync() on a file", 50), ("Reading from a pipe", -200),
                           ("Application requested delay", -100)], significant


def test_a_one_off_wait_or_a_tiny_change_does_not_lead():
    base = _model(1, (SLEEP, 100, 500_000_000))
    one_off = _model(1, (SLEEP, 100, 500_000_000), (PIPE, 1, 300_000_000))  # one long wait
    tiny = _model(1, (SLEEP, 100, 500_400_000))  # +0.4 ms/s
    assert not any(c.significant for c in diff(base, one_off) if c.kind == "cause")
    assert not any(c.significant for c in diff(base, tiny))
    # with the guard lowered, the one-off counts
    loose = diff(base, one_off, NoiseGuard(min_events=1))
    assert loose[0].significant and loose[0].name in ("Reading from a pipe", "app")


def test_a_slab_cache_whose_list_lock_waits_grew_is_in_the_diff():
    import sys
    sys.path.insert(0, str(__import__("conftest").ROOT / "tests"))
    from test_recommend import _slab_model

    changes = diff(_slab_model(2, 20, 1_000_000), _slab_model(2, 20, 400_000_000))
    cache = next(c for c in changes if c.kind == "cache")
    assert cache.name == "kmalloc-512" and cache.significant and round(cache.delta_ns_per_s) == 399_000_000


def test_stallscope_itself_is_left_out_of_the_diff_as_out_of_every_view():
    """`stallscope diff` of two recordings had ranked "task stallscope" (the recorder: 6.2 -> 3.1 ms/s)."""
    own = TaskId(20, 2)

    infos = {APP: TaskInfo(APP, 10, 1, "app"), own: TaskInfo(own, 20, 1, "stallscope")}

    def recorded(app_ns: int, own_ns: int) -> Model:
        """One second: the app sleeping app_ns, stallscope reading a pipe own_ns."""
        iv = interval(0, task_info=tuple(infos.values()), stacks=(SLEEP, PIPE),
                      tasks=(TaskDelta(APP, offcpu_ns=app_ns), TaskDelta(own, offcpu_ns=own_ns)),
                      offcpu=(OffcpuDelta(APP, 10, 1, SLEEP.id, 0, 100, app_ns),
                              OffcpuDelta(own, 20, 1, PIPE.id, 0, 50, own_ns)))
        return Model.from_intervals(meta(stallscope_pid=20), [iv], infos, {SLEEP.id: SLEEP, PIPE.id: PIPE})

    base, new = recorded(100_000_000, 10_000_000), recorded(500_000_000, 600_000_000)
    changes = diff(base, new, include_idle=True)
    assert changes[0].name == "Application requested delay" and "app" in {c.name for c in changes}
    assert not [c for c in changes if c.name in ("stallscope", "Reading from a pipe")]
    assert "stallscope" not in differential_folded(base, new) and "app;" in differential_folded(base, new)


def test_differential_folded_has_both_runs_per_second_on_one_line():
    base = _model(2, (SLEEP, 100, 1 * SEC))
    new = _model(1, (SLEEP, 50, 1 * SEC), (PIPE, 10, 200_000_000))
    lines = dict(line.rsplit(" ", 2)[0:1] + [line.rsplit(" ", 2)[1:]] for line in
                 differential_folded(base, new).splitlines())
    sleep = next(v for k, v in lines.items() if "do_nanosleep" in k)
    pipe = next(v for k, v in lines.items() if "anon_pipe_read" in k)
    assert sleep == ["500000000", "1000000000"] and pipe == ["0", "200000000"]


@needs_bpf
def test_diff_of_an_example_against_itself_with_an_injected_fsync_ranks_fsync_first(tmp_path):
    """The same sleeper twice; the second run also writes a file with O_DSYNC (dd oflag=dsync):
    its fsync waits are the injected blocker, and the sleeper's own causes do not move enough to lead."""
    sleeper = [example("sleeper"), "-n", "20", "-m", "10"]
    base_dir, new_dir = tmp_path / "base", tmp_path / "new"
    base_dir.mkdir()
    new_dir.mkdir()
    # every stack walked: the test is about ranking changes, not about sampling stacks
    _, _, base = record_command(base_dir, sleeper, *ALL_STACKS)
    target = new_dir / "dsync.out"
    script = (f"{' '.join(sleeper)} & dd if=/dev/zero of={target} bs=4k count=1000 oflag=dsync status=none; wait")
    _, _, new = record_command(new_dir, ["sh", "-c", script], *ALL_STACKS)
    doc = json.loads(run_stallscope("diff", str(base), str(new), "--command-only", "--format", "json").stdout)
    # "Waiting for CPU" grows too when the machine is busy with other work (two more runnable tasks
    # here): it is a real change of the run, and the only one allowed ahead of the injected cause
    causes = [c for c in doc["changes"] if c["kind"] == "cause" and c["name"] != "Waiting for CPU"]
    assert causes[0]["name"] in ("fsync() on a file", "Waiting for I/O") and causes[0]["significant"], causes[:3]
    assert causes[0]["base_ns_per_s"] == 0
    leading = [c["name"] for c in doc["changes"] if c["name"] != "Waiting for CPU"][:2]
    assert causes[0]["name"] in leading or "dd" in leading
    text = run_stallscope("diff", str(base), str(new), "--command-only").stdout
    assert text.splitlines()[3].split()[0] in ("cause", "task")


def _futex_model(*futexes: tuple) -> Model:
    """One second of waits on futexes, each (word address, caller, lock name, total ns): a mutex's waits."""
    from stallscope.analyzer.sample import FutexDelta

    info = TaskInfo(APP, 10, 1, "app")
    iv = interval(0, task_info=(info,), tasks=(TaskDelta(APP, offcpu_ns=sum(f[3] for f in futexes)),),
                  futex=tuple(FutexDelta(APP, 10, addr, 0, 0, 0x401234 if caller else 0, caller, name, 100, ns,
                                         ns // 50, ns // 200, flags=2, blocked_ns=ns, runnable_ns=0)
                              for addr, caller, name, ns in futexes))
    return Model.from_intervals(meta(), [iv], {APP: info}, {})


def test_futexes_are_compared_by_their_call_site_not_their_address_which_differs_run_to_run():
    """sysbench's threads test with four locks, then with one: each run's words at other addresses (its heap,
    under ASLR), all taken at one place. The diff has one row for that place, its wait grown, not four gone and
    one new; a futex named (a lock variable's symbol) keeps its name."""
    base = _futex_model((0x5591AEBB9D50, "[app+0x1a422]", "", 30_000_000), (0x5591AEBB9D78, "[app+0x1a422]", "", 40_000_000),
                        (0x5591AEBB9DA0, "[app+0x1a422]", "", 20_000_000), (0x601000, "take+0x30", "big_lock", 5_000_000))
    new = _futex_model((0x561A6841FD50, "[app+0x1a422]", "", 900_000_000), (0x602000, "take+0x30", "big_lock", 5_000_000))
    locks = {c.name: c for c in diff(base, new) if c.kind == "lock"}
    assert set(locks) == {"futex of app at [app+0x1a422] [futex:mutex]", "big_lock [futex:mutex]"}, set(locks)
    site = locks["futex of app at [app+0x1a422] [futex:mutex]"]
    assert (round(site.base_ns_per_s), round(site.new_ns_per_s), site.base_count, site.new_count) == (
        90_000_000, 900_000_000, 300, 100) and site.significant
    assert not locks["big_lock [futex:mutex]"].significant
