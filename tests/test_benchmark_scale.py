"""The scale benchmark's pure parts: the synthetic load it claims, the SQL copy that makes an hour, the
report (the benchmark itself runs on demand: python -m benchmarks.scale)."""

from __future__ import annotations

import importlib.util
import sys

from conftest import ROOT

from stallscope.analyzer.load import load_model

sys.path.insert(0, str(ROOT))  # scale.py imports benchmarks.overhead, as `python -m benchmarks.scale` does
_spec = importlib.util.spec_from_file_location("scale", ROOT / "benchmarks" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
sys.modules["scale"] = scale  # dataclasses look their module up
_spec.loader.exec_module(scale)

SMALL = scale.SyntheticLoad(events_per_s=100_003, cpus=4, tasks=50, processes=5, waits_per_task=3, wakers_per_task=2,
                            kernel_stacks=40, user_stacks=20, new_stacks_per_s=4, locks_per_s=7, lock_events_per_s=70,
                            futex_per_s=3, oncpu_per_s=5, new_tasks_per_s=6)


def test_each_synthetic_second_carries_the_stated_switches_in_the_stated_entries():
    src = scale.SyntheticSource(SMALL)
    for i in range(3):
        iv = src.interval(i)
        assert iv.switches == SMALL.events_per_s
        assert sum(o.count for o in iv.offcpu) == SMALL.events_per_s  # one off-CPU wait per switch
        assert sum(t.voluntary_switches + t.involuntary_switches for t in iv.tasks) == SMALL.events_per_s
        assert sum(w.count for w in iv.wakers) == sum(t.voluntary_switches for t in iv.tasks)
        assert sum(lk.count for lk in iv.locks) == SMALL.lock_events_per_s
        expected = SMALL.entries_per_interval()
        assert len(iv.offcpu) == expected["offcpu"] and len(iv.wakers) == expected["wakers"]
        assert len(iv.tasks) == SMALL.tasks and len(iv.locks) == SMALL.locks_per_s


def test_synthetic_stacks_are_described_before_use_and_threads_churn_at_the_stated_rate():
    src = scale.SyntheticSource(SMALL)
    described: set[int] = set()
    for i in range(4):
        iv = src.interval(i)
        described |= {s.id for s in iv.stacks}
        used = {o.kstack for o in iv.offcpu} | {o.ustack for o in iv.offcpu} | {w.waker_kstack for w in iv.wakers}
        assert used <= described and all(sid >= 16 for sid in used)
        if i:
            assert len(iv.stacks) == SMALL.new_stacks_per_s
            dead = [t for t in iv.task_info if t.flags & 8]
            assert len(dead) == SMALL.new_tasks_per_s and len(iv.task_info) == 2 * SMALL.new_tasks_per_s
    assert len(scale.SyntheticSource(SMALL).interval(0).stacks) == SMALL.kernel_stacks + SMALL.user_stacks


def test_an_hour_is_a_block_written_through_the_store_and_copied_with_new_threads(tmp_path):
    path = tmp_path / "hour.stall"
    out = scale.worker_hour_write(10, str(path), seed=3, block=4, load=SMALL)
    assert out["block"] == 4 and out["file_bytes"] > 0
    model = load_model(str(path))
    assert model.intervals == 10 and model.duration_s == 10.0
    assert model.switches == 10 * SMALL.events_per_s
    born = {t.pid for t in model.tasks if t.pid >= 1000 + SMALL.tasks}
    # threads born in the block (6 a second from its second interval; a few exit in the second they start)
    # come back renumbered in each copy: the whole block in the first, its first two seconds in the second
    block = {p for p in born if p < scale.PID_SHIFT}
    assert 3 * SMALL.new_tasks_per_s - 3 <= len(block) <= 3 * SMALL.new_tasks_per_s
    assert {p - scale.PID_SHIFT for p in born if scale.PID_SHIFT <= p < 2 * scale.PID_SHIFT} == block
    assert set() < {p - 2 * scale.PID_SHIFT for p in born if p >= 2 * scale.PID_SHIFT} < block
    assert all(model.tasks[t].info.comm.startswith("worker-") for t in model.tasks if t.pid in born)


def test_helpers_read_proc_status_perf_bench_and_growth():
    assert scale.status_kib("Name:\tx\nVmHWM:\t  123456 kB\nVmRSS:\t  1000 kB\n", "VmHWM") == 123456
    assert scale.status_kib("Name:\tx\n", "VmHWM") is None
    assert scale.parse_total_time("# 20 sender and receiver processes per group\n\n     Total time: 1.234 [sec]\n") == 1.234
    assert scale.parse_total_time("nothing") is None
    assert scale.slope_per_step([10, 12, 14, 16]) == 2.0 and scale.slope_per_step([5]) == 0.0
    s = scale.summary([0.3, 0.1, 0.2])
    assert s["median"] == 0.2 and s["max"] == 0.3 and s["n"] == 3
    doc = {"tasks": [{"pid": 1, "tgid": 1, "comm": "main"}, {"pid": 2, "tgid": 1, "comm": "idle"},
                     {"pid": 3, "tgid": 1, "comm": "idle"}, {"pid": 4, "tgid": 4, "comm": "idle"}]}
    assert scale.threads_seen(doc, 1) == 3 and scale.threads_seen(doc, 1, "idle") == 2


def test_the_report_states_the_load_and_the_per_second_cost():
    src = scale.SyntheticSource(SMALL)
    step = {"wall_s": 0.5, "cpu_s": 0.4}
    per = [{"generate": step, "model": step, "rank": step, "render": step, "store": step, "entries": 1000,
            "rss_kib": 100_000 + 1024 * i, "view_tasks": 50, "view_stacks": 60} for i in range(3)]
    env = {"started": "t0", "finished": "t1", "host": "h", "kernel": "6.18", "cpus": 2, "cpu_model": "cpu",
           "mem_kib": 1 << 20, "python": "3.11", "commit": "abc", "loadavg_start": ["1.0", "2.0", "3.0"],
           "loadavg_end": ["4.0", "5.0", "6.0"]}
    analyzer = {"load": scale.asdict(SMALL), "setup_s": 0.1, "intervals": per, "file_bytes": 1 << 20,
                "maxrss_kib": 200_000, "child_maxrss_kib": 210_000, "child_wall_s": 3.0}
    text = scale.report({"analyzer": analyzer, "errors": {}}, env, ["python", "-m", "benchmarks.scale"])
    assert "Load average (1, 5, 15 min) at start: 1.0 2.0 3.0" in text and "kernel 6.18" in text and "abc" in text
    assert "100,003 context switches" in text and "1,024 KiB more per simulated second" in text
    assert "| live view (`top`): model + render (render ranks) | 0.800 s" in text
    assert src.meta.cpus == SMALL.cpus


def test_rss_growth_reads_the_second_half_of_the_run_in_kib_a_minute():
    flat = [(float(t), 200_000 + (40_000 * t // 60 if t < 60 else 40_000)) for t in range(0, 240)]
    g = scale.rss_growth(flat)
    assert g["max_kib"] == 240_000 and g["quarters_kib"][-1] == 240_000
    assert abs(g["second_half_kib_per_min"]) < 1  # flat once warmed up
    rising = [(float(t), 100_000 + 50 * t) for t in range(0, 120)]
    assert round(scale.rss_growth(rising)["second_half_kib_per_min"]) == 3000
    assert scale.rss_growth([]) == {}


def test_the_soak_and_hour_sections_state_memory_loss_and_cost_per_interval():
    env = {"started": "t0", "finished": "t1", "host": "h", "kernel": "6.18", "cpus": 2, "cpu_model": "cpu",
           "mem_kib": 1 << 20, "python": "3.11", "commit": "abc", "loadavg_start": ["1", "2", "3"]}
    timeline = [(float(t), 150_000) for t in range(60)]
    soak = {"threads": 5000, "period_ms": 3000, "record_s": 60, "hackbench_loops": 50, "probes": "all",
            "probes_on": ["locks", "slab"], "map_sizes": {"tasks": 32768}, "recorder_maxrss_kib": 160_000,
            "rss_timeline_kib": timeline, "rss": scale.rss_growth(timeline), "recorder_cpu_s": 9.5,
            "intervals": 55, "duration_s": 60.2, "interval_lengths_s": [1.0, 1.1], "switches_per_s": 20_000,
            "file_bytes": 1 << 24, "export": {"wall_s": 3.0, "cpu_s": 2.5, "maxrss_kib": 90_000, "returncode": 0},
            "data_loss": [{"key": "waker_map_full", "count": 1234}], "health": {"wakeups_deferred": 7}, "rows": {}}
    replay = {"open_cpu_s": 0.5, "step_cpu_ms": {"start": 4.0, "middle": 4.1, "end": 4.2},
              "before": {"step_cpu_ms": {"start": 5.0, "middle": 9.0, "end": 14.0}}}
    part = {"intervals": 900, "file_bytes": 1 << 25, "export": {"cpu_s": 5.4, "maxrss_kib": 1 << 17},
            "causes": {"cpu_s": 4.5}, "replay": replay}
    text = scale.report({"soak": soak, "errors": {}}, env, ["python"]) + "\n".join(scale._scaling_lines([part]))
    assert "| recorder peak RSS (wait4 ru_maxrss) | 156 MiB |" in text
    assert "| RSS growth over the second half (least squares) | 0 KiB a minute |" in text
    assert "`waker_map_full` 1,234" in text and "`wakeups_deferred`=7" in text
    assert "| 900 | 32 MiB | 5.4 s (6.00 ms) | 128 MiB | 4.5 s (5.00 ms) | 0.50 s | 4.00 / 4.10 / 4.20 ms | " \
           "5.00 / 9.00 / 14.00 ms |" in text
