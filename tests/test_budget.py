"""The overhead budget: over it, the probes do less of what is optional (fewer waits drawn for a stack
walk, fewer user stacks, less sampling), one stated step at a time; the per-task totals stay exact
whatever is drawn, and no wait is left out for being short."""

from __future__ import annotations

import pytest

from conftest import STALLSCOPE, example, needs_bpf, run_stallscope
from stallscope.analyzer.overhead import MAX_LEVEL, MIN_WALKS_PER_S, Cost, Governor, levels_down, tuning_at
from stallscope.analyzer.sample import ProgramCost, Tuning
from stallscope.bpf.collector import SchedOptions

START = Tuning(0, 1000, 0, 99, 1_000_000, 100)


def _cost(pct: float, cpus: int = 2) -> Cost:
    """An interval of 1 s costing `pct` of `cpus` CPUs, all of it BPF run time."""
    return Cost(1.0, cpus, int(pct / 100 * cpus * 1e9), 0, 0)


def _collector_cost(pct: float, cpus: int = 2) -> Cost:
    """An interval of 1 s costing `pct` of `cpus` CPUs, all of it the collector's (start-up)."""
    return Cost(1.0, cpus, 0, 0, int(pct / 100 * cpus * 1e9))


def test_each_level_does_less_and_never_less_than_its_floor():
    """Each level draws waits with a T ten times larger: fewer walks, every wait still eligible, so
    nothing is left out for being short (the user's minimum wait and walk cap are never changed)."""
    levels = [tuning_at(START, n) for n in range(MAX_LEVEL + 1)]
    assert levels[0] == START
    for a, b in zip(levels, levels[1:]):
        assert b.level == a.level + 1
        assert b.sample_ns == 10 * a.sample_ns and b.user_walks_per_s <= a.user_walks_per_s
        assert b.sample_hz <= a.sample_hz
        assert (b.walks_per_s, b.min_stack_ns) == (START.walks_per_s, START.min_stack_ns)
    assert levels[-1].user_walks_per_s == MIN_WALKS_PER_S and levels[-1].sample_hz >= 9
    assert tuning_at(START, MAX_LEVEL + 3) == levels[-1]
    # what the user asked for is never exceeded: a low rate is not raised, a long T not shortened
    mine = Tuning(0, 5, 50_000_000, 7, 20_000_000_000, 3)
    for n in range(1, MAX_LEVEL + 1):
        t = tuning_at(mine, n)
        assert t.user_walks_per_s <= 3 and t.min_stack_ns == 50_000_000 and t.sample_hz <= 7
        assert t.sample_ns >= 20_000_000_000
    # "every wait" and "no limit" step to a limit
    assert tuning_at(Tuning(0, 0, 0, 99, 0, 0), 1).sample_ns > 0
    assert tuning_at(Tuning(0, 0, 0, 99, 0, 0), 1).user_walks_per_s > 0


def test_over_budget_lowers_the_stack_walks_and_says_why():
    gov = Governor(START, budget_pct=1.0)
    assert gov.observe(0, _collector_cost(30.0)) is None  # the first interval holds the collector's start-up
    assert gov.observe(1, _collector_cost(10.0)) is None  # the second pays for storing or showing what it found
    change = gov.observe(2, _cost(2.5))
    assert change is not None and change.interval == 2
    assert change.to.level == 1 and change.to.sample_ns == 10 * START.sample_ns
    assert "2.50%" in change.reason and "over the 1% budget" in change.reason
    assert "p = min(1, d/10 ms)" in change.to.describe() and "user stacks 25/s per CPU" in change.to.describe()
    assert gov.observe(3, _cost(0.9)) is None  # under budget, not yet calm: stays
    assert gov.current.level == 1


def test_at_the_lowest_level_it_says_so_once():
    gov = Governor(START, budget_pct=1.0, warmup=0)
    steps = [gov.observe(i, _cost(3.0)) for i in range(MAX_LEVEL + 3)]
    assert [s.to.level for s in steps[:MAX_LEVEL]] == list(range(1, MAX_LEVEL + 1))
    floor = steps[MAX_LEVEL]
    assert floor is not None and floor.to.level == MAX_LEVEL and "lowest setting" in floor.reason
    assert steps[MAX_LEVEL + 1:] == [None, None]


