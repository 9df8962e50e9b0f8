"""reports/beside.py: a stage made in a forked child gives the answer made here, and whatever keeps the
child from answering (an error, a kill, no longer wanted) leaves the answer to this process, no child
behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from stallscope.reports.beside import Beside, Taken, worth_forking

PARENT = os.getpid()
calls = []


def _made(x):
    calls.append(os.getpid())
    return {"pid": os.getpid(), "x": x, "list": list(range(x))}


def _fails_in_the_child(x):
    calls.append(os.getpid())
    if os.getpid() != PARENT:
        raise RuntimeError("in the child")
    return x


def _raises(x):
    calls.append(os.getpid())
    raise ValueError(f"bad {x}")


def _killed_in_the_child(x):
    calls.append(os.getpid())
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def _sleeps(x):
    time.sleep(60)
    return x


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.fixture(autouse=True)
def _fresh():
    calls.clear()


def test_the_childs_answer_is_the_answer_and_no_child_is_left():
    job = Beside(_made, 5, fork=True)
    pid = job._pid
    assert job.forked and pid != PARENT
    answer = job.result()
    assert answer["pid"] == pid and answer["list"] == [0, 1, 2, 3, 4]
    assert calls == [] and _gone(pid)  # made in the child, which was reaped


def test_without_a_child_the_answer_is_made_here():
    job = Beside(_made, 3, fork=False)
    assert not job.forked
    assert job.result() == {"pid": PARENT, "x": 3, "list": [0, 1, 2]} and calls == [PARENT]


def test_a_child_that_fails_leaves_the_answer_to_this_process():
    assert Beside(_fails_in_the_child, 7, fork=True).result() == 7
    assert calls == [PARENT]


def test_an_error_is_raised_here_as_it_would_be_without_a_child():
    with pytest.raises(ValueError, match="bad 2"):
        Beside(_raises, 2, fork=True).result()
    assert calls == [PARENT]


def test_a_killed_child_leaves_the_answer_to_this_process():
    job = Beside(_killed_in_the_child, 9, fork=True)
    pid = job._pid
    assert job.result() == 9 and calls == [PARENT] and _gone(pid)


def test_a_child_no_longer_wanted_is_ended():
    started = time.monotonic()
    with Beside(_sleeps, 1, fork=True) as job:
        pid = job._pid
        assert job.forked
    assert _gone(pid) and time.monotonic() - started < 10


def test_forking_needs_a_second_cpu_and_memory_to_spare(monkeypatch):
    from stallscope.reports import beside

    monkeypatch.setattr(beside, "cpus_to_spare", lambda: True)
    monkeypatch.setattr(beside, "_resident_bytes", lambda: 1 << 30)
    monkeypatch.setattr(beside, "_available_bytes", lambda: 3 << 30)
    assert worth_forking()
    monkeypatch.setattr(beside, "_available_bytes", lambda: 1 << 30)  # the child might copy every page
    assert not worth_forking()
    monkeypatch.setattr(beside, "_available_bytes", lambda: None)  # no /proc/meminfo to go by
    assert not worth_forking()
    monkeypatch.setattr(beside, "_available_bytes", lambda: 3 << 30)
    monkeypatch.setattr(beside, "cpus_to_spare", lambda: False)
    assert not worth_forking()
    assert Beside(_made, 1).forked is False


def _take_all(taken: Taken) -> list[int]:
    out = []
    while (job := taken.take()) is not None:
        out.append(job)
        time.sleep(0.01)  # the other process takes its turn meanwhile
    return out


def test_jobs_are_each_taken_once_by_whichever_process_asks():
    with Taken(40) as taken:
        with Beside(_take_all, taken, fork=True) as job:
            mine = _take_all(taken)
            theirs = job.result()
            assert job.forked is False  # reaped
    assert sorted(mine + theirs) == list(range(40))
    assert mine and theirs  # both took some
    assert mine == sorted(mine) and theirs == sorted(theirs)


def test_without_a_child_this_process_takes_every_job():
    with Taken(5) as taken:
        assert Beside(_take_all, taken, fork=False).result() == [0, 1, 2, 3, 4]
        assert taken.take() is None


def test_without_a_pipe_a_child_takes_no_job(monkeypatch):
    def no_pipe():
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "pipe", no_pipe)
    taken = Taken(3)
    monkeypatch.undo()
    with Beside(_take_all, taken, fork=True) as job:
        assert job.result() == []
    assert _take_all(taken) == [0, 1, 2]
    taken.close()
    assert taken.take() is None


def test_jobs_a_killed_child_took_are_made_here(tmp_path):
    """A report's page jobs (reports/build.py PageJobs): those a child took and never gave back are made here."""
    from stallscope.reports.build import PageJobs

    jobs = PageJobs.__new__(PageJobs)  # no series, and each job's making recorded rather than done
    jobs.model, jobs.ledger, jobs._make, jobs.parts = None, None, None, []
    made = []
    jobs._made = lambda job: made.append(job) or f"job {job}"
    jobs._taken = Taken(2)
    with jobs, Beside(_killed_in_the_child, 1, fork=True) as child:
        assert jobs._taken.take() == 0  # "the child's", lost with it
        assert child.result() == 1
        assert jobs.results({}) == (None, "job 0", "job 1")
    assert made == [0, 1]
