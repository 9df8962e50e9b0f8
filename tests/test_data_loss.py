"""Data the probes lost is said by every command, with what was lost and how to avoid it; the other
health counters (how waits were drawn, ...) are not losses. No BPF needed here: the recordings are
synthetic (tests/test_map_overflow.py makes the maps overflow for real)."""

from __future__ import annotations

import inspect
import io
import json
import re
from dataclasses import replace

import pytest

from conftest import run_stallscope
from stallscope.analyzer.data_loss import LOSSES, data_losses
from stallscope.analyzer.sample import ProgramCost
from stallscope.bpf import abi, sizing
from stallscope.tui.text import LiveText
from synthetic import two_interval_recording, write_recording

SIZES = {"tasks": 4096, "stack_entries": 8192}
LOSSY = {"waker_map_full": 1234, "stack_map_full": 5, "waits_drawn": 900, "waking_unknown": 3, "reap_exact": 1,
         "locks.lock_map_full": 7, "stacks_rate_limited": 40}


def test_only_counters_that_mean_lost_data_are_losses_each_with_the_flag_that_raises_its_map():
    losses = data_losses(LOSSY, {"sched_switch": (100, 1000, 2)}, {"map_sizes": SIZES})
    assert [(x.key, x.count) for x in losses] == [("waker_map_full", 1234), ("locks.lock_map_full", 7),
                                                  ("stack_map_full", 5), ("sched_switch.recursion_misses", 2)]
    by = {x.key: x for x in losses}
    assert by["waker_map_full"].remedy == "raise --max-tasks (now 4096)"
    assert by["stack_map_full"].remedy == "raise --stack-map-entries (now 8192)"
    assert by["sched_switch.recursion_misses"].remedy == ""
    assert by["waker_map_full"].line().startswith("data loss: waker_map_full 1,234: wakeups recorded without")
    assert data_losses({"waits_drawn": 5, "open_walks": 2, "waking_raced": 1}) == []


def test_every_map_full_counter_of_every_probe_object_is_a_loss():
    """A counter added to an object's health struct that says a map was full must be named here."""
    for prefix, struct in (("", abi.SchedHealth), ("locks.", abi.LockHealth), ("futex.", abi.FutexHealth),
                           ("oncpu.", abi.OncpuHealth), ("slab.", abi.SlabHealth)):
        for name, _ in struct._fields_:
            if name.endswith("_full") or name.endswith("_errors"):
                assert prefix + name in LOSSES, prefix + name


def test_every_invariant_the_model_checks_is_said_as_a_loss(tmp_path):
    """The invariants counted on every interval's raw values are said as the maps' losses are: a per-interval rate
    above 1 s/s (the excess is the next interval's: totals exact) apart from a wait longer than the recording."""
    from stallscope.analyzer import model as model_mod
    from stallscope.analyzer.data_loss import totals_kept

    names = {model_mod.WAIT_TOO_LONG, model_mod.LOCK_SPLIT_ABOVE_TOTAL}
    names |= set(re.findall(r'"(invariant\.\w+)"', inspect.getsource(model_mod)))
    assert len(names) == 3 and names <= set(LOSSES)
    assert [totals_kept(n) for n in sorted(names)] == [False, True, False]
    losses = data_losses({n: 1 for n in names})
    assert {x.key for x in losses} == names


def test_a_wait_seen_from_the_probes_loading_is_not_longer_than_the_recording():
    """The recording starts at the set-up drain, some time after the probes began to load (0.3 s and more under
    load): a wait they saw begin before it and that ended in the first intervals was counted as longer than the
    recording (`top` showed it as LOST on a busy machine's first screens). The limit counts from their loading
    (meta.options.probes_loading_ns); an older recording's, from its start; a longer wait is still counted."""
    from stallscope.analyzer.model import WAIT_TOO_LONG, Model
    from stallscope.analyzer.sample import OffcpuDelta
    from synthetic import A, INFOS, SEC, SLEEP, interval, meta

    def too_long(max_ns: int, **options) -> int:
        m = replace(meta(**options), start_ns=10 * SEC, end_ns=12 * SEC)
        iv = replace(interval(0, task_info=INFOS, stacks=(SLEEP,), offcpu=(
            OffcpuDelta(A, 100, 1, SLEEP.id, 0, 1, max_ns, max_ns, charged_ns=SEC),)), start_ns=10 * SEC,
            end_ns=11 * SEC)
        return Model.from_intervals(m, [iv], {t.task: t for t in INFOS}, {SLEEP.id: SLEEP}).health.get(WAIT_TOO_LONG, 0)

    loaded = 10 * SEC - 400_000_000  # the probes began to load 0.4 s before the start
    assert too_long(2 * SEC + 300_000_000, probes_loading_ns=loaded) == 0
    assert too_long(2 * SEC + 500_000_000, probes_loading_ns=loaded) == 1
    assert too_long(2 * SEC + 300_000_000) == 1  # an older recording: from its start
    assert too_long(2 * SEC + 300_000_000, probes_loading_ns=11 * SEC) == 1  # never later than the start


@pytest.fixture
def lossy_recording(tmp_path):
    m, ivs = two_interval_recording()
    m = replace(m, options={**m.options, "map_sizes": SIZES})
    ivs = [replace(ivs[0], health={"waker_map_full": 1000, "waits_drawn": 4}),
           replace(ivs[1], health={"waker_map_full": 234, "stack_map_full": 5},
                   programs=(ProgramCost("sched_switch", 100, 1000, 2),))]
    path = tmp_path / "lossy.stall"
    write_recording(path, m, ivs)
    return path


