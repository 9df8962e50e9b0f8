"""benchmarks/screen.py hands a recording's intervals to the app as the live source does and counts what the
screen drew: each interval shown, its frames and layouts counted (a Textual that renamed what it wraps would fail
here rather than leave the table empty)."""

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python -m benchmarks.screen` runs from the repository's root
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks import screen  # noqa: E402
from tui_fixture import write_tui_recording  # noqa: E402


def test_the_screen_benchmark_shows_each_interval_and_counts_its_frames(tmp_path, monkeypatch):
    path = str(tmp_path / "tui.stall")
    write_tui_recording(path)
    shown = []
    real = screen.Replayed.events

    def events(self):
        out = real(self)
        shown.extend(ev.payload.index for ev in out)
        return out

    monkeypatch.setattr(screen.Replayed, "events", events)
    monkeypatch.setattr(screen, "WARM_INTERVALS", 2)
    result = asyncio.run(screen.measure(path, 0.6, (120, 40), 1, 0.1))
    n = result["recording_intervals"]
    assert result["intervals"] == 6 and n >= 2
    assert shown == [i % n for i in range(len(shown))] and len(shown) == 8  # in order, looped, none left behind
    assert result["frames_per_interval"] > 0 and result["ms_per_frame"] > 0
    assert result["view"] == "blockers" and result["screen_cpu_pct_of_one_cpu"] > 0


def test_the_screen_benchmark_says_in_one_line_what_it_cannot_read(tmp_path, monkeypatch, capsys):
    import pytest

    bad = tmp_path / "bad.stall"
    bad.write_text("not a recording")
    for path in (str(tmp_path / "none.stall"), str(bad)):
        monkeypatch.setattr(sys, "argv", ["screen", path])
        with pytest.raises(SystemExit) as ended:
            screen.main()
        assert str(ended.value).startswith("benchmarks.screen: ") and path in str(ended.value)
    monkeypatch.setattr(sys, "argv", ["screen", str(bad), "--size", "160"])
    with pytest.raises(SystemExit):
        screen.main()
    assert "is not COLUMNSxROWS" in capsys.readouterr().err
