"""Verified episodes and evaluation: scripted policies graded by the real verifier."""

import asyncio

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.suites import get_task
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.session import evaluate_policy
from fleetrl.rollout.stats import summarise
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Completion, SamplingParams

TOKENIZER = bundled_tokenizer()
HARNESS, ROLLOUT = HarnessSection(), RolloutSection()


class Fixer:
    """A policy that fixes micro-train-0007 when `good`, and breaks nothing otherwise."""

    def __init__(self, good: bool) -> None:
        edit = {"path": "nkims.py", "old": "xut = 1", "new": "xut = 0" if good else "xut = 2"}
        self.replies = [
            Message("assistant", "", [ToolCall("edit_file", edit)]),
            Message("assistant", "", [ToolCall("finish", {})]),
        ]
        self.calls = 0

    async def generate(self, prompt_ids, params: SamplingParams) -> Completion:
        reply = self.replies[self.calls % 2]  # episodes run one after another: edit, finish
        self.calls += 1
        ids = TOKENIZER.encode(format_reply(reply) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [0] * len(ids), "stop")


def test_verified_episodes_carry_reward_and_group():
    task = get_task("micro-train-0007")

    async def scenario():
        good = Rollouts(Fixer(good=True), TOKENIZER, HARNESS, ROLLOUT, 32, 4)
        group = (await good.run_group(task, 1, group_id="g1")).trajectories
        bad = Rollouts(Fixer(good=False), TOKENIZER, HARNESS, ROLLOUT, 32, 4)
        failed = await bad.run_one(task)
        return group, failed

    (fixed,), failed = asyncio.run(scenario())
    assert (fixed.reward, fixed.group_id, fixed.finish_reason) == (1.0, "g1", "finish")
    assert failed.reward == 0.0 and failed.flags == []


def test_evaluate_policy_summary():
    task = get_task("micro-train-0007")

    async def scenario():
        rollouts = Rollouts(Fixer(good=True), TOKENIZER, HARNESS, ROLLOUT, 1, 4)
        return await evaluate_policy(rollouts, [task], samples_per_task=2)

    result = asyncio.run(scenario())
    assert (result.pass_at_1, result.episodes, result.tasks) == (1.0, 2, 1)
    assert result.finish_reasons == {"finish": 2}
    assert result.ci_high == 1.0 and result.ci_low < 1.0
    assert summarise([], 0, 0.0).pass_at_1 == 0.0
