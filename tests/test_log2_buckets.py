"""Log2 histograms as the probes fill them and as the views print them: slot s holds the lengths in
[2^s, 2^(s+1)) ns (bpf/sched.h log2_slot). A wait of a known length, recorded on the real kernel, falls in the
bucket the TUI prints for it, and every p99 shown is an upper bound of the waits it stands for."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from rich.text import Text

from conftest import ALL_STACKS, example, needs_bpf, record_command
from stallscope.analyzer.blockers import percentiles
from stallscope.analyzer.timeline import hist_p99
from stallscope.tui.detail import histogram


def _buckets(hist: list[int]) -> list[tuple[str, str, int]]:
    t = Text()
    histogram(t, hist)
    return _bucket_lines(t.plain.splitlines())


def _bucket_lines(lines) -> list[tuple[str, str, int]]:
    """(lower, upper, count) of each histogram line, up to the first line that is not one."""
    out = []
    for line in lines:
        if " .. " not in line:
            break
        lower, _, rest = line.strip().partition(" .. ")
        upper, count = rest.split()[:2]
        out.append((lower, upper, int(count.replace(",", ""))))
    return out


def test_a_slot_is_printed_as_the_lengths_the_probe_puts_there():
    for ns in (1, 3, 1_000, 262_143, 262_144, 10_000_000, 12_000_000, 1_500_000_000):
        slot = max(ns.bit_length() - 1, 0)  # log2_slot
        hist = [0] * 40
        hist[slot] = 7
        [(lower, upper, count)] = _buckets(hist)
        assert count == 7
        # the printed bounds hold the length, to their rounding (1.0us is 1,024 ns): a bucket off by one is
        # off by a factor of two
        assert _ns(lower) <= ns * 1.05 and ns < _ns(upper) * 1.05, (ns, lower, upper)
        assert _ns(upper) <= 2 * max(ns, 1) * 1.05, (ns, lower, upper)


def test_the_probes_slot_is_the_length_s_log2(tmp_path, c_compiler):
    """bpf/log2.h, which every probe's histogram slot comes from, built natively: floor(log2(v)), at most the last
    slot, for every power of two and its neighbours, each width of histogram, and random lengths."""
    src = tmp_path / "log2.c"
    src.write_text('#include <stdio.h>\n#include <stdint.h>\ntypedef uint64_t __u64;\ntypedef uint32_t __u32;\n'
                   '#define __always_inline inline\n#include "log2.h"\n'
                   'int main(void){unsigned long long v; unsigned s;'
                   'while (scanf("%llu %u", &v, &s) == 2) printf("%u\\n", log2_of(v, s)); return 0;}\n')
    subprocess.run([c_compiler, "-O2", "-I", str(Path(__file__).resolve().parent.parent / "bpf"), "-o", str(tmp_path / "log2"),
                    str(src)], check=True)
    rng = random.Random(3)
    values = [0, 1, 2, 3, (1 << 64) - 1] + [(1 << b) + d for b in range(64) for d in (-1, 0, 1) if (1 << b) + d > 0]
    values += [rng.getrandbits(rng.randrange(1, 65)) for _ in range(20_000)]
    cases = [(v, slots) for v in values for slots in (16, 32, 40, 64)]
    out = subprocess.run([str(tmp_path / "log2")], input="".join(f"{v} {s}\n" for v, s in cases),
                         capture_output=True, text=True, check=True).stdout.split()
    wrong = [(v, s, int(got)) for (v, s), got in zip(cases, out) if int(got) != min(max(v.bit_length() - 1, 0), s - 1)]
    assert len(out) == len(cases) and not wrong, wrong[:5]


def _ns(text: str) -> float:
    for unit, scale in (("ns", 1), ("us", 1e3), ("ms", 1e6), ("s", 1e9)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    return float(text)


def test_the_tasks_p99_is_the_upper_bound_percentiles_give():
    rng = random.Random(7)
    for _ in range(500):
        hist = [rng.choice((0, 0, 0, 1, 5, 300)) for _ in range(40)]
        longest = rng.choice((0, rng.randrange(1, 1 << 40)))
        assert hist_p99(tuple(hist), longest) == percentiles(dict(enumerate(hist)), longest, (0.99,)).get("p99_ns", 0)
    # a single wakeup of 10 ms, alone in its slot: the p99 is at least it (it was half of it)
    hist = [0] * 40
    hist[(10_000_000).bit_length() - 1] = 1
    assert hist_p99(tuple(hist), 0) >= 10_000_000
    assert hist_p99(tuple(hist), 10_000_000) == 10_000_000


@needs_bpf
def test_a_recorded_sleep_falls_in_the_bucket_the_tui_prints(tmp_path):
    """`sleeper` sleeps 12 ms 40 times: each wait is at least 12 ms, and most are well under 16.78 ms, so the
    probe puts them in slot 23, which the blocker's detail prints as [8.39, 16.78) ms; the p99 it shows is at
    least 12 ms."""
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.detail import blocker_detail

    _doc, _truth, path = record_command(tmp_path, [example("sleeper"), "-n", "40", "-m", "12"], *ALL_STACKS)
    model = load_model(str(path))
    # the sleeper's waits only, as `--command-only` chooses them: other processes' sleeps are not in its bucket
    snap = Snapshot(model, tasks={tid for tid, t in model.tasks.items() if t.info.comm == "sleeper"})
    b = next(b for b in snap.blockers if b.cause == "Application requested delay")
    assert b.count >= 40, b
    text = blocker_detail(snap, b).plain
    shown = _bucket_lines(text[text.index("Latency of single waits"):].splitlines()[1:])
    fullest = max(shown, key=lambda row: row[2])
    assert fullest[:2] == ("8.39ms", "16.78ms") and fullest[2] >= 30, shown  # a few, kept from a CPU, longer
    assert b.latency["p99_ns"] >= 12_000_000 and b.latency["p50_ns"] >= 12_000_000, b.latency


def test_a_process_p99_is_of_all_its_threads_wakeups_not_its_worst_threads():
    """Two threads of one process: 99 wakeups of 1.5 us, and one of 10 ms. 99 of its 100 wakeups took under
    2.05 us: that is the process's p99 (the worst thread's own p99 is 10 ms)."""
    from stallscope.analyzer.model import Model
    from stallscope.analyzer.sample import TaskDelta
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.views import TasksView
    from synthetic import A, B, INFOS, interval, meta

    iv = interval(0, task_info=INFOS, tasks=(
        TaskDelta(A, runq_wait_ns=99 * 1_500, runq_count=99, runq_max_ns=1_900, voluntary_switches=99,
                  runq_hist=((10, 99),)),
        TaskDelta(B, runq_wait_ns=10_000_000, runq_count=1, runq_max_ns=10_000_000, voluntary_switches=1,
                  runq_hist=((23, 1),))))
    snap = Snapshot(Model.from_intervals(meta(), [iv], {i.task: i for i in INFOS}, {}))
    view = TasksView()
    threads = {r.key: r.sort[5] for r in view.rows(snap, None)}
    assert threads == {"100": 1_900, "101": 10_000_000}, threads  # each bound, never above the thread's longest
    view.group = "process"
    [process] = view.rows(snap, None)
    assert process.sort[5] == 2_048, process.sort
