"""The scripted long expert: a token policy that fixes `long` tasks across a summary.

    prompt ids ─▶ decode ─▶ first user turn = a task's statement ─▶ which task
               ─▶ asked for a summary?      ─▶ the task's notes (its facts, what is next)
               ─▶ a window that opens on notes? ─▶ after the summary: read the small
                  file, edit, check, finish
               ─▶ otherwise                 ─▶ before it: read the big file

Like the micro expert it decides each reply from its context; what it writes comes from
the task's spec (`fleetrl.envs.long.suite.LongSpec`): the files to read, the edits of the
gold fix, the summary that keeps the task's facts. It counts on the harness to ask for a
summary right after the big file's read (the suite's sizes and the `long` preset make it
so); an episode where it does not, or where an edit is refused or the check prints
another value, lists the problem in `problems` and is no demonstration.

Its replies after the summary use what the summary says, not what the window lost, so a
model that learns from its episodes learns to write the facts down and to act on them.

Two plans. `fix` writes the spec's summary, which keeps every fact. `terse` writes notes
that lose the one fact the fix cannot do without (`LongSpec.terse`): the hurried notes a
prompted model writes. Its replies after them still fix the task, from what the expert
knows and the notes do not say, so they are listed in `unlearned`: a model learns from a
`terse` episode how such notes read, never to act on facts it was not given. A base
trained on both plans summarises, but not well (about half its notes lose a fact), which
is what RL has to improve (issue 47).

Not covered: the micro expert's other plans (slips, wrong fixes), renamed copies, summary
prompts other than the harness default.
"""

from __future__ import annotations

import random
from pathlib import Path

from fleetrl.config import HarnessSection
from fleetrl.envs.long.suite import LongSpec, spec_of
from fleetrl.envs.micro.expert import Example, check_command
from fleetrl.envs.tasks.guide import FIX, TaskCopy, scripted_completion
from fleetrl.model.chat import (
    GENERATION_PROMPT,
    IM_END,
    USER_TURN,
    Message,
    ToolCall,
    format_reply,
    tool_results,
)
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Task

TERSE = "terse"  # notes that lose a fact; the replies after them are not learned
PLANS = (FIX, TERSE)
_DEFAULTS = HarnessSection()
_RESUME = _DEFAULTS.resume_template.split("{summary}")[0]


def steps_after_summary(spec: LongSpec) -> tuple[str, ...]:
    """The expert's replies in the window that opens on its summary."""
    return ("read", *(f"edit{i}" for i in range(len(spec.edits))), "check", "finish")


def _opens_on_notes(users: list[str]) -> bool:
    """Whether a window whose user turns are `users` opens on the summary's notes."""
    return any(user.startswith(_RESUME) for user in users)


class LongExpert:
    """A TokenPolicy that solves the long tasks of `tasks`; `problems[instance_id]`
    collects what went differently than the fix would go."""

    def __init__(self, tasks: list[Task], tokenizer: Tokenizer, plan: str = FIX) -> None:
        """ValueError for a task that is no long task."""
        self.tokenizer = tokenizer
        self.plan = plan
        self.problems: dict[str, list[str]] = {task.instance_id: [] for task in tasks}
        self.unlearned: dict[str, list[list[int]]] = {task.instance_id: [] for task in tasks}
        self._specs = {task.problem_statement: spec_of(task) for task in tasks}

    def _reply(self, spec: LongSpec, context: str, users: list[str]) -> Message:
        """The next assistant message of the episode on `spec` whose context is `context`
        (its user turns: `users`)."""
        problems = self.problems[spec.instance_id]
        if users[-1] == _DEFAULTS.summary_prompt:
            return Message("assistant", spec.terse if self.plan == TERSE else spec.summary)
        turns = context.split(GENERATION_PROMPT)[1:]  # the last one: this turn, still empty
        if not _opens_on_notes(users):
            if len(turns) > 1:
                problems.append("no summary was asked for after the big file's read")
                return Message("assistant", "", [ToolCall("finish", {})])
            return Message("assistant", "", [ToolCall("read_file", {"path": spec.first})])
        step = steps_after_summary(spec)[len(turns) - 1]
        last = tool_results(turns[-2])[-1] if len(turns) > 1 else ""
        if step.startswith("edit") and step != "edit0" and not last.startswith("edited "):
            problems.append(f"edit refused: {last}")
        example = Example(spec.module, spec.function, spec.call, str(spec.expected))
        if step == "finish" and last != f"exit code: 0\n{spec.expected}":
            problems.append(f"check printed {last!r}")
        if step == "read":
            call = ToolCall("read_file", {"path": spec.second})
        elif step.startswith("edit"):
            edit = spec.edits[int(step[4:])]
            call = ToolCall("edit_file", {"path": edit.path, "old": edit.old, "new": edit.new})
        elif step == "check":
            call = ToolCall("run", {"command": check_command(example)})
        else:
            call = ToolCall("finish", {})
        return Message("assistant", "", [call])

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """The next reply's ids, as a model that never errs would sample them."""
        context = self.tokenizer.decode(prompt_ids)
        users = USER_TURN.findall(context)
        spec = self._specs.get(users[0]) if users else None
        if spec is None:
            raise LookupError(f"the prompt states no problem of the expert's tasks: {context!r}")
        message = self._reply(spec, context, users)
        ids = self.tokenizer.encode(format_reply(message) + IM_END)
        problems = self.problems[spec.instance_id]
        if self.plan == TERSE and _opens_on_notes(users):
            self.unlearned[spec.instance_id].append(ids)
        return scripted_completion(prompt_ids, ids, params, self.tokenizer.eos_id, problems)


class LongGuide:
    """The long expert behind the guide protocol (`fleetrl.envs.tasks.guide`)."""

    sources = (Path(__file__), Path(__file__).parent / "suite.py")

    def steps(self, task: Task, plan: str) -> tuple[str, ...]:
        """Read, summary, then `steps_after_summary` (both plans); ValueError for another."""
        if plan not in PLANS:
            raise ValueError(f"the long expert has no plan {plan!r} (only {', '.join(PLANS)})")
        return ("read", "summary", *steps_after_summary(spec_of(task)))

    def policy(
        self, tasks: list[Task], plan: str, tokenizer: Tokenizer, after: int = 0
    ) -> LongExpert:
        """One expert over `tasks`; ValueError for another plan or a later start."""
        if plan not in PLANS or after:
            raise ValueError(
                f"the long expert follows {' or '.join(PLANS)} from the first reply only"
            )
        return LongExpert(tasks, tokenizer, plan)

    def copy(self, task: Task, repo: Path, rng: random.Random, dest: Path) -> TaskCopy:
        """ValueError: the suite's 600 train tasks are its demonstrations."""
        raise ValueError("the long expert makes no renamed copies")


LONG_GUIDE = LongGuide()