def test_the_step_is_sized_to_the_overshoot():
    """One level per factor of 4 over the budget (each level walks a quarter as many stacks): a cost far
    over it reaches the lowest setting in one interval rather than one level an interval."""
    assert [levels_down(pct, 1.0) for pct in (1.01, 4.0, 4.1, 16.0, 16.5, 64.0, 65.0)] == [1, 1, 2, 2, 3, 3, 4]
    assert levels_down(0.5, 1.0) == 1
    gov = Governor(START, budget_pct=1.0, warmup=0)
    change = gov.observe(0, _cost(12.0))  # what the default set cost under a hackbench loop
    assert change.to == tuning_at(START, 2)
    assert "12.0 times it: 2 levels down" in change.reason
    change = gov.observe(1, _cost(1000.0))  # never past the lowest level
    assert change.to.level == MAX_LEVEL and "2 levels down" in change.reason
    assert "lowest setting" in gov.observe(2, _cost(1000.0)).reason
    # back up one level at a time, as before
    calm = Governor(START, budget_pct=1.0, warmup=0, recover_after=1)
    calm.observe(0, _cost(100.0))
    assert calm.current.level == MAX_LEVEL
    assert calm.observe(1, _cost(0.1)).to.level == MAX_LEVEL - 1


def test_calm_intervals_step_back_up_and_a_see_saw_backs_off():
    gov = Governor(START, budget_pct=1.0, warmup=0, recover_after=3)
    gov.observe(0, _cost(2.0))
    assert gov.current.level == 1
    assert [gov.observe(i, _cost(0.2)) for i in (1, 2)] == [None, None]
    up = gov.observe(3, _cost(0.2))
    assert up is not None and up.to.level == 0 and "half" in up.reason
    # over again right after the step up: down again, and the next step up waits twice as long
    gov.observe(4, _cost(2.0))
    assert gov.current.level == 1 and gov.recover_after == 6
    assert all(gov.observe(i, _cost(0.2)) is None for i in range(5, 10))
    assert gov.observe(10, _cost(0.2)).to.level == 0
    # between half the budget and the budget: no change either way
    gov2 = Governor(START, budget_pct=1.0, warmup=0, recover_after=1)
    gov2.observe(0, _cost(2.0))
    assert all(gov2.observe(i, _cost(0.7)) is None for i in range(1, 20)) and gov2.current.level == 1


def test_past_the_last_level_the_lock_call_uprobes_go_when_their_traps_are_what_costs():
    """At the lowest setting and still over the budget, with the uprobes' traps (measured per hit,
    in no program's statistics) at least half the budget: they are removed, said once, and stay
    removed at every later step; then what remains is the floor."""
    gov = Governor(START, budget_pct=1.0, warmup=0)
    for i in range(MAX_LEVEL):
        gov.observe(i, _cost(50.0))
    assert gov.current.level == MAX_LEVEL and gov.current.lock_calls
    traps = Cost(1.0, 2, int(0.03 * 2e9), 0, 0, int(0.05 * 2e9))  # BPF 3%, traps 5% of 2 CPUs
    change = gov.observe(10, traps)
    assert change is not None and not change.to.lock_calls and change.to.level == MAX_LEVEL
    assert "uprobes' traps" in change.reason and "5.00%" in change.reason, change.reason
    assert "lock-call uprobes removed" in change.to.describe()
    floor = gov.observe(11, _cost(3.0))
    assert floor is not None and "per-event work" in floor.reason and not floor.to.lock_calls
    for i in range(12, 40):  # calm: back up, the uprobes still off
        gov.observe(i, _cost(0.1))
    assert gov.current.level < MAX_LEVEL and not gov.current.lock_calls
    # traps under half the budget: the uprobes stay, the floor is said
    keep = Governor(tuning_at(START, MAX_LEVEL), budget_pct=1.0, warmup=0)
    keep.start = START
    change = keep.observe(0, Cost(1.0, 2, int(0.03 * 2e9), 0, 0, int(0.004 * 2e9)))
    assert change is not None and change.to.lock_calls and "per-event work" in change.reason


