"""Recommendations as text: numbered, each with its evidence, command, risk and how to verify."""

from __future__ import annotations

from stallscope.analyzer.recommend import RECOMMENDED, Recommendation
from stallscope.analyzer.units import fmt_ns
from stallscope.analyzer.untrusted import printable


def recommendation_text(number: int, r: Recommendation) -> str:
    head = f"[{number}] {r.kind}: {printable(r.finding)}"
    if r.status != RECOMMENDED:
        head += f"  ({r.status})"
    lines = [head + "\n"]
    if r.wait_ns_per_s is not None:
        lines.append(f"      aimed at: {fmt_ns(r.wait_ns_per_s)} of waiting per second\n")
    lines += [f"      evidence: {printable(e)}\n" for e in r.evidence]
    lines.append(f"      command:  {printable(r.command) or '(a change of code or configuration)'}"
                 + ("  [run time: `stallscope apply FILE %d`]" % number if r.runtime and r.status == RECOMMENDED
                    else "") + "\n")
    lines.append(f"      risk:     {printable(r.risk)}\n")
    lines.append(f"      verify:   {printable(r.verify)}\n")
    return "".join(lines)


def recommendations_text(recs: list[Recommendation]) -> str:
    if not recs:
        return "no recommendation: nothing in this recording crossed a rule's threshold\n"
    return ORDER_NOTE + "\n" + "\n".join(recommendation_text(i, r) for i, r in enumerate(recs, 1))


# how `recommend` orders its list (analyzer/recommend.py rank_key), said above it
ORDER_NOTE = ("# the fixes to apply first, then those that cannot help here; each list by the waiting a fix is aimed "
              "at (the most first), fixes whose gain is not a measured wait last\n")
