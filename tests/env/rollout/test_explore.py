"""Exploration rounds, with real sandboxes and the real verifier: a group that failed whole
is drawn again until one sample succeeds, and the last draw is the group."""

import asyncio

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.suites import get_task
from fleetrl.rollout.worker import Rollouts
from tests.env.rollout.test_failures import TASK, TOKENIZER, FlakyFixer


def group_rewards(policy: FlakyFixer, explore_rounds: int) -> list[float]:
    """The rewards of one group of 2 samples, in the order the episodes were drawn."""
    rollout = RolloutSection(explore_rounds=explore_rounds)

    async def scenario():
        rollouts = Rollouts(policy, TOKENIZER, HarnessSection(), rollout, 8, 4)
        return await rollouts.run_group(get_task(TASK), 2, "g")

    result = asyncio.run(scenario())
    assert {t.group_id for t in result.trajectories} == {"g"}
    assert result.draws == policy.first_turns // 2
    return [t.reward for t in result.trajectories]


def test_a_group_that_failed_whole_is_drawn_again_until_a_sample_succeeds():
    policy = FlakyFixer(misses=3)  # the first draw fails whole, the second half
    assert sorted(group_rewards(policy, explore_rounds=2)) == [0.0, 1.0]
    assert policy.first_turns == 4


def test_exploration_stops_after_its_rounds():
    policy = FlakyFixer(misses=99)
    assert group_rewards(policy, explore_rounds=2) == [0.0] * 2
    assert policy.first_turns == 6


def test_without_exploration_or_after_a_success_the_group_is_not_drawn_again():
    assert group_rewards(FlakyFixer(misses=99), explore_rounds=0) == [0.0] * 2
    assert group_rewards(FlakyFixer(misses=0), explore_rounds=2) == [1.0] * 2
