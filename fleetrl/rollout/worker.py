"""Verified episodes: one sandbox per episode, the harness, then the verifier.

    task ─▶ fresh sandbox over its repository ─▶ run_episode (policy, tools) ─▶ changes
         ─▶ verify (pristine copy, hidden tests, anti-cheat, tool log) ─▶ Trajectory.reward

`run_group` draws N samples of one task at once (a group, the unit of group-relative
advantages); many episodes run concurrently against one policy, which is what lets the
engine batch their generations. Sandbox and verifier work runs in threads
(it waits on processes); the policy runs on the event loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from fleetrl.envs.harness import HarnessConfig, TokenPolicy, micro_harness, run_episode
from fleetrl.envs.sandbox import Limits, open_sandbox
from fleetrl.envs.tasks import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.inference.engine import Engine
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Task, Trajectory


@dataclass
class RolloutConfig:
    """How episodes are run and graded."""

    harness: HarnessConfig = field(default_factory=micro_harness)
    sandbox_backend: str = "auto"  # "bwrap" (isolated); "local" only for development
    sandbox_limits: Limits = field(default_factory=lambda: Limits(wall_s=30.0, memory_mb=1024))
    verify_timeout_s: float = 60.0  # the hidden tests' wall-time limit
    max_concurrent: int = 32  # episodes in flight at once (generation batches across them)
    max_concurrent_verify: int = 4  # gradings at once (each starts pytest in a sandbox)


def rollout_engine(model: Qwen3, config: RolloutConfig, seed: int = 0) -> Engine:
    """An engine sized for `config`: a decode slot and a prefix-cache slot per episode in
    flight (each turn continues its episode's previous one), contexts of the harness's
    window."""
    return Engine(
        model,
        max_batch_size=config.max_concurrent,
        max_model_len=config.harness.max_context + 8,  # + room for the reply's stop token
        seed=seed,
        prefix_cache_slots=config.max_concurrent,
    )


class Rollouts:
    """Runs verified episodes of one policy, bounding how many run at once.

    Create it inside the running event loop: it gives the loop a thread pool sized for
    the episodes, since every tool call, sandbox start and grading waits in a thread and
    asyncio's default pool (a handful of threads) would queue them behind each other.
    """

    def __init__(self, policy: TokenPolicy, tokenizer: Tokenizer, config: RolloutConfig) -> None:
        workers = 2 * config.max_concurrent + config.max_concurrent_verify + 4
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers))
        self.policy = policy
        self.tokenizer = tokenizer
        self.config = config
        self._episodes = asyncio.Semaphore(config.max_concurrent)
        self._gradings = asyncio.Semaphore(config.max_concurrent_verify)

    async def run_one(self, task: Task, group_id: str = "") -> Trajectory:
        """One episode on `task`, graded; the trajectory carries reward and flags."""
        config = self.config
        async with self._episodes:
            repo = await asyncio.to_thread(ensure_repo, task)
            sandbox = await asyncio.to_thread(
                open_sandbox, repo, config.sandbox_backend, config.sandbox_limits
            )
            try:
                episode = await run_episode(
                    self.policy, self.tokenizer, sandbox, task, config.harness, group_id
                )
                changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
            finally:
                await asyncio.to_thread(sandbox.close)
        calls = [(record.name, record.arguments) for record in episode.tool_log]
        async with self._gradings:
            result = await asyncio.to_thread(
                verify, task, changes, calls, timeout=config.verify_timeout_s
            )
        trajectory = episode.trajectory
        trajectory.reward = result.reward
        trajectory.flags = result.flags
        return trajectory

    async def run_group(self, task: Task, samples: int, group_id: str) -> list[Trajectory]:
        """`samples` concurrent episodes of one task sharing `group_id`."""
        return list(await asyncio.gather(*(self.run_one(task, group_id) for _ in range(samples))))
