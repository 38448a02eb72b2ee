"""Token policies made of others: replies recorded earlier, and a hand-over mid-episode.

    Handover(first, turns, then): replies 1..turns from `first`, the rest from `then`

Two uses: recovery guidance replays a failed sample's replies (`Recorded`) and lets the
scripted expert go on from its refused edit (`fleetrl.rollout.guidance`); evaluation
after a slip lets the expert read the file and send a refused edit, then hands the
episode to the model under test (`fleetrl eval --after-slip`). One instance serves one
episode: it counts that episode's turns.
"""

from __future__ import annotations

from fleetrl.envs.harness.loop import TokenPolicy
from fleetrl.types import Completion, SamplingParams


class Recorded:
    """A TokenPolicy that sends `sent`, one reply per turn, whatever the context."""

    def __init__(self, sent: list[list[int]]) -> None:
        self.sent = sent
        self._turn = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """The next recorded reply (IndexError past the last)."""
        ids = self.sent[self._turn]
        self._turn += 1
        stopped = ids[-1] in params.stop_token_ids
        return Completion(
            prompt_ids=list(prompt_ids),
            token_ids=list(ids),
            logprobs=[0.0] * len(ids),
            versions=[0] * len(ids),
            finish_reason="stop" if stopped else "length",
        )


class Handover:
    """A TokenPolicy whose first `turns` replies are `first`'s and the rest `then`'s."""

    def __init__(self, first: TokenPolicy, turns: int, then: TokenPolicy) -> None:
        self.first = first
        self.turns = turns
        self.then = then
        self._turn = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """`first`'s reply for the first `turns` turns, `then`'s after."""
        self._turn += 1
        policy = self.first if self._turn <= self.turns else self.then
        return await policy.generate(prompt_ids, params)
