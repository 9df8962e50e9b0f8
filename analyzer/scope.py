"""Which tasks a view is about: stallscope's own (kept apart, as its cost), the recorded command's, and
the rest. stallscope is counted like any task (its cost is part of what a machine pays), but it is never
ranked as a blocker, advised on, or shown among the locks: its own process, and the helpers it runs
(objdump and readelf when it reads libc), which are its children. A command run with `record -- CMD`
is its child too, and is not its own."""

from __future__ import annotations

from stallscope.analyzer.memo import known, per_model
from stallscope.analyzer.model import Folded, Model
from stallscope.analyzer.sample import TaskId


@per_model
def own_tasks(model: Model) -> frozenset[TaskId]:
    """stallscope's threads, and the processes it started other than the recorded command. Kept per
    model (every view asks); frozen, as it is shared."""
    own = model.meta.options.get("stallscope_pid")
    if not own:
        return frozenset()
    mine = model.descendants(own)
    cmd = command_tasks(model)
    return mine - cmd if cmd else mine  # frozen already (Model.descendants)


def command_tasks(model: Model) -> frozenset[TaskId] | None:
    """The recorded command's process tree, or None when the recording ran no command."""
    cmd = model.meta.options.get("command")
    if not cmd or not cmd.get("pid"):
        return None
    return model.descendants(cmd["pid"])


@per_model
def recorded_tasks(model: Model) -> frozenset[TaskId] | None:
    """Every task but stallscope's own; None when there is nothing to leave out. Kept per model, frozen."""
    own = own_tasks(model)
    if not own:
        return None
    return frozenset(model.tasks.keys() - own)


def in_scope(model: Model, tasks: set[TaskId] | None) -> set[TaskId] | None:
    """`tasks` (a view's choice, e.g. --command-only) without stallscope's own; None: every task."""
    if tasks is None:
        return recorded_tasks(model)
    if tasks is recorded_tasks(model):  # the default scope, already without them
        return tasks
    own = own_tasks(model)
    return {t for t in tasks if t not in own} if own else tasks


def restrict(model: Model, tasks: set[TaskId]) -> Model:
    """The model of these tasks only: their totals, waits, wakeups, locks, futexes, samples and I/O waits
    (the machine-wide figures, the CPU matrix, switch counts and block devices, stay as they are)."""
    from dataclasses import replace

    tgids = {model.tasks[t].info.tgid for t in tasks if t in model.tasks}
    out = replace(
        model, tasks={t: v for t, v in model.tasks.items() if t in tasks},
        waits=tuple(w for w in model.waits if w.task in tasks),
        wakeups=_theirs(model.wakeups, tasks),
        lock_waits=_theirs(model.lock_waits, tasks),
        futex_waits=tuple(w for w in model.futex_waits if w.task in tasks),
        oncpu=tuple(s for s in model.oncpu if s.task in tasks),
        io_wakes=tuple(w for w in model.io_wakes if w.task in tasks),
        slab=tuple(s for s in model.slab if s.tgid in tgids))
    if own_tasks(model).isdisjoint(tasks):
        # stallscope's own tasks of the model of the others are none: its own are those of stallscope's process
        # tree outside the command's, none of which is among them (working it out walks every process's tree:
        # 0.2 s of the advice on a 10-minute hackbench recording)
        known(own_tasks, out, frozenset())
    return out


def _theirs(records, tasks: set[TaskId]):
    """The records of `tasks`, as a table filtered when first read (Folded): a reader that never reads it (the
    advice reads the whole model's lock rows and wakeups) never filters it, nor folds a live window's lazy table."""
    return Folded(lambda: tuple(r for r in records if r.task in tasks))
