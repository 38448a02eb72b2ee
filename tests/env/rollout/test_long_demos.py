"""The long expert's demonstrations through the rollout worker, real sandboxes and the
verifier: one demo per context window, the first ending on the summary and the second
opening on it; and the same tasks without summarisation fail, because their reads do not
fit one window (a policy that reads both files without summarising fills it, and fixes
the task when given room)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from fleetrl.config import HarnessSection
from fleetrl.config_files import load_config
from fleetrl.envs.harness.loop import task_prompt
from fleetrl.envs.long import suite as long
from fleetrl.envs.tasks.guide import scripted_completion
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.chat import (
    GENERATION_PROMPT,
    IM_END,
    Message,
    ToolCall,
    encode_chat,
    format_reply,
)
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.demos import generate_demos
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Completion, SamplingParams, Task, Trajectory

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
CONFIG = load_config(Path("long"))
OFF = CONFIG.harness.model_copy(update={"summarise_at": 0.0})


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    """The first train task of each kind."""
    firsts: dict[str, Task] = {}
    for task in load_tasks(suite="long", split="train"):
        firsts.setdefault(task.kind, task)
    assert list(firsts) == ["value", "chain", "multi"]
    return list(firsts.values())


def test_the_expert_gives_two_demos_per_task_split_at_its_summary(tasks: list[Task]) -> None:
    harness = CONFIG.harness
    assert harness.summary_limit("long") is not None
    demos, stats = generate_demos(
        tasks, TOKENIZER, harness, CONFIG.rollout, ["fix"], progress=False
    )
    assert (stats.episodes, stats.graded, stats.dropped) == (3, 3, {})
    assert stats.kept == len(demos) == 6
    assert [d.task_id for d in demos] == [t.instance_id for t in tasks for _ in range(2)]
    assert {d.plan for d in demos} == {"fix"}
    for task, first, second in zip(tasks, demos[::2], demos[1::2], strict=True):
        spec = long.spec_of(task)
        for demo in (first, second):
            assert len(demo.token_ids) == len(demo.loss_mask) <= harness.max_context
        # The first window ends with the summary, learned, holding every fact.
        learned = [t for t, m in zip(first.token_ids, first.loss_mask, strict=True) if m]
        summary = TOKENIZER.encode(spec.summary + IM_END)
        assert first.token_ids[-len(summary) :] == summary
        assert first.loss_mask[-len(summary) :] == [1] * len(summary)
        assert learned[-len(summary) :] == summary
        assert all(fact in spec.summary for fact in task.facts)
        assert harness.summary_prompt in TOKENIZER.decode(first.token_ids)
        # The second opens on system + task + the summary, learned from there on only.
        resume = Message("user", harness.resume_template.format(summary=spec.summary))
        opening = encode_chat(TOKENIZER, [*task_prompt(task, harness), resume], None)
        assert second.token_ids[: len(opening)] == opening
        assert second.loss_mask[: len(opening)] == [0] * len(opening)
        text = TOKENIZER.decode(second.token_ids)
        assert f'"path": "{spec.second}"' in text and "finish" in text
        assert spec.files[0][1] not in text  # the big file stayed in the first window


def test_terse_episodes_teach_their_notes_only(tasks: list[Task]) -> None:
    """Plan `terse`: the verifier passes the episode, and its one demo is the first
    window, the notes learned; the second window, all unlearned replies, is no demo."""
    harness = CONFIG.harness
    demos, stats = generate_demos(
        tasks, TOKENIZER, harness, CONFIG.rollout, ["terse"], progress=False
    )
    assert (stats.episodes, stats.graded, stats.dropped) == (3, 3, {})
    assert [d.task_id for d in demos] == [t.instance_id for t in tasks]
    for task, demo in zip(tasks, demos, strict=True):
        notes = TOKENIZER.encode(long.spec_of(task).terse + IM_END)
        assert demo.token_ids[-len(notes) :] == notes
        learned = [t for t, m in zip(demo.token_ids, demo.loss_mask, strict=True) if m]
        assert learned[-len(notes) :] == notes
        assert "read_file" in TOKENIZER.decode(learned)


def test_without_summarisation_the_expert_makes_no_demos(tasks: list[Task]) -> None:
    demos, stats = generate_demos(tasks, TOKENIZER, OFF, CONFIG.rollout, ["fix"], progress=False)
    assert demos == [] and stats.kept == 0
    assert stats.dropped == {
        f"{t.instance_id}/fix": "no summary was asked for after the big file's read" for t in tasks
    }


class ReadsBoth:
    """Reads the big file, then the small one, then makes the gold edits and finishes:
    the fix without a summary, which needs both reads in one window."""

    def __init__(self, tasks: list[Task]) -> None:
        self.specs = {task.problem_statement: long.spec_of(task) for task in tasks}

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        context = TOKENIZER.decode(prompt_ids)
        (spec,) = (s for statement, s in self.specs.items() if statement in context)
        calls = [
            ToolCall("read_file", {"path": spec.first}),
            ToolCall("read_file", {"path": spec.second}),
            *(
                ToolCall("edit_file", {"path": e.path, "old": e.old, "new": e.new})
                for e in spec.edits
            ),
            ToolCall("finish", {}),
        ]
        turn = context.count(GENERATION_PROMPT) - 1
        ids = TOKENIZER.encode(format_reply(Message("assistant", "", [calls[turn]])) + IM_END)
        return scripted_completion(prompt_ids, ids, params, TOKENIZER.eos_id, [])


def graded(tasks: list[Task], harness: HarnessSection) -> list[Trajectory]:
    async def run() -> list[Trajectory]:
        rollouts = Rollouts(ReadsBoth(tasks), TOKENIZER, harness, CONFIG.rollout, 3, 3)
        return await asyncio.gather(*(rollouts.run_one(task) for task in tasks))

    return asyncio.run(run())


def test_the_tasks_need_more_than_one_window(tasks: list[Task]) -> None:
    """Reading both files fills the `long` window: context_full, reward 0. With room
    for both reads the same policy fixes every task."""
    for trajectory in graded(tasks, OFF):
        assert (trajectory.finish_reason, trajectory.reward) == ("context_full", 0.0)
        assert trajectory.turns == 2 and trajectory.summaries == []
    roomy = OFF.model_copy(update={"max_context": 4096, "max_tokens": 4096})
    for trajectory in graded(tasks, roomy):
        assert (trajectory.finish_reason, trajectory.reward) == ("finish", 1.0)
        assert len(trajectory.segments) == 1
        assert len(trajectory.segments[0].token_ids) > long.WINDOW
