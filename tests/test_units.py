"""The one formatting of durations every view uses."""

import pytest

from stallscope.analyzer.units import fmt_ns


@pytest.mark.parametrize("ns, text", [
    (0, "0ns"), (950, "950ns"), (999.4, "999ns"), (999.6, "1.0us"),
    (12_345, "12.3us"), (999_949, "999.9us"), (999_960, "1.00ms"),
    (4_561_000, "4.56ms"), (999_994_000, "999.99ms"), (999_999_000, "1.00s"), (1_000_000_000, "1.00s"),
    (1_234_000_000, "1.23s"), (3_600e9, "3,600s"), (999_994_999_999, "999.99s"), (999_995_000_001, "1,000s"),
    (227_646_490_000_000, "227,646s"),
])
def test_a_duration_takes_the_unit_its_rounded_figure_fits(ns, text):
    """A figure that rounds up to 1000 of one unit is shown in the next: a task blocked for a whole
    interval less a few microseconds read 1000.00ms beside its neighbours' 2.00s."""
    assert fmt_ns(ns) == text
