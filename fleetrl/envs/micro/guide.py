"""The scripted micro expert as the bundled suites' guide (`fleetrl.envs.tasks.guide`).

Plans are the expert's (`PLANS`, and `RECOVER` for taking over a failed sample); copies are
renamed copies (`fleetrl.envs.micro.names`). The registry hands it out for the `micro` and
`product` suites' tasks (`fleetrl.envs.tasks.suites.guide_for`).
"""

from __future__ import annotations

import random
from pathlib import Path

from fleetrl.envs.micro import expert
from fleetrl.envs.micro.expert import PLANS, Expert
from fleetrl.envs.micro.names import RenamedCopy, renamed_copy
from fleetrl.envs.tasks import guide
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Task

_HERE = Path(__file__).parent


class MicroGuide:
    """The micro expert behind the Guide protocol."""

    # What its replies and renamed copies depend on besides the task records; the suite's
    # own files are not among them: what they make is in the records.
    sources = tuple(
        _HERE / name for name in ("expert.py", "gold.py", "names.py", "statement.py", "guide.py")
    )

    def steps(self, task: Task, plan: str) -> tuple[str, ...]:
        """The expert's steps of `plan` (a key of PLANS, or `guide.RECOVER`), whatever
        the task."""
        return _steps(plan)

    def policy(self, tasks: list[Task], plan: str, tokenizer: Tokenizer, after: int = 0) -> Expert:
        """One expert over `tasks` (their statements must differ); ValueError for a task
        that is no micro task."""
        return Expert(tasks, _steps(plan), tokenizer, after)

    def copy(self, task: Task, repo: Path, rng: random.Random, dest: Path) -> RenamedCopy:
        """A renamed copy of the micro task (`renamed_copy`)."""
        return renamed_copy(task, repo, rng, dest)


def _steps(plan: str) -> tuple[str, ...]:
    if plan == guide.RECOVER:
        return expert.RECOVER
    if plan not in PLANS:
        raise ValueError(
            f"the micro expert has no plan {plan!r}: choose one or more of {', '.join(PLANS)}"
        )
    return PLANS[plan]


MICRO_GUIDE = MicroGuide()
