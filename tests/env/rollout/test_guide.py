"""Guided groups, with real sandboxes, the real verifier and the scripted expert: a group
that failed whole gets one sample replaced by the expert's verified episode, stamped as
fresh as the group; with recovery guidance the expert finishes a sample whose edit was
refused, its replayed replies masked out of the loss."""

import asyncio
from dataclasses import replace

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.suites import get_task
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.rollout.guidance import replies
from fleetrl.rollout.worker import GroupResult, Rollouts
from fleetrl.types import Completion
from tests.env.rollout.test_failures import TASK, TOKENIZER, FlakyFixer

VERSION = 5  # the policy version the test's policy samples at


class FreshFixer(FlakyFixer):
    """FlakyFixer sampling at policy version VERSION."""

    async def generate(self, prompt_ids, params):
        completion = await super().generate(prompt_ids, params)
        completion.versions = [VERSION] * len(completion.token_ids)
        return completion


def run_group(
    policy,
    guide: bool,
    explore_rounds: int = 0,
    task=None,
    recovery: bool = False,
    harness: HarnessSection | None = None,
) -> GroupResult:
    rollout = RolloutSection(
        guide_failed_groups=guide, explore_rounds=explore_rounds, guide_recovery=recovery
    )

    async def scenario():
        rollouts = Rollouts(policy, TOKENIZER, harness or HarnessSection(), rollout, 8, 4)
        return await rollouts.run_group(task or get_task(TASK), 3, "g")

    return asyncio.run(scenario())


def test_a_group_that_failed_whole_is_guided_by_the_experts_episode():
    result = run_group(FreshFixer(misses=99), guide=True)
    assert result.guided and not result.dropped
    assert [t.reward for t in result.trajectories] == [0.0, 0.0, 1.0]
    expert = result.trajectories[-1]
    assert expert.group_id == "g" and expert.finish_reason == "finish"
    (segment,) = expert.segments
    assert segment.guided
    assert segment.versions == [VERSION if m else -1 for m in segment.loss_mask]
    assert "edit_file" in TOKENIZER.decode(segment.token_ids)
    assert not any(s.guided for t in result.trajectories[:-1] for s in t.segments)


def test_guidance_comes_after_the_explore_rounds():
    policy = FreshFixer(misses=3)  # the first draw fails whole, the second succeeds
    result = run_group(policy, guide=True, explore_rounds=1)
    assert not result.guided and result.draws == 2
    assert [t.reward for t in result.trajectories] == [1.0] * 3


def test_no_guidance_when_off_or_when_a_sample_succeeds():
    off = run_group(FreshFixer(misses=99), guide=False)
    assert not off.guided and [t.reward for t in off.trajectories] == [0.0] * 3
    solved = run_group(FreshFixer(misses=2), guide=True)
    assert not solved.guided and sorted(t.reward for t in solved.trajectories) == [0, 0, 1]


def test_a_task_the_expert_cannot_read_stays_unguided():
    task = replace(get_task(TASK), patch="not a diff")
    result = run_group(FreshFixer(misses=99), guide=True, task=task)
    assert not result.guided and [t.reward for t in result.trajectories] == [0.0] * 3


class MoeFixer(FreshFixer):
    """FreshFixer as an MoE policy: every position routed to expert 0 of one layer."""

    async def generate(self, prompt_ids, params):
        completion = await super().generate(prompt_ids, params)
        completion.prompt_routed_experts = [[[0]]] * len(prompt_ids)
        completion.routed_experts = [[[0]]] * len(completion.token_ids)
        return completion


def test_an_moe_policys_group_stays_unguided():
    result = run_group(MoeFixer(misses=99), guide=True)
    assert result.trajectories[0].segments[0].routed_experts is not None
    assert not result.guided and [t.reward for t in result.trajectories] == [0.0] * 3


class Slipper:
    """Reads nkims.py, sends an edit whose `old` is mis-copied (refused), then finishes;
    with `applied_first`, it first applies a wrong edit."""

    def __init__(self, applied_first: bool = False) -> None:
        wrong = ToolCall("edit_file", {"path": "nkims.py", "old": "xut = 1", "new": "xut = 2"})
        slip = ToolCall("edit_file", {"path": "nkims.py", "old": "xut = 7", "new": "xut = 0"})
        read = ToolCall("read_file", {"path": "nkims.py"})
        self.calls = [read, *([wrong] if applied_first else []), slip, ToolCall("finish", {})]

    async def generate(self, prompt_ids, params):
        turn = TOKENIZER.decode(prompt_ids).count("<|im_start|>assistant") - 1
        reply = Message("assistant", "", [self.calls[turn]])
        ids = TOKENIZER.encode(format_reply(reply) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [VERSION] * len(ids), "stop")


def test_recovery_guidance_finishes_the_sample_whose_edit_was_refused():
    result = run_group(Slipper(), guide=True, recovery=True)
    assert result.guided
    assert [t.reward for t in result.trajectories] == [0.0, 0.0, 1.0]
    assert [t.failed_edits for t in result.trajectories] == [1, 1, 1]
    (segment,) = result.trajectories[-1].segments
    text = TOKENIZER.decode(segment.token_ids)
    assert text.count('"read_file"') == 1 and '"old": "xut = 7"' in text  # the sample's turns
    pairs = zip(segment.token_ids, segment.loss_mask, strict=True)
    learned = TOKENIZER.decode([t for t, m in pairs if m])
    assert "read_file" not in learned and "xut = 7" not in learned  # ... out of the loss
    assert '"new": "xut = 0"' in learned and '"finish"' in learned  # the expert's retry in it
    assert segment.guided
    assert segment.versions == [VERSION if m else -1 for m in segment.loss_mask]


def test_a_sample_that_applied_an_edit_first_is_not_continued():
    result = run_group(Slipper(applied_first=True), guide=True, recovery=True)
    assert result.guided and result.trajectories[-1].failed_edits == 0  # afresh
    (segment,) = result.trajectories[-1].segments
    first, _ = replies(segment)[0]
    assert segment.loss_mask[first] == 1  # the expert's own read is learned


def test_without_recovery_guidance_the_expert_starts_afresh():
    result = run_group(Slipper(), guide=True, recovery=False)
    assert result.guided and result.trajectories[-1].failed_edits == 0


def test_a_refusal_too_late_for_the_experts_three_turns_is_not_continued():
    harness = HarnessSection(max_turns=4)  # room for one reply before the expert's three
    result = run_group(Slipper(), guide=True, recovery=True, harness=harness)
    assert result.guided and result.trajectories[-1].failed_edits == 0  # afresh
