"""Policies made of others: recorded replies in order, and a hand-over after n turns."""

import asyncio

import pytest

from fleetrl.envs.harness.handover import Handover, Recorded
from fleetrl.types import Completion, SamplingParams

STOP = 9
PARAMS = SamplingParams(max_tokens=16, stop_token_ids=[STOP])


class Echo:
    """Replies the prompt's length, then the stop token."""

    async def generate(self, prompt_ids, params):
        ids = [len(prompt_ids), STOP]
        return Completion(list(prompt_ids), ids, [-0.5, -0.5], [3, 3], "stop")


def replies(policy, prompts):
    async def scenario():
        return [await policy.generate(p, PARAMS) for p in prompts]

    return asyncio.run(scenario())


def test_recorded_replies_come_in_order_and_say_whether_they_stopped():
    first, second = replies(Recorded([[1, 2, STOP], [4, 5]]), [[7], [7, 8]])
    assert (first.token_ids, first.finish_reason, first.prompt_ids) == ([1, 2, STOP], "stop", [7])
    assert (second.token_ids, second.finish_reason) == ([4, 5], "length")
    assert first.logprobs == [0.0] * 3 and first.versions == [0] * 3


def test_handover_gives_the_first_turns_to_one_policy_and_the_rest_to_the_other():
    policy = Handover(Recorded([[1, STOP], [2, STOP]]), 2, Echo())
    out = replies(policy, [[0], [0, 0], [0, 0, 0], [0] * 4])
    assert [c.token_ids for c in out] == [[1, STOP], [2, STOP], [3, STOP], [4, STOP]]


def test_a_recording_asked_past_its_last_reply_raises():
    with pytest.raises(IndexError):
        replies(Recorded([[1, STOP]]), [[0], [0]])