@pytest.mark.parametrize("command", [["causes"], ["recommend"], ["locks"], ["causes", "--by", "root"]])
def test_text_commands_end_with_the_data_loss_lines(lossy_recording, command):
    out = run_stallscope(*command, str(lossy_recording)).stdout.splitlines()
    lost = [line for line in out if line.startswith("data loss:")]
    assert lost == [
        "data loss: waker_map_full 1,234: wakeups recorded without their waker (the waker map was full); "
        "raise --max-tasks (now 4096)",
        "data loss: stack_map_full 5: stacks walked but not stored (the stack map was full); "
        "raise --stack-map-entries (now 8192)",
        "data loss: sched_switch.recursion_misses 2: events the sched_switch probe missed (another BPF program "
        "was running on that CPU)"]
    assert out[-3:] == lost


def test_export_keeps_its_document_and_says_the_loss_on_stderr(lossy_recording):
    proc = run_stallscope("export", str(lossy_recording))
    doc = json.loads(proc.stdout)
    assert [(x["key"], x["count"]) for x in doc["meta"]["data_loss"]] == [
        ("waker_map_full", 1234), ("stack_map_full", 5), ("sched_switch.recursion_misses", 2)]
    assert doc["meta"]["health"]["waits_drawn"] == 4  # the raw counters stay
    assert proc.stderr.count("stallscope: warning: data loss:") == 3
    folded = run_stallscope("export", str(lossy_recording), "--format", "folded")
    assert "data loss" not in folded.stdout and "waker_map_full 1,234" in folded.stderr


def test_diff_says_which_recording_lost_what(lossy_recording, tmp_path):
    clean = tmp_path / "clean.stall"
    write_recording(clean, *two_interval_recording())
    out = run_stallscope("diff", str(clean), str(lossy_recording)).stdout
    assert "data loss in new: waker_map_full 1,234" in out and "data loss in base" not in out
    doc = json.loads(run_stallscope("diff", str(clean), str(lossy_recording), "--format", "json").stdout)
    assert doc["base"]["data_loss"] == [] and doc["new"]["data_loss"][0]["key"] == "waker_map_full"


def test_a_recording_without_loss_says_nothing_about_it(tmp_path):
    path = tmp_path / "clean.stall"
    write_recording(path, *two_interval_recording())
    assert "data loss" not in run_stallscope("causes", str(path)).stdout
    assert run_stallscope("export", str(path)).stderr == ""


def test_top_shows_each_intervals_loss_and_not_the_method_counters():
    m, ivs = two_interval_recording()
    out = io.StringIO()
    view = LiveText(out=out)
    view.start(replace(m, options={"map_sizes": SIZES}))
    view.update(replace(ivs[0], health={"task_map_full": 12, "waits_drawn": 40, "reap_exact": 1}))
    text = out.getvalue()
    assert ("  data loss: task_map_full 12: exited tasks whose last totals were lost (more exited in one interval "
            "than the map of final entries holds); raise --max-tasks (now 4096)") in text
    assert "waits_drawn" not in text and "reap_exact" not in text
    view.update(ivs[1])
    assert "data loss" not in out.getvalue()[len(text):]


def test_maps_are_sized_for_the_machine_by_the_stated_rule():
    assert sizing.tasks_for(threads_now=500, task_limit=4_194_304) == 32768  # at least 32,768
    assert sizing.tasks_for(threads_now=20_000, task_limit=4_194_304) == 131072  # 4 x threads, a power of two
    assert sizing.tasks_for(threads_now=20_000, task_limit=32768) == 32768  # no more than can exist at once
    assert sizing.tasks_for(threads_now=100, task_limit=1000) == 1024  # a small pid_max
    assert sizing.stack_entries_for(24 << 30) == 32768
    assert sizing.stack_entries_for(4 << 30) == 16384  # four maps within 1/64 of the RAM
    assert sizing.stack_entries_for(256 << 20) == 4096  # never below 4,096
    s = sizing.MapSizes(1000, 2000)
    assert (s.task_final, s.offcpu, s.wakers, s.locks, s.futex, s.oncpu, s.slab_counts) == (
        1000, 2000, 4000, 2000, 2000, 2000, 8000)


@pytest.mark.parametrize("flag", ["--max-tasks", "--stack-map-entries"])
@pytest.mark.parametrize("value", ["0", "63", "99999999", "many"])
def test_map_size_flags_refuse_what_the_kernel_would_not_take(flag, value):
    proc = run_stallscope("record", "-o", "/tmp/never-written.stall", flag, value, check=False)
    assert proc.returncode == 2 and flag in proc.stderr and "Traceback" not in proc.stderr


def test_the_sizes_in_use_are_kept_in_the_recording(tmp_path):
    """meta.options.map_sizes: what the data-loss lines compare against (the session writes it)."""
    from stallscope.session import Session, SessionOptions

    s = Session(SessionOptions(max_tasks=128, stack_map_entries=256))
    s.sizes = sizing.machine_sizes(128, 256)
    assert s._meta({}, 0).options["map_sizes"]["wakers"] == 512
