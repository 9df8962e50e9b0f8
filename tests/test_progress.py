"""A long command's status line (stallscope/progress.py): on a terminal, each step on one line rewritten in place,
its file names made harmless, cleared at the end, however the command ends; piped, nothing at all."""

from __future__ import annotations

import io

import pytest

from conftest import run_stallscope
from stallscope.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_each_step_on_one_line_then_nothing():
    term, now = _Terminal(), iter([0.0, 1.25, 7.5])
    with Progress(term, clock=lambda: next(now)) as p:
        p.say("reading run\x1b[31m.stall")  # a file name with an escape sequence in it
        p.say("the page")
    out = term.getvalue()
    assert out == ("\rstallscope: reading run\\x1b[31m.stall (1.2 s)\x1b[K"
                   "\rstallscope: the page (7.5 s)\x1b[K\r\x1b[K")
    assert "\n" not in out


def test_the_line_is_cleared_when_the_command_fails():
    term = _Terminal()
    with pytest.raises(RuntimeError):
        with Progress(term) as p:
            p.say("reading")
            raise RuntimeError("damaged")
    assert term.getvalue().endswith("\r\x1b[K")


def test_piped_or_closed_nothing_is_written():
    piped = io.StringIO()
    with Progress(piped) as p:
        p.say("reading")
    assert piped.getvalue() == ""
    closed = _Terminal()
    closed.close()
    with Progress(closed) as p:  # a terminal gone: no error, no line
        p.say("reading")


def test_a_report_and_a_diff_run_with_their_stderr_piped_say_nothing(tmp_path):
    from synthetic import two_interval_recording, write_recording

    stall = tmp_path / "run.stall"
    write_recording(stall, *two_interval_recording())
    report = run_stallscope("report", str(stall), "-o", str(tmp_path / "r.html"))
    diff = run_stallscope("diff", str(stall), str(stall), "-o", str(tmp_path / "d.html"))
    assert report.stderr == "" and diff.stderr == ""
    assert (tmp_path / "r.html").stat().st_size > 10_000 and (tmp_path / "d.html").stat().st_size > 10_000
