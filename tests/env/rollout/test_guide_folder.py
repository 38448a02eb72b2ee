"""Guided groups on a task folder made by the task generator, with real sandboxes and the
real verifier: a group that failed whole gets the gold-patch guide's episode (read, edit,
import check, finish), verified at reward 1; with recovery guidance the guide finishes the
sample whose edit was refused. The guide's own cases: tests/unit/envs/tasks/test_gold_guide.py."""

from __future__ import annotations

import asyncio

import pytest

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.generator import make_tasks
from fleetrl.envs.tasks.gold_guide import parse_patch
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.guidance import replies
from fleetrl.rollout.worker import GroupResult, Rollouts
from fleetrl.types import Completion, Task
from tests.env.envs.tasks.test_generator import FAST, write_calc_repo

TOKENIZER = bundled_tokenizer()
VERSION = 3  # the policy version the test's policies sample at


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    """Two tasks of the `calc` repository, read back from the folder the generator wrote."""
    repo = write_calc_repo(tmp_path_factory.mktemp("calc") / "calc")
    out = tmp_path_factory.mktemp("folder") / "tasks"
    make_tasks(repo, out, max_tasks=2, progress=False, jobs=2, pytest_args=FAST, val=0, heldout=0)
    return load_tasks(tasks_dir=out, split="train")


class Script:
    """A policy sending `calls`, one per turn (then `finish`), at policy version VERSION."""

    def __init__(self, *calls: ToolCall) -> None:
        self.calls = calls

    async def generate(self, prompt_ids, params) -> Completion:
        turn = TOKENIZER.decode(prompt_ids).count("<|im_start|>assistant") - 1
        call = self.calls[turn] if turn < len(self.calls) else ToolCall("finish", {})
        ids = TOKENIZER.encode(format_reply(Message("assistant", "", [call])) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [VERSION] * len(ids), "stop")


def run_group(policy, task: Task, recovery: bool = False) -> GroupResult:
    rollout = RolloutSection(guide_failed_groups=True, guide_recovery=recovery)

    async def scenario():
        rollouts = Rollouts(policy, TOKENIZER, HarnessSection(), rollout, 4, 2)
        return await rollouts.run_group(task, 2, "g")

    return asyncio.run(scenario())


def learned(segment) -> str:
    """The text of the segment's tokens in the loss."""
    pairs = zip(segment.token_ids, segment.loss_mask, strict=True)
    return TOKENIZER.decode([t for t, m in pairs if m])


def test_a_generated_tasks_group_that_failed_whole_learns_the_gold_patch(tasks):
    assert len(tasks) == 2 and all(task.suite == "" for task in tasks)
    for task in tasks:
        result = run_group(Script(), task)  # finishes at once: every sample fails
        assert result.guided, task.instance_id
        assert [t.reward for t in result.trajectories] == [0.0, 1.0]
        guided = result.trajectories[-1]
        assert guided.finish_reason == "finish" and guided.tool_errors == 0
        (segment,) = guided.segments
        assert segment.guided  # stamped as fresh as the group:
        assert segment.versions == [VERSION if m else -1 for m in segment.loss_mask]
        text = learned(segment)
        (file,) = parse_patch(task.patch)
        (hunk,) = file.hunks
        assert text.count('"read_file"') == text.count('"edit_file"') == 1
        assert f'"path": "{file.path}"' in text and hunk.new[0].strip() in text
        assert '"run"' in text and "import calc.core" in text and '"finish"' in text


def test_recovery_guidance_finishes_a_generated_tasks_refused_edit(tasks):
    task = tasks[0]
    path = parse_patch(task.patch)[0].path
    read = ToolCall("read_file", {"path": path})
    slip = ToolCall("edit_file", {"path": path, "old": "no such line", "new": "x"})
    result = run_group(Script(read, slip), task, recovery=True)
    assert result.guided and [t.reward for t in result.trajectories] == [0.0, 1.0]
    assert [t.failed_edits for t in result.trajectories] == [1, 1]  # the sample continued
    (segment,) = result.trajectories[-1].segments
    whole = TOKENIZER.decode(segment.token_ids)
    assert '"read_file"' in whole and "no such line" in whole  # the sample's two replies...
    assert len(replies(segment)) == 3  # ... masked out of the loss: the guide's three remain
    text = learned(segment)
    assert "read_file" not in text and "no such line" not in text  # replayed: out of the loss
    assert text.count('"edit_file"') == 1 and '"finish"' in text  # the guide's retry in it
