"""Failed episodes, with real sandboxes and the real verifier: the group goes on without
them (or is dropped below two samples), each failure counted by reason; cancellation is
not a failure."""

import asyncio

import pytest

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.suites import get_task
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout import worker
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Completion, SamplingParams

TOKENIZER = bundled_tokenizer()
HARNESS, ROLLOUT = HarnessSection(), RolloutSection()
TASK = "micro-train-0007"


class FlakyFixer:
    """Fixes micro-train-0007 (edit, then finish), but the first `failures` episodes raise
    on their first turn, like an engine step that fails their request, and the next
    `misses` make the wrong edit (they finish and fail the tests)."""

    def __init__(self, failures: int = 0, misses: int = 0) -> None:
        self.failures = failures
        self.misses = misses
        self.first_turns = 0

    async def generate(self, prompt_ids, params: SamplingParams) -> Completion:
        if "<tool_response>" in TOKENIZER.decode(prompt_ids):
            reply = Message("assistant", "", [ToolCall("finish", {})])
        else:
            self.first_turns += 1
            if self.first_turns <= self.failures:
                raise RuntimeError("engine step failed")
            wrong = self.first_turns <= self.failures + self.misses
            edit = {"path": "nkims.py", "old": "xut = 1", "new": "xut = 2" if wrong else "xut = 0"}
            reply = Message("assistant", "", [ToolCall("edit_file", edit)])
        ids = TOKENIZER.encode(format_reply(reply) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [0] * len(ids), "stop")


def run_group(policy, samples: int = 3):
    async def scenario():
        rollouts = Rollouts(policy, TOKENIZER, HARNESS, ROLLOUT, 8, 4)
        return await rollouts.run_group(get_task(TASK), samples, "g")

    return asyncio.run(scenario())


def test_a_failed_episode_leaves_the_rest_of_its_group():
    result = run_group(FlakyFixer(failures=1))
    assert not result.dropped
    assert result.failures == {"RuntimeError: engine step failed": 1}
    assert [(t.reward, t.group_id) for t in result.trajectories] == [(1.0, "g"), (1.0, "g")]


def test_a_group_left_with_one_sample_is_dropped_and_its_failures_counted():
    result = run_group(FlakyFixer(failures=2))
    assert result.dropped and result.trajectories == []
    assert result.failures == {"RuntimeError: engine step failed": 2}


@pytest.mark.parametrize("stage", ["open_sandbox", "verify"])
def test_a_sandbox_or_verifier_that_raises_fails_one_episode(monkeypatch, stage):
    real = getattr(worker, stage)
    calls = []

    def first_call_raises(*args, **kwargs):
        calls.append(stage)
        if len(calls) == 1:
            raise OSError(f"{stage} broke")
        return real(*args, **kwargs)

    monkeypatch.setattr(worker, stage, first_call_raises)
    result = run_group(FlakyFixer())
    assert result.failures == {f"OSError: {stage} broke": 1}
    assert [t.reward for t in result.trajectories] == [1.0, 1.0]


def test_cancelling_a_group_cancels_it_rather_than_failing_episodes(caplog):
    class Stuck:
        calls = 0

        async def generate(self, prompt_ids, params):
            Stuck.calls += 1
            await asyncio.Event().wait()

    async def scenario():
        rollouts = Rollouts(Stuck(), TOKENIZER, HARNESS, ROLLOUT, 8, 4)
        group = asyncio.create_task(rollouts.run_group(get_task(TASK), 3, "g"))
        while Stuck.calls < 3:
            await asyncio.sleep(0.05)
        group.cancel()
        with pytest.raises(asyncio.CancelledError):
            await group

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert not [r for r in caplog.records if r.name == worker.__name__]  # no failed episode