def test_uprobe_hits_are_charged_at_the_measured_trap_cost():
    from dataclasses import replace

    from stallscope.analyzer.overhead import DEFAULT_UPROBE_TRAP_NS, interval_cost, uprobe_trap_ns
    from synthetic import interval, meta

    iv = interval(0, programs=(ProgramCost("sched_switch", 1000, 200_000, 0), ProgramCost("lock_call", 100, 20_000, 0)))
    cost = interval_cost(iv, 2, 9_000)
    assert cost.trap_ns == 900_000 and cost.dispatch_ns == 1100 * 40 and cost.bpf_ns == 220_000
    assert cost.total_pct == cost.pct(220_000 + 1100 * 40 + 900_000 + iv.collector_cpu_ns)
    m = meta()
    assert uprobe_trap_ns(m) == DEFAULT_UPROBE_TRAP_NS  # a recording without the measurement
    assert uprobe_trap_ns(replace(m, options={**m.options, "futex": {"uprobe_trap_ns": 9000}})) == 9000


def test_a_zero_budget_never_changes_anything():
    gov = Governor(START, budget_pct=0.0, warmup=0)
    assert all(gov.observe(i, _cost(50.0)) is None for i in range(10))


def _assert_causes_add_up(task: dict) -> None:
    """The causes hold the task's whole wait: its stacks, sampled or not, never lose a wait. A wait
    whose switch-in falls between the last drain's read of the totals and of the per-stack map is
    in the totals only: at most one of the task's waits."""
    causes = sum(c["total_ns"] for c in task["causes"])
    total = task["offcpu_ns"] + task["runq_wait_ns"]
    assert total - max(task["offcpu_max_ns"], task["runq_max_ns"]) <= causes <= total, (causes, total)


@needs_bpf
def test_a_running_collector_takes_the_new_settings():
    """The step reaches the loaded programs: their .data holds the new knobs (read back from the
    mapped section), and the stack-walk budget they keep honours it."""
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf import tune
    from stallscope.bpf.collector import SchedCollector, SchedOptions

    c = SchedCollector(SchedOptions(stack_tune=tune.StackTune(1000, 0, 1_000_000, 100)), Symbolizer())
    c.start()
    try:
        assert tune.read(c.obj) == tune.StackTune(1000, 0, 1_000_000, 100)
        c.retune(Tuning(3, 15, 0, 12, 1_000_000_000, 2))
        assert tune.read(c.obj) == tune.StackTune(15, 0, 1_000_000_000, 2)
        c.drain()
        import time
        time.sleep(1.0)
        iv = c.drain()
        # at 15 walks a second per CPU, and waits drawn with p = d / 1 s, nearly every wait of a running
        # system is left undrawn (the dump may walk a few waits still going on after 1 s)
        sampled = sum(o.count for o in iv.offcpu if o.kstack >= 16)
        total = sum(o.count for o in iv.offcpu)
        assert total > 0 and sampled <= 15 * 2 * c.nr_cpus + 1, (sampled, total)
    finally:
        c.close()


