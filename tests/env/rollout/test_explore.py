"""Exploration rounds, with real sandboxes and the real verifier: a group that failed whole
is drawn again until one sample succeeds, and the last draw is the group."""

import asyncio

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.suites import get_task
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Completion, SamplingParams

TOKENIZER = bundled_tokenizer()
TASK = "micro-train-0007"


class LateFixer:
    """Its first `misses` episodes of micro-train-0007 make the wrong edit, the later ones
    the right one; each episode then finishes."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.episodes = 0

    async def generate(self, prompt_ids, params: SamplingParams) -> Completion:
        if "<tool_response>" in TOKENIZER.decode(prompt_ids):
            reply = Message("assistant", "", [ToolCall("finish", {})])
        else:
            self.episodes += 1
            fixed = "xut = 2" if self.episodes <= self.misses else "xut = 0"
            edit = {"path": "nkims.py", "old": "xut = 1", "new": fixed}
            reply = Message("assistant", "", [ToolCall("edit_file", edit)])
        ids = TOKENIZER.encode(format_reply(reply) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [0] * len(ids), "stop")


def group_rewards(policy: LateFixer, explore_rounds: int) -> list[float]:
    """The rewards of one group of 2 samples, in the order the episodes were drawn."""
    rollout = RolloutSection(explore_rounds=explore_rounds)

    async def scenario():
        rollouts = Rollouts(policy, TOKENIZER, HarnessSection(), rollout, 8, 4)
        return await rollouts.run_group(get_task(TASK), 2, "g")

    result = asyncio.run(scenario())
    assert {t.group_id for t in result.trajectories} == {"g"}
    assert result.draws == policy.episodes // 2
    return [t.reward for t in result.trajectories]


def test_a_group_that_failed_whole_is_drawn_again_until_a_sample_succeeds():
    policy = LateFixer(misses=3)  # the first draw fails whole, the second half
    assert sorted(group_rewards(policy, explore_rounds=2)) == [0.0, 1.0]
    assert policy.episodes == 4


def test_exploration_stops_after_its_rounds():
    policy = LateFixer(misses=99)
    assert group_rewards(policy, explore_rounds=2) == [0.0] * 2
    assert policy.episodes == 6


def test_without_exploration_or_after_a_success_the_group_is_not_drawn_again():
    assert group_rewards(LateFixer(misses=99), explore_rounds=0) == [0.0] * 2
    assert group_rewards(LateFixer(misses=0), explore_rounds=2) == [1.0] * 2
