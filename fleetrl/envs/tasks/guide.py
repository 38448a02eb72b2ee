"""Guides: scripted episodes that reach a task's gold fix, for whoever learns from them.

    task (+ replies another policy sent) ─▶ Guide.policy ─▶ a scripted TokenPolicy
          ─▶ the harness runs it like any policy ─▶ the verifier grades it
          ─▶ reward 1 and no problem: a guided sample, a demonstration

A suite or task folder provides its guide through the registry
(`fleetrl.envs.tasks.suites.guide_for`): the bundled suites the scripted micro expert
(`fleetrl.envs.micro.guide`), any other task with a gold patch the gold-patch guide
(`fleetrl.envs.tasks.gold_guide`). Whoever runs a guide's episode keeps it only when the
verifier gives it reward 1 and the guide's `problems` for its task are empty: a guide knows
the fix, not that its episode reached it.

A plan names the order of a guide's replies (its steps): every guide follows FIX (read,
edit, check, finish) and RECOVER (taking over another policy's episode after a refused
edit); the micro expert knows more (`fleetrl.envs.micro.expert.PLANS`).
Not covered: guides for MoE policies (their episodes carry no routing).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Task

if TYPE_CHECKING:
    from fleetrl.envs.harness.loop import TokenPolicy

FIX = "fix"  # the plan of a guided sample: read, edit, check, finish
RECOVER = "recover"  # after another policy's replies that read the file: edit, check, finish
SLIP = "slip"  # the plan, and its step, of an edit whose `old` is mis-copied (refused)


class Scripted(Protocol):
    """A guide's policy: a TokenPolicy that says what went differently than a fix would."""

    problems: dict[str, list[str]]  # per instance id; an episode with problems is no guide
    unlearned: dict[str, list[list[int]]]  # per instance id: reply ids no model should learn

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion: ...


class TaskCopy(Protocol):
    """A copy of a task under fresh names, its repository not yet written."""

    task: Task  # the copy's record; `task.repo` is where `write` puts the repository

    def write(self) -> Path: ...


class Guide(Protocol):
    """What a suite or task folder provides for its tasks' scripted episodes."""

    sources: tuple[Path, ...]  # the files its episodes' tokens depend on (cache keys)

    def steps(self, task: Task, plan: str) -> tuple[str, ...]:
        """The plan's steps on `task`, one per reply; ValueError for a plan it lacks."""
        ...

    def policy(
        self, tasks: list[Task], plan: str, tokenizer: Tokenizer, after: int = 0
    ) -> Scripted:
        """A policy for episodes of `tasks` by `plan`, its first reply the one after
        `after` replies of another policy; ValueError for a task it cannot fix."""
        ...

    def copy(self, task: Task, repo: Path, rng: random.Random, dest: Path) -> TaskCopy:
        """A copy of `task` (its repository at `repo`) under names drawn from `rng`, to be
        written at `dest`, that this guide also fixes; ValueError where it makes none."""
        ...


def slip_opening(guide: Guide, task: Task, tokenizer: Tokenizer, then: TokenPolicy) -> TokenPolicy:
    """The policy of one episode after a slip: `guide` reads the task's file and sends an
    edit whose `old` is mis-copied (the tool refuses it, showing the closest lines), then
    `then` goes on. ValueError where the guide has no slip for the task."""
    # Imported here: the harness loads an HTTP client, which listing tasks never needs.
    from fleetrl.envs.harness.handover import Handover

    turns = guide.steps(task, SLIP).index(SLIP) + 1
    return Handover(guide.policy([task], SLIP, tokenizer), turns, then)


def edit_windows(start: int, end: int, n_lines: int) -> list[tuple[int, int]]:
    """Line ranges around lines[start:end] of a file of `n_lines` lines, smallest first, one
    more line above before one more below: where a guide widens an edit until its `old`
    text occurs once in the file."""
    out = []
    for extra in range(n_lines + 1):
        for up in range(extra, -1, -1):
            a, b = start - up, end + extra - up
            if a >= 0 and b <= n_lines and b > a:
                out.append((a, b))
    return out


def scripted_completion(
    prompt_ids: list[int], ids: list[int], params: SamplingParams, eos_id: int, problems: list[str]
) -> Completion:
    """A scripted policy's reply `ids` as the engine would return it: cut to the token
    budget (a reply over it is noted in `problems`), logprob 0 and version 0 per token."""
    if len(ids) > params.max_tokens:
        problems.append(f"reply of {len(ids)} tokens exceeds the budget")
        ids = ids[: params.max_tokens]
    return Completion(
        prompt_ids=list(prompt_ids),
        token_ids=ids,
        logprobs=[0.0] * len(ids),
        versions=[0] * len(ids),
        finish_reason="stop" if ids[-1] == eos_id else "length",
    )
