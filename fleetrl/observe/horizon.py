"""Compaction error: how much of what a task needs an agent's summaries lost.

A task of the `long` suite lists its `facts` (`Task.facts`: a line such as "bbda = 76", a
name, a path) that a solution must carry from the file it read to where it uses them.
When the context fills, the agent summarises and goes on from the summary alone; a fact
missing from every summary of the episode had to be read again, or was lost.

    compaction_error(facts, summaries) = facts found in no summary / facts

A fact is found as a whole token: not preceded by a word character or a dot (so "qzo.py"
is not found in "aqzo.py" nor in "x.qzo.py", but is in "src/qzo.py") and not followed by a
word character (so "bbda = 76" is not found in "bbda = 765"; a full stop after it is
fine). Case and spacing count: "bbda=76" does not keep "bbda = 76".

Pure functions of strings (standard library only), shared by `fleetrl bench horizon` and
the report. Not covered: facts kept in other words (a paraphrase is a miss).
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def fact_pattern(fact: str) -> re.Pattern[str]:
    """The pattern that finds `fact` as a whole token (module docstring)."""
    return re.compile(r"(?<![\w.])" + re.escape(fact) + r"(?![\w])")


def kept_facts(facts: Sequence[str], summaries: Sequence[str]) -> list[str]:
    """The facts found in at least one of `summaries`, in the order of `facts`."""
    patterns = [(fact, fact_pattern(fact)) for fact in facts]
    return [fact for fact, p in patterns if any(p.search(text) for text in summaries)]


def compaction_error(task_facts: Sequence[str], summaries: Sequence[str]) -> float:
    """The fraction of `task_facts` that no summary of the episode keeps, in [0, 1]; 0.0
    for a task without facts (nothing to lose), 1.0 for an episode without summaries."""
    if not task_facts:
        return 0.0
    return 1.0 - len(kept_facts(task_facts, summaries)) / len(task_facts)
