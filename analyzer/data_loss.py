"""What the probes could not record, said in words: the `meta.health` counters that mean data was lost
(a full map, a walk that returned nothing, an event a probe missed), each with what was lost and, where
a size limits it, the flag that raises it. Every text command and `top` show these lines; the other
counters (waits drawn, wakeups of tasks blocked before attach, ...) describe the method, not a loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

# health key -> (what each count is, in words; the flag that raises the limit, or "")
LOSSES: dict[str, tuple[str, str]] = {
    "task_map_full": ("exited tasks whose last totals were lost (more exited in one interval than the map of "
                      "final entries holds)", "--max-tasks"),
    "offcpu_map_full": ("waits kept only in their task's totals, without their stack or cause (the off-CPU map "
                        "was full)", "--max-tasks"),
    "waker_map_full": ("wakeups recorded without their waker (the waker map was full)", "--max-tasks"),
    "stack_map_full": ("stacks walked but not stored (the stack map was full)", "--stack-map-entries"),
    "stack_errors": ("stack walks that returned nothing", ""),
    "storage_errors": ("events of tasks whose per-task state the kernel could not create (no memory, or its "
                       "task storage in use on that CPU): a wait, a migration or a first run-queue wait not "
                       "recorded", ""),
    "switch_out_open": ("waits whose wakeup and switch-in the kernel did not trace: their length taken from the "
                        "task's run time and run_delay (switch_out_closed of them), their stack and waker lost", ""),
    "switch_in_unseen": ("waits whose switch-in the kernel did not trace: charged to their cause at the task's next "
                         "switch-out, their stack lost", ""),
    "runq_unseen": ("run-queue waits whose end (the task's switch-in) the kernel did not trace: taken from the task's "
                    "run time since (runq_closed of them)", ""),
    "open_carried_mismatch": ("waits in progress the task dump carried on that the collector did not charge, or "
                              "the other way round, for one interval each (a task gone without its final switch): "
                              "their keys' charge for that interval is wrong, their tasks' totals are not", ""),
    "locks.lock_map_full": ("kernel lock contentions not recorded (the lock map was full)", "--max-tasks"),
    "locks.stack_map_full": ("lock contention stacks not stored (the stack map was full)", "--stack-map-entries"),
    "locks.stack_errors": ("lock contention stack walks that returned nothing", ""),
    "locks.storage_errors": ("lock waits of tasks whose per-task state the kernel could not create", ""),
    "locks.spin_nesting_overflow": ("spin waits nested deeper on one CPU than the probe keeps", ""),
    "locks.spin_stale": ("spin waits whose end a probe missed: dropped, not charged", ""),
    "futex.futex_map_full": ("futex waits not recorded (the futex map was full)", "--max-tasks"),
    "futex.stack_map_full": ("futex wait stacks not stored (the stack map was full)", "--stack-map-entries"),
    "futex.stack_errors": ("futex wait stack walks that returned nothing", ""),
    "futex.storage_errors": ("futex waits of tasks whose per-task state the kernel could not create", ""),
    "futex.futex_read_errors": ("futex_waitv waits kept without their address (the vector was unreadable)", ""),
    "futex.new_key_events_lost": ("processes not named at their first futex wait (the event ring was full): "
                                  "named only if they live on", ""),
    "futex.switch_in_unseen": ("futex waits whose switch-in the kernel did not trace: closed at the task's next "
                               "switch-out, their length from its blocked and run-queue time", ""),
    "oncpu.oncpu_map_full": ("on-CPU samples not recorded (the sample map was full)", "--max-tasks"),
    "oncpu.stack_map_full": ("on-CPU sample stacks not stored (the stack map was full)", "--stack-map-entries"),
    "oncpu.stack_errors": ("on-CPU sample stack walks that returned nothing", ""),
    "oncpu.user_stack_errors": ("on-CPU samples whose user stack walk returned nothing", ""),
    "slab.counts_map_full": ("slab allocations and frees not counted (the counts map was full)", "--max-tasks"),
    "slab.cache_map_full": ("slab caches not described (the cache map was full)", ""),
    "slab.cursor_map_full": ("allocations left out of the CPU-slab switch estimate (the cursor map was full)", ""),
    # the invariants checked on every interval's raw values (analyzer/model.py), counted, never corrected
    "invariant.offcpu_rate_above_1s_per_s": ("task intervals charged more blocked time than the interval lasted (a "
                                             "wait that ended while the task dump ran is charged to the interval "
                                             "the dump closed: the excess is the next interval's)", ""),
    "invariant.wait_longer_than_recording": ("single waits (off-CPU, lock or futex) longer than the probes ran (from "
                                             "their loading to the recording's end): their length is wrong", ""),
    "invariant.lock_split_above_total": ("lock contentions whose blocked and runnable parts add up to more than the "
                                         "contention: their split is wrong", ""),
}
# the counters after whose losses every total stays exact, by the counter's own name whichever group counted it:
# what went is a stack, a waker, a name or an estimate's input, or a wait's time came from the task's own counters,
# or (a rate above 1 s/s) part of an interval's time was charged to the interval before (`top` shows them apart
# from those that lost events or totals)
TOTALS_KEPT = frozenset({
    "waker_map_full", "stack_map_full", "stack_errors", "user_stack_errors", "switch_out_open", "switch_in_unseen",
    "runq_unseen", "new_key_events_lost", "futex_read_errors", "cursor_map_full", "offcpu_rate_above_1s_per_s",
})
RECURSION_MISSES = "recursion_misses"
# the size each flag sets, as the recording's meta.options.map_sizes names it
_FLAG_SIZE = {"--max-tasks": "tasks", "--stack-map-entries": "stack_entries"}


def totals_kept(key: str) -> bool:
    """Whether every total stays exact after this counter's losses (TOTALS_KEPT), `key` a meta.health key or its
    last part."""
    return key.rsplit(".", 1)[-1] in TOTALS_KEPT


@dataclass(frozen=True)
class Loss:
    key: str  # the meta.health key (PROGRAM.recursion_misses for a program's misses)
    count: int
    what: str
    remedy: str  # "raise --max-tasks (now 32768)", or ""

    def line(self) -> str:
        text = f"data loss: {self.key} {self.count:,}: {self.what}"
        return f"{text}; {self.remedy}" if self.remedy else text

    def as_dict(self) -> dict:
        return {"key": self.key, "count": self.count, "what": self.what, "remedy": self.remedy}


def data_losses(health: Mapping[str, int], programs: Mapping[str, tuple] | None = None,
                options: Mapping | None = None) -> list[Loss]:
    """The losses among a recording's (or an interval's) health counters and programs' (runs, ns,
    recursion misses), largest first. `options`: the recording's meta.options, for the sizes in use."""
    sizes = (options or {}).get("map_sizes") or {}
    out = []
    for key, count in health.items():
        if count <= 0 or key not in LOSSES:
            continue
        what, flag = LOSSES[key]
        out.append(Loss(key, count, what, _remedy(flag, sizes)))
    for name, stats in (programs or {}).items():
        misses = stats[2] if len(stats) > 2 else 0
        if misses > 0:
            out.append(Loss(f"{name}.{RECURSION_MISSES}", misses,
                            f"events the {name} probe missed (another BPF program was running on that CPU)", ""))
    return sorted(out, key=lambda loss: (-loss.count, loss.key))


def _remedy(flag: str, sizes: Mapping) -> str:
    if not flag:
        return ""
    now = sizes.get(_FLAG_SIZE[flag])
    return f"raise {flag}" + (f" (now {now})" if isinstance(now, int) else "")


def model_losses(model) -> list[Loss]:
    """A model's (analyzer/model.py) losses over its window."""
    return data_losses(model.health, model.programs, model.meta.options)


def data_loss_lines(model, where: str = "") -> list[str]:
    """The lines every text command prints for a model with losses; `where` names the recording
    when there are two (`diff`)."""
    lines = [loss.line() for loss in model_losses(model)]
    return [line.replace("data loss:", f"data loss in {where}:", 1) for line in lines] if where else lines
