"""On-CPU sampling against the sampled threads' own schedstat run time, and the
profile views on synthetic samples with known answers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import replace

import pytest

from conftest import example, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.export import to_folded_oncpu, to_json_doc
from stallscope.analyzer.load import load_model
from stallscope.analyzer.model import Model
from stallscope.analyzer.oncpu import category_share, sample_categories, task_oncpu, top_functions
from stallscope.analyzer.sample import CpuSamplesDelta, OncpuDelta, ProbeStatus, Stack, TaskId, TaskInfo
from stallscope.analyzer.sample import Frame
from synthetic import SEC, interval, kstack, meta, write_recording

PERIOD_99HZ_NS = 1_000_000_000 // 99  # cpu-clock turns the frequency into a fixed period


def _burner_run(tmp_path, *extra):
    doc, truth, path = record_command(tmp_path, [example("cpu_burner"), "-t", "2", "-m", "1500"], *extra)
    model = load_model(str(path))
    return doc, truth, model


@pytest.fixture(scope="module")
def burner_run(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    return _burner_run(tmp_path_factory.mktemp("burner"))


def _thread_samples(model: Model, tid: int) -> tuple[int, int]:
    rows = [t for t in task_oncpu(model) if t.task.pid == tid]
    return (rows[0].samples, rows[0].oncpu_ns) if rows else (0, 0)


def _check_burners_against_schedstat(model: Model, truth: list[dict], period_ns: int) -> list[str]:
    """Each burner's samples x period within 15% of its schedstat run time; returns the figures."""
    figures = []
    for t in truth:
        if not t["role"].startswith("burn_"):
            continue
        run_ns = t["end"]["run_ns"] - t["start"]["run_ns"]
        samples, oncpu_ns = _thread_samples(model, t["tid"])
        assert samples >= 100, f"{t['role']}: {samples} samples are too few to compare"
        assert oncpu_ns == samples * period_ns
        assert abs(oncpu_ns - run_ns) <= 0.15 * run_ns, f"{t['role']}: sampled {oncpu_ns} ns, schedstat {run_ns} ns"
        figures.append(f"{t['role']}: {samples} samples, {oncpu_ns / 1e6:.0f} ms vs {run_ns / 1e6:.0f} ms")
    assert len(figures) == 2
    return figures


@needs_bpf
def test_each_burners_sampled_time_matches_its_schedstat_run_time(burner_run):
    doc, truth, model = burner_run
    assert doc["meta"]["probes"]["oncpu"] == {"enabled": True, "mechanism": "perf_event", "reason": ""}
    assert doc["oncpu"]["sample_hz"] == 99 and doc["oncpu"]["period_ns"] == PERIOD_99HZ_NS
    _check_burners_against_schedstat(model, truth, PERIOD_99HZ_NS)


@needs_bpf
def test_the_sleeping_thread_is_almost_never_on_cpu(burner_run):
    _, truth, model = burner_run
    idler = next(t for t in truth if t["role"] == "idler")
    run_ns = idler["end"]["run_ns"] - idler["start"]["run_ns"]
    samples, _ = _thread_samples(model, idler["tid"])
    # it runs for microseconds every 50 ms: a sample lands on it with probability run time / period
    assert samples <= 2 + 2 * run_ns // PERIOD_99HZ_NS


@needs_bpf
def test_each_burners_top_self_function_is_the_one_it_burns_in(burner_run):
    _, truth, model = burner_run
    for t in truth:
        if t["role"].startswith("burn_"):
            top = top_functions(model, "self", pid=t["tid"], limit=1)[0]
            assert (top.function, top.kind) == (t["role"], "user")
            assert top.self_pct > 80