@needs_bpf
def test_over_budget_recording_states_each_step_and_keeps_exact_totals(tmp_path):
    """A budget no recording can keep: the first interval steps straight down to the lowest level
    (the probes' own cost is thousands of times the budget; the collector's start-up is not judged),
    the step is in the recording with its reason, and the threads' totals still match what they
    measured themselves."""
    import json
    import subprocess

    out = tmp_path / "run.stall"
    truth_file = tmp_path / "truth.jsonl"
    with open(truth_file, "w") as stdout:
        proc = subprocess.run([STALLSCOPE, "record", "-o", str(out), "-i", "0.2", "--overhead-budget", "0.0001",
                               "--", example("sleeper"), "-n", "250", "-m", "15"],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "overhead budget: the probes' cost" in proc.stderr and "over the 0.0001% budget" in proc.stderr
    doc = json.loads(run_stallscope("export", str(out)).stdout)
    changes = doc["meta"]["overhead"]["changes"]
    assert changes, doc["meta"]["overhead"]
    assert changes[0]["level"] == MAX_LEVEL and f"{MAX_LEVEL} levels down" in changes[0]["reason"]
    t0 = SchedOptions().stack_tune
    lowest = tuning_at(Tuning(0, t0.walks_per_s, 0, 99, t0.sample_ns, t0.user_walks_per_s), MAX_LEVEL)
    assert changes[0]["stack_scale_ns"] == lowest.sample_ns and changes[0]["after_interval"] == 0
    assert changes[0]["user_stack_walks_per_s"] == lowest.user_walks_per_s
    assert "collector not judged" in changes[0]["reason"]
    assert changes[0]["min_stack_ns"] == 0  # short waits are never left out
    assert all("budget" in c["reason"] for c in changes)
    # the totals: every wait still counted, whatever its stack became
    truth = [json.loads(line) for line in truth_file.read_text().splitlines() if line.startswith("{")]
    t = next(x for x in truth if x["role"] == "sleeper")
    ours = next(x for x in doc["tasks"] if x["pid"] == t["tid"] and x.get("in_command"))
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    # Drained every 0.2 s, 1 to 3 of the 250 wakeups are sometimes not seen: no sched_waking program
    # ran for them, and no recursion miss was counted. Seen with the scheduler probes' earlier hash-map
    # design too (drains every 0.05 s: 248 of 250); the cause is not found. One more is the first wait.
    assert blocks - 4 <= ours["offcpu_count"] <= blocks, (blocks, ours, doc["meta"].get("health"))
    assert ours["offcpu_ns"] <= t["blocked_ns"] * 1.02
    assert ours["offcpu_ns"] >= 0.8 * t["blocked_ns"]
    _assert_causes_add_up(ours)


@needs_bpf
@pytest.mark.parametrize("scale", ["1s", "0"])
def test_sampled_stacks_keep_the_totals(tmp_path, scale):
    """Waits of 10 ms drawn with p = 1/100, or every wait walked: the same exact totals, and the
    causes add up to them either way."""
    from conftest import record_command

    from stallscope.analyzer.sample import STACK_ID_MIN
    from stallscope.analyzer.store import Recording

    doc, truth, path = record_command(tmp_path, [example("sleeper"), "-n", "80", "-m", "10"], "--stack-scale", scale)
    t = next(x for x in truth if x["role"] == "sleeper")
    ours = next(x for x in doc["tasks"] if x["pid"] == t["tid"] and x.get("in_command"))
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    assert blocks - 1 <= ours["offcpu_count"] <= blocks
    assert 0.8 * t["blocked_ns"] <= ours["offcpu_ns"] <= t["blocked_ns"] * 1.02
    _assert_causes_add_up(ours)
    # the sleeper's own waits walked for a stack (the health counter `waits_drawn` is the whole machine's: a busy
    # machine's other threads' long waits are drawn too)
    rec = Recording(str(path))
    try:
        walked = sum(o.count for iv in rec.intervals() for o in iv.offcpu
                     if o.task.pid == t["tid"] and o.kstack >= STACK_ID_MIN)
    finally:
        rec.close()
    if scale == "1s":
        assert walked < ours["offcpu_count"] / 4, (walked, ours["offcpu_count"])
    else:
        assert walked >= ours["offcpu_count"] - 2, (walked, ours["offcpu_count"])


@needs_bpf
def test_a_lower_sampling_rate_keeps_the_cpu_time_counted():
    """The on-CPU events are reopened at the new rate: the time they count carries over, and the
    samples come at about the new rate."""
    import time

    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.oncpu_collector import OncpuCollector

    c = OncpuCollector(Symbolizer(), sample_hz=99)
    assert c.start().enabled
    try:
        time.sleep(0.3)
        before = {cpu: c._event_ns(cpu) for cpu in c.cpus}
        c.drain(set())
        c.retune(Tuning(2, 62, 10_000_000, 49))
        assert c.sample_hz == 49
        # a drain reads the CPUs' counts first, then names the stacks (in a long test session, 0.3 s of files to
        # read): what the old events sampled until the retune is read here, and the time is counted from this read
        t0 = time.monotonic()
        c.drain(set())
        time.sleep(1.0)
        after = {cpu: c._event_ns(cpu) for cpu in c.cpus}
        assert all(after[cpu] >= before[cpu] for cpu in c.cpus), (before, after)
        elapsed = time.monotonic() - t0
        d = c.drain(set())
        samples = sum(x.samples for x in d.records.get("oncpu_cpus", ()))
        # 49 Hz on each CPU for the time between the drains, not 99
        assert 0 < samples <= 49 * 1.2 * elapsed * len(c.cpus) + 4 < 99 * elapsed * len(c.cpus), (samples, elapsed)
    finally:
        c.close()


def test_the_probes_own_cost_is_judged_from_the_first_interval():
    """A busy machine's short command must not run at the full walk rate while the collector warms up:
    in the start-up intervals the probes' cost alone is judged, and only to step down."""
    gov = Governor(START, budget_pct=1.0)
    startup = Cost(1.0, 2, int(0.026 * 2e9), 1000 * 40, int(0.4e9))  # BPF 2.6% + the collector's start-up
    change = gov.observe(0, startup)
    assert change is not None and change.to.level == 1, change
    assert "probes' cost" in change.reason and "2.60%" in change.reason and "collector not judged" in change.reason
    assert gov.observe(1, Cost(1.0, 2, int(0.004 * 2e9), 0, int(0.3e9))) is None  # probes under it: no verdict
    assert gov.current.level == 1
    # start-up intervals under the budget never count towards a step back up
    calm = Governor(START, budget_pct=1.0, recover_after=1)
    calm.observe(0, _cost(3.0))
    assert calm.observe(1, _cost(0.1)) is None and calm.current.level == 1
    assert calm.observe(2, _cost(0.1)).to.level == 0


def test_top_says_its_start_up_intervals_are_over_the_budget_but_not_judged():
    import io

    from stallscope.tui.text import LiveText
    from synthetic import interval, two_interval_recording

    m, _ = two_interval_recording()
    view = LiveText(out=io.StringIO())
    view.start(m)
    costly = (ProgramCost("sched_switch", 1000, 500_000_000, 0),)  # 25% of 2 CPUs for 1 s
    for i in range(3):
        view.update(interval(i, programs=costly))
    heads = [line for line in view.out.getvalue().splitlines() if line.startswith("stallscope top")]
    assert ["OVER: start-up, collector not judged" in h for h in heads] == [True, True, False], heads
    assert "OVER)" in heads[2]


@needs_bpf
def test_the_walk_budget_is_kept_for_the_traced_tasks(tmp_path):
    """stallscope's own waits (loading the probes, reading /proc, writing the recording) and lock
    contentions are counted like any other task's, but get no stack walk and no waker entry: before, its start-up alone spent
    most of a quiet machine's walks in the first second. The traced command's waits still get stacks."""
    from conftest import record_command
    from stallscope.analyzer.store import Recording
    from stallscope.bpf import abi

    doc, truth, path = record_command(tmp_path, [example("sleeper"), "-n", "40", "-m", "10"])
    own = doc["meta"]["options"]["stallscope_pid"]
    rec = Recording(str(path))
    try:
        tasks = rec.tasks()
        intervals = list(rec.intervals())
    finally:
        rec.close()
    ours = [o for iv in intervals for o in iv.offcpu if o.tgid == own]
    assert sum(o.count for o in ours) > 0
    assert {o.kstack for o in ours} == {abi.STACK_OWN}, {o.kstack for o in ours}
    assert {o.ustack for o in ours} == {abi.STACK_OWN}, {o.ustack for o in ours}
    assert not [w for iv in intervals for w in iv.wakers if tasks[w.task].tgid == own]
    # its threads' futex waits (the interpreter's lock) and kernel lock contentions likewise
    assert {f.ustack for iv in intervals for f in iv.futex if f.tgid == own} <= {abi.STACK_OWN}
    assert {w.kstack for iv in intervals for w in iv.locks if w.tgid == own} <= {abi.STACK_OWN}
    own_task = next(t for t in doc["tasks"] if t["tgid"] == own and t["pid"] == own)
    assert own_task["offcpu_count"] > 0 and own_task["stallscope"] is True
    # named by what it was doing, never ranked among the machine's blockers
    assert own_task["causes"] and not [b for b in doc["blockers"] for x in b["tasks"] if x["pid"] == own]
    # the command's sleeps keep their stacks and their waker
    sleeper = next(x for x in truth if x["role"] == "sleeper")
    t = next(x for x in doc["tasks"] if x["pid"] == sleeper["tid"] and x.get("in_command"))
    assert t["causes"][0]["cause"] == "Application requested delay", t["causes"]
    assert t["wakers"], t
