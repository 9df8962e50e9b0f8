"""Messages quote what the user typed and what files held: escaped, one line, no terminal escapes."""

from __future__ import annotations

import dataclasses

from conftest import run_stallscope
from stallscope.analyzer.sample import ProbeStatus
from stallscope.analyzer.untrusted import escaped, printable
from synthetic import two_interval_recording, write_recording

ESC = "\x1b"


def _one_clean_line(stderr: str) -> str:
    assert ESC not in stderr and "\x07" not in stderr, repr(stderr)
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1, repr(stderr)
    return lines[0]


def test_a_path_holding_an_escape_sequence_and_a_newline_is_quoted_escaped_on_one_line(tmp_path):
    path = f"{tmp_path}/\x1b[31mred\nsecond line.stall"
    proc = run_stallscope("causes", path, check=False)
    assert proc.returncode == 2
    line = _one_clean_line(proc.stderr)
    assert "\\x1b[31mred\\nsecond line.stall: no such recording" in line


def test_an_argument_argparse_rejects_is_escaped(tmp_path):
    proc = run_stallscope("causes", str(tmp_path / "x.stall"), "\x1b]0;owned\x07", check=False)
    assert proc.returncode == 2
    assert ESC not in proc.stderr and "\\x1b]0;owned\\x07" in proc.stderr
    proc = run_stallscope("record", "-o", str(tmp_path / "x.stall"), "-i", "\x1b[2J", check=False)
    assert proc.returncode == 2 and ESC not in proc.stderr


def test_text_read_from_a_recording_is_escaped_in_an_error(tmp_path):
    m, ivs = two_interval_recording()
    hostile = "not recorded\x1b[2J\x1b]0;title\x07\nstallscope: error: forged"
    m = dataclasses.replace(m, probes={**m.probes, "locks": ProbeStatus(False, "", hostile)})
    path = tmp_path / "hostile.stall"
    write_recording(path, m, ivs)
    proc = run_stallscope("locks", "--type", "kernel", str(path), check=False)
    assert proc.returncode == 2
    line = _one_clean_line(proc.stderr)
    assert "\\x1b[2J" in line and "\\nstallscope: error: forged" in line


def test_progress_messages_are_escaped(capsys):
    from stallscope.session import say

    say("recording to /tmp/\x1b[31mx\n.stall while running \udcffprog")
    err = capsys.readouterr().err
    assert _one_clean_line(err) == "stallscope: recording to /tmp/\\x1b[31mx\\n.stall while running \\xffprog"


def test_escaped_leaves_printable_text_alone_and_escapes_the_rest():
    assert escaped("kmalloc-512 /usr/lib/libc.so.6 é") == "kmalloc-512 /usr/lib/libc.so.6 é"
    assert escaped("a\tb\rc\x00d\x7f\u2028\U000e0001") == "a\\tb\\rc\\x00d\\x7f\\u2028\\U000e0001"


def test_printable_replaces_each_control_character_and_returns_a_printable_name_as_it_is():
    name = "kworker/0:1H-kblockd"
    assert printable(name) is name
    assert printable("") == ""
    assert printable("a\x1b[31mb\nc\u2028d\x00") == "a?[31mb?c?d?"
    assert printable("tab\there", replacement="_") == "tab_here"
    assert printable("[bold red]x") == "[bold red]x"  # markup is the views' to escape, not a control character