@needs_bpf
def test_samples_add_up_to_the_time_each_cpu_event_counted(burner_run):
    """The periods of the samples taken on a CPU add up to the time its cpu-clock event counted, and
    what falls short is reported. The tolerance is the schedstat comparison's: on these VMs a CPU
    sometimes takes its timer interrupts late and the hrtimer skips the overrun periods; `perf record
    -e cpu-clock -F 99 -a` then loses samples on that CPU just the same."""
    doc, _, model = burner_run
    cpus = model.oncpu_cpus
    assert set(cpus) == set(range(len(cpus))) and len(cpus) == (os.cpu_count() or 1)
    sampled = sum(c.period_ns for c in cpus.values())
    counted = sum(c.event_ns for c in cpus.values())
    assert sum(c.samples for c in cpus.values()) == doc["oncpu"]["samples"]
    assert sampled <= counted + len(cpus) * PERIOD_99HZ_NS
    # 15-17% short in several runs of 2026-11-23 on this VM (cause not yet found; the shortfall is
    # reported as missed samples): 20% still catches a program that drops samples wholesale
    assert counted - sampled <= 0.20 * counted
    # missed_samples is the same comparison in periods, per CPU
    short = sum(max(0, (c.event_ns - c.period_ns) // PERIOD_99HZ_NS) for c in cpus.values())
    assert doc["oncpu"]["missed_samples"] == short
    # the events start after the scheduler probes (the first interval's start) and are read before
    # each interval ends: they count at most the recording's wall time on each CPU
    assert counted <= len(cpus) * model.duration_s * 1e9


@needs_bpf
def test_sample_hz_sets_the_period_and_the_times_stay_right(tmp_path):
    doc, truth, model = _burner_run(tmp_path, "--sample-hz", "199")
    period = 1_000_000_000 // 199
    assert doc["oncpu"]["sample_hz"] == 199 and doc["oncpu"]["period_ns"] == period
    assert doc["meta"]["options"]["sample_hz"] == 199
    _check_burners_against_schedstat(model, truth, period)


@needs_bpf
def test_a_rate_above_the_kernels_limit_turns_the_group_off_with_the_reason(tmp_path):
    limit = int(open("/proc/sys/kernel/perf_event_max_sample_rate").read())
    doc, _, _ = record_command(tmp_path, [example("sleeper"), "-n", "2", "-m", "5"], "--sample-hz", str(limit + 1))
    probe = doc["meta"]["probes"]["oncpu"]
    assert probe["enabled"] is False and "perf_event_max_sample_rate" in probe["reason"]
    assert doc["oncpu"]["samples"] == 0 and doc["oncpu"]["functions"] == []
    proc = run_stallscope("profile", str(tmp_path / "run.stall"), check=False)
    assert proc.returncode == 2 and "no on-CPU samples" in proc.stderr and "Traceback" not in proc.stderr


@needs_bpf
def test_pid_filter_keeps_only_that_processes_samples(tmp_path):
    burner = subprocess.Popen([example("cpu_burner"), "-t", "1", "-m", "3000"], stdout=subprocess.DEVNULL)
    # another process on the other CPU, outside the filter: on a quiet machine little else runs, and the
    # CPU totals had exceeded the burner's samples by 0-9 samples of ~150
    other = subprocess.Popen([example("cpu_burner"), "-t", "1", "-m", "3000"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        out = tmp_path / "p.stall"
        run_stallscope("record", "-o", str(out), "-p", str(burner.pid), "-d", "1.5s")
    finally:
        for p in (burner, other):
            p.kill()
            p.wait()
    doc = json.loads(run_stallscope("export", str(out)).stdout)
    # how much CPU the burner gets depends on the machine's load; that it is sampled, and alone, does not
    assert doc["oncpu"]["tasks"] and {t["tgid"] for t in doc["oncpu"]["tasks"]} == {burner.pid}
    # the rest of the system, the other burner, was sampled (the CPU totals) but kept in no task
    busy = doc["oncpu"]["samples"] - doc["oncpu"]["idle_samples"]
    assert busy > 1.5 * sum(t["samples"] for t in doc["oncpu"]["tasks"])


@needs_bpf
def test_stopping_closes_every_perf_event():
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.oncpu_collector import OncpuCollector

    def perf_fds() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += "perf_event" in os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return n

    before = perf_fds()
    c = OncpuCollector(Symbolizer(), targ_tgid=os.getpid())
    assert c.start().enabled
    assert perf_fds() == before + len(c.cpus)
    end = time.thread_time_ns() + 300_000_000
    while time.thread_time_ns() < end:  # burn 300 ms of our own CPU time: ~30 samples
        pass
    d = c.drain(set())
    c.close()
    assert perf_fds() == before
    assert sum(o.samples for o in d.records["oncpu"]) >= 15
    assert {o.tgid for o in d.records["oncpu"]} == {os.getpid()}


@needs_bpf
def test_folded_oncpu_export_counts_every_sample(burner_run, tmp_path):
    doc, truth, model = burner_run
    tgid = truth[0]["tgid"]
    text = to_folded_oncpu(model, {t for t in model.tasks if model.tasks[t].info.tgid == tgid})
    lines = [line.rsplit(" ", 1) for line in text.splitlines()]
    assert sum(int(n) for _, n in lines) == sum(t["samples"] for t in doc["oncpu"]["tasks"] if t["tgid"] == tgid)
    assert any(stack.startswith("burner;") and "burn_alpha" in stack for stack, _ in lines)


def _perf_script_samples(perf: str, data, comm: str) -> list[list[str]]:
    """The kernel frames (innermost first) of each sample of `comm` that `perf record -g` took."""
    text = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,tid,ip,sym"], capture_output=True,
                          text=True, check=True).stdout
    samples, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            cur = None
        elif not line.startswith("\t"):
            cur = [] if line.rsplit(None, 1)[0].strip() == comm else None
            if cur is not None:
                samples.append(cur)
        elif cur is not None:
            addr, _, sym = line.strip().partition(" ")
            if int(addr, 16) >= 1 << 63:  # the kernel half
                cur.append(sym.strip())
    return samples


@needs_bpf
def test_lock_and_slab_shares_agree_with_perf_record_on_the_same_run(tmp_path, perf_available):
    """perf samples hackbench with its own cpu-clock events beside ours, at the same frequency; the
    same classification over its callchains gives the same shares, within sampling noise. The two
    samplers fire at different instants, so the shares are two independent estimates: with ~2,000
    samples each and a share of 2-6%, their difference has a standard deviation of 0.5-0.7 points
    (measured: differences up to 1.1 points in 6 runs, both signs). Allowed: 4 of them."""
    data = tmp_path / "perf.data"
    doc, _, path = record_command(tmp_path, [perf_available, "record", "-q", "-e", "cpu-clock", "-F", "999", "-g",
                                             "-a", "-o", str(data), "--", perf_available, "bench", "sched",
                                             "messaging", "-l", "400"], "--sample-hz", "999")
    model = load_model(str(path))
    ours = [s for s in model.oncpu if s.comm == "sched-messaging"]
    theirs = _perf_script_samples(perf_available, data, "sched-messaging")
    n_ours = sum(s.samples for s in ours)
    assert len(theirs) > 2000
    assert abs(n_ours - len(theirs)) <= 0.05 * len(theirs)
    from stallscope.analyzer.oncpu import CATEGORIES, base_name

    def perf_categories(frames: list[str]) -> set[str]:
        found: set[str] = set()
        for name in frames:
            cats = {c for c, names in CATEGORIES.items() if base_name(name) in names}
            if not cats:
                break
            found |= cats
        return found

    for cat in CATEGORIES:
        perf_pct = 100 * sum(cat in perf_categories(f) for f in theirs) / len(theirs)
        ours_pct = 100 * sum(s.samples for s in ours if cat in sample_categories(s)) / n_ours
        assert perf_pct > 0.3, f"hackbench should show {cat}"
        p = (ours_pct * n_ours + perf_pct * len(theirs)) / 100 / (n_ours + len(theirs))
        sd_pct = 100 * math.sqrt(p * (1 - p) * (1 / n_ours + 1 / len(theirs)))
        assert abs(ours_pct - perf_pct) <= 4 * sd_pct, f"{cat}: ours {ours_pct:.2f}%, perf {perf_pct:.2f}% (sd {sd_pct:.2f})"


# ---- synthetic samples: exact answers ---------------------------------------------------------

A = TaskId(200, 7 * SEC)
B = TaskId(201, 8 * SEC)
SPIN = kstack(0x5000, "native_queued_spin_lock_slowpath", "_raw_spin_lock_irqsave", "get_partial_node",
              "___slab_alloc", "__slab_alloc.isra.0", "kmem_cache_alloc_noprof", "do_syscall_64")
SLAB = kstack(0x5001, "get_partial_node.cold", "___slab_alloc", "kmem_cache_alloc_noprof", "do_syscall_64")
MEMSET = kstack(0x5002, "memset_orig", "allocate_slab", "___slab_alloc", "kmem_cache_alloc_noprof")
RQ_SPIN = kstack(0x5003, "_raw_spin_lock", "try_to_wake_up", "do_syscall_64")


def _uframe(name: str) -> Frame:
    return Frame(0x401000 + len(name), name, 0x10, "/usr/bin/app", None, 0x1000, "user")


USTACK = Stack(0x6000, "user", (_uframe("work"), _uframe("main"), _uframe("__libc_start_call_main")))
P = PERIOD_99HZ_NS


def _synthetic_model() -> Model:
    m = meta(sample_hz=99)
    m = replace(m, probes={**m.probes, "oncpu": ProbeStatus(True, "perf_event")})
    iv0 = interval(0, task_info=(TaskInfo(A, 200, 1, "app"), TaskInfo(B, 201, 1, "other")),
                   stacks=(SPIN, SLAB, MEMSET, RQ_SPIN, USTACK), oncpu=(
        OncpuDelta(A, 200, "app", SPIN.id, USTACK.id, 30, 30 * P),
        OncpuDelta(A, 200, "app", SLAB.id, USTACK.id, 10, 10 * P),
        OncpuDelta(A, 200, "app", 4, USTACK.id, 40, 40 * P),  # user mode
        OncpuDelta(B, 201, "other", MEMSET.id, 0, 15, 15 * P),
    ), oncpu_cpus=(CpuSamplesDelta(0, 120, 120 * P, 20, 20 * P, 120 * P + 5),
                   CpuSamplesDelta(1, 80, 80 * P, 75, 75 * P, 80 * P)))
    iv1 = interval(1, oncpu=(OncpuDelta(B, 201, "other", RQ_SPIN.id, 0, 5, 5 * P),
                             OncpuDelta(A, 200, "app", 4, USTACK.id, 20, 20 * P)))
    return Model.from_intervals(m, [iv0, iv1], {A: TaskInfo(A, 200, 1, "app"), B: TaskInfo(B, 201, 1, "other")},
                                {s.id: s for s in (SPIN, SLAB, MEMSET, RQ_SPIN, USTACK)})


def test_a_sample_counts_for_the_categories_of_its_innermost_kernel_frames():
    model = _synthetic_model()
    cats = {s.kstack_id: sample_categories(s) for s in model.oncpu}
    assert cats[SPIN.id] == {"lock_spin", "slab_slow_path"}
    assert cats[SLAB.id] == {"slab_slow_path"}  # .cold is the function
    assert cats[MEMSET.id] == set()  # memset is where the time went, under allocate_slab
    assert cats[RQ_SPIN.id] == {"lock_spin"}
    assert cats[4] == set()  # user mode


def test_the_share_lines_say_nothing_without_the_oncpu_group():
    from stallscope.analyzer.oncpu import lock_share_line, slab_share_line

    model = _synthetic_model()
    assert slab_share_line(model) == "on-CPU in the SLUB slow path: 33.3% of samples (40 samples)"
    off = replace(model, meta=replace(model.meta, probes={"oncpu": ProbeStatus(False, "", "not requested")}))
    assert lock_share_line(off) == "" and slab_share_line(off) == ""


def test_category_shares_are_percent_of_the_selected_samples():
    model = _synthetic_model()  # 120 samples: A 100 (30 spin in slab, 10 slab, 60 user), B 20 (15 memset, 5 spin)
    assert category_share(model, "lock_spin") == (35, pytest.approx(100 * 35 / 120))
    assert category_share(model, "slab_slow_path") == (40, pytest.approx(100 * 40 / 120))
    assert category_share(model, "lock_spin", pid=201) == (5, pytest.approx(25.0))
    with pytest.raises(ValueError):
        category_share(model, "nosuch")


def test_top_functions_by_self_and_by_inclusive_samples():
    model = _synthetic_model()
    by_self = top_functions(model, "self")
    assert [(f.function, f.kind, f.self_samples) for f in by_self[:3]] == [
        ("work", "user", 60), ("native_queued_spin_lock_slowpath", "kernel", 30), ("memset_orig", "kernel", 15)]
    incl = {(f.function, f.kind): f.inclusive_samples for f in top_functions(model, "inclusive")}
    assert incl[("___slab_alloc", "kernel")] == 55  # SPIN 30 + SLAB 10 + MEMSET 15
    assert incl[("main", "user")] == 100
    assert incl[("get_partial_node", "kernel")] == 40  # with its .cold part
    assert top_functions(model, "inclusive")[0].function in ("main", "work", "__libc_start_call_main")
    assert sum(f.self_samples for f in by_self) == 120
    assert sum(f.self_pct for f in by_self) == pytest.approx(100.0)


def test_each_samples_functions_named_once_per_stack_are_those_of_its_own_frames():
    """FunctionsOf (each stack's frames named once, each pair of stacks' functions made once) gives every sample
    the leaf and inclusive functions self_function and sample_functions give it: kernel stacks with the sampling's
    own frames, user stacks, none (user mode, not collected), stacks shared by threads."""
    from stallscope.analyzer.oncpu import FunctionsOf, sample_functions, self_function

    model = _synthetic_model()
    samples = list(model.oncpu) * 3
    functions_of = FunctionsOf()
    for s in samples:
        leaf = self_function(s)
        assert functions_of(s) == (leaf, frozenset(sample_functions(s)) | {leaf})
    assert {functions_of(s)[0] for s in samples} == {
        ("native_queued_spin_lock_slowpath", "kernel"), ("get_partial_node", "kernel"), ("work", "user"),
        ("memset_orig", "kernel"), ("_raw_spin_lock", "kernel")}


def test_threads_on_cpu_time_is_their_samples_periods():
    rows = task_oncpu(_synthetic_model())
    assert [(r.task, r.comm, r.samples, r.oncpu_ns) for r in rows] == [(A, "app", 100, 100 * P), (B, "other", 20, 20 * P)]


def test_json_oncpu_section_and_idle_share():
    doc = to_json_doc(_synthetic_model())["oncpu"]
    assert doc["samples"] == 200 and doc["idle_samples"] == 95 and doc["period_ns"] == P and doc["sample_hz"] == 99
    assert doc["missed_samples"] == 0  # 5 ns over on CPU 0 is not a period
    assert doc["shares"] == {"lock_spin_pct": round(100 * 35 / 120, 3), "slab_slow_path_pct": round(100 * 40 / 120, 3)}
    assert doc["tasks"][0] == {"pid": 200, "tgid": 200, "comm": "app", "samples": 100, "oncpu_ns": 100 * P}
    assert doc["functions"][0] == {"function": "work", "kind": "user", "self_samples": 60, "inclusive_samples": 100,
                                   "self_pct": 50.0}


def test_folded_oncpu_lines_are_user_then_kernel_frames_outermost_first():
    lines = dict(line.rsplit(" ", 1) for line in to_folded_oncpu(_synthetic_model()).splitlines())
    assert lines["app;__libc_start_call_main+0x10;main+0x10;work+0x10"] == "60"
    spin = ("app;__libc_start_call_main+0x10;main+0x10;work+0x10;do_syscall_64+0x10_[k];"
            "kmem_cache_alloc_noprof+0x10_[k];__slab_alloc.isra.0+0x10_[k];___slab_alloc+0x10_[k];"
            "get_partial_node+0x10_[k];_raw_spin_lock_irqsave+0x10_[k];native_queued_spin_lock_slowpath+0x10_[k]")
    assert lines[spin] == "30"
    assert sum(map(int, lines.values())) == 120


def test_oncpu_samples_survive_the_recording_file_and_the_cli_reads_them(tmp_path):
    model = _synthetic_model()
    path = tmp_path / "s.stall"
    m = model.meta
    iv0 = interval(0, task_info=(TaskInfo(A, 200, 1, "app"), TaskInfo(B, 201, 1, "other")),
                   stacks=(SPIN, SLAB, MEMSET, RQ_SPIN, USTACK),
                   oncpu=tuple(OncpuDelta(s.task, s.tgid, s.comm, s.kstack_id, s.ustack_id, s.samples, s.period_ns)
                               for s in model.oncpu),
                   oncpu_cpus=tuple(CpuSamplesDelta(c.cpu, c.samples, c.period_ns, c.idle_samples, c.idle_ns,
                                                    c.event_ns) for c in model.oncpu_cpus.values()))
    write_recording(path, m, [iv0])
    again = load_model(str(path))
    assert sorted(again.oncpu, key=lambda s: (s.task, s.kstack_id)) == sorted(model.oncpu, key=lambda s: (s.task, s.kstack_id))
    assert again.oncpu_cpus == model.oncpu_cpus
    out = run_stallscope("profile", str(path), "-n", "3").stdout
    assert "200 samples at 99 Hz per CPU (period 10.10ms), 95 idle: CPUs 52.5% busy\n" in out
    assert "  busy: CPU0 83.3%, CPU1 6.2%\n" in out
    assert "lock spinning 29.2% (35); SLUB slow path 33.3% (40)" in out
    assert out.splitlines()[-3].split()[-1] == "work"
    locks = run_stallscope("locks", str(path)).stdout
    assert "on-CPU in lock functions: 29.2% of samples (35 samples)" in locks
    folded = run_stallscope("export", str(path), "--format", "folded", "--what", "oncpu").stdout
    assert folded == to_folded_oncpu(again)


def test_a_recording_made_before_on_cpu_sampling_reads_as_empty(tmp_path):
    import sqlite3

    m, ivs = meta(), [interval(0)]
    path = tmp_path / "old.stall"
    write_recording(path, m, ivs)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE oncpu")
    db.execute("DROP TABLE oncpu_cpus")
    db.commit()
    db.close()
    model = load_model(str(path))
    assert model.oncpu == () and model.oncpu_cpus == {}
    assert to_json_doc(model)["oncpu"]["functions"] == []
    proc = run_stallscope("profile", str(path), check=False)
    assert proc.returncode == 2 and "no on-CPU samples" in proc.stderr
    assert run_stallscope("export", str(path), "--format", "folded").returncode == 0  # off-CPU: unchanged


@needs_bpf
def test_the_on_cpu_view_says_what_its_samples_are(burner_run):
    """The On-CPU view's line above its table: the samples, their rate, the busy share, as `profile` says them."""
    from stallscope.analyzer.oncpu import sampling_summary
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.views import OncpuView

    _, _, model = burner_run
    s = sampling_summary(model)
    # the rate the samples' periods give is the one the perf events were opened at (the budget not stepping here)
    assert s.sample_hz == 99 and abs(s.effective_hz - s.sample_hz) <= 1, (s.effective_hz, s.period_ns)
    text = OncpuView().summary(Snapshot(model), None).plain
    assert s.samples > 0 and text.startswith(
        f"{s.samples:,} samples at {s.rate_text()}, {s.samples - s.idle_samples:,} of them busy"), text


def test_a_sampling_rate_the_budget_lowered_is_said_with_the_rate_asked_for():
    """At the budget's last level the samples come at 12 Hz, not the 99 Hz the options asked for: the views say the
    rate the samples' periods give, and the one asked for."""
    from stallscope.analyzer.oncpu import SamplingSummary

    assert SamplingSummary(99, 200, 95, 10_101_010, 0).rate_text() == "99 Hz per CPU"
    assert SamplingSummary(99, 24, 0, 83_333_333, 0).rate_text() == \
        "12 Hz per CPU on average (99 Hz asked for, lowered by the overhead budget)"
    assert SamplingSummary(0, 0, 0, 0, 0).rate_text() == "0 Hz per CPU"
