"""Verified episodes: one sandbox per episode, the harness, then the verifier.

    task ─▶ fresh sandbox over its repository ─▶ run_episode (policy, tools) ─▶ changes
         ─▶ verify (pristine copy, hidden tests, anti-cheat, tool log) ─▶ Trajectory.reward

`run_group` draws N samples of one task at once (a group, the unit of group-relative
advantages); many episodes run concurrently against one policy, which is what lets the
engine batch their generations. Sandbox and verifier work runs in threads
(it waits on processes); the policy runs on the event loop.

An episode that raises (policy or engine error, sandbox that does not start, verifier
crash) is a failed episode, not a failed group: it is logged with its traceback and
counted by reason (`failure_reason`). The group keeps its other samples when at least
MIN_GROUP remain (a group-relative advantage compares a sample with the others), and is
dropped otherwise (`settle_group`); either way its failures are reported. A group that
failed whole can be guided (`rollout.guide_failed_groups`): one failed sample gives way to
a verified episode of the task's guide (`fleetrl.envs.tasks.suites.guide_for`: the micro
expert, or the gold-patch guide of a task folder), which the trainer learns off-policy;
with `rollout.guide_recovery` the guide finishes a sample whose edit was refused
(`fleetrl.rollout.guidance`). Cancellation
(shutdown) is not a failure and propagates. `run_one` alone still raises: a caller that
runs single episodes (evaluation, demonstrations) decides for itself.

With `rollout.harness = "mini-swe-agent"` an episode runs inside that package instead
(`fleetrl.rollout.mswe`): the Rollouts serve their engine as a recording endpoint on
localhost (started with the first episode, stopped by `close`), the agent samples through
it, and the session's segments are the trajectory; grading and groups are the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.harness.handover import Handover, Recorded
from fleetrl.envs.harness.loop import TokenPolicy, run_episode
from fleetrl.envs.sandbox import Limits, open_sandbox
from fleetrl.envs.tasks.guide import FIX, RECOVER, Guide
from fleetrl.envs.tasks.suites import guide_for
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.inference.backends import RolloutEngine, open_engine
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.guidance import mask_replies, recovery_room, refused_prefix
from fleetrl.types import SamplingParams, Task, Trajectory

if TYPE_CHECKING:
    from fleetrl.rollout.mswe import LocalEndpoint, ScriptedEngine

log = logging.getLogger(__name__)

MIN_GROUP = 2  # samples a group needs for group-relative advantages


@dataclass
class GroupResult:
    """A finished group: the episodes that completed, and why the others failed."""

    trajectories: list[Trajectory]  # completed episodes; empty when the group was dropped
    failures: dict[str, int]  # failed episodes by reason (`failure_reason`)
    dropped: bool = False  # too few episodes completed: none of the group is trained on
    draws: int = 1  # more when `rollout.explore_rounds` drew a group that failed whole again
    guided: bool = False  # one failed sample was replaced by the guide's episode


def failure_reason(err: BaseException) -> str:
    """A failed episode's reason, short enough to count by: the exception's type and the
    first line of its message, cut at 80 characters."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:80]}" if lines else type(err).__name__


def settle_group(outcomes: list[Trajectory | Exception]) -> GroupResult:
    """The group rule: without failures the group is whole; with failures it keeps its
    completed episodes if at least MIN_GROUP remain, and is dropped otherwise."""
    trajectories = [o for o in outcomes if isinstance(o, Trajectory)]
    failures = Counter(failure_reason(o) for o in outcomes if isinstance(o, Exception))
    if failures and len(trajectories) < MIN_GROUP:
        return GroupResult([], dict(failures), dropped=True)
    return GroupResult(trajectories, dict(failures))


def engine_window(harness: HarnessSection) -> int:
    """The context an engine serving `harness` needs: its window, and room for the reply's
    stop token."""
    return harness.max_context + 8


def rollout_engine(model: Qwen3, harness: HarnessSection, episodes: int, seed: int = 0) -> Engine:
    """A built-in engine sized for `episodes` in flight: a decode slot and a prefix-cache
    slot per episode (each turn continues its episode's previous one), contexts of the
    harness's window."""
    return Engine(
        model,
        max_batch_size=episodes,
        max_model_len=engine_window(harness),
        seed=seed,
        prefix_cache_slots=episodes,
    )


def open_rollout_engine(
    checkpoint: Path, harness: HarnessSection, rollout: RolloutSection, episodes: int, seed: int
) -> RolloutEngine:
    """The engine `rollout.engine` names, sized as `rollout_engine` sizes the built-in one,
    serving `checkpoint` in `rollout.engine_dtype` on `rollout.threads` cores."""
    return open_engine(
        rollout.engine,
        checkpoint,
        max_batch_size=episodes,
        max_model_len=engine_window(harness),
        dtype=rollout.engine_dtype,
        seed=seed,
        threads=rollout.threads,
    )


class Rollouts:
    """Runs verified episodes of one policy, bounding how many run at once.

    Create it inside the running event loop: it gives the loop a thread pool sized for
    the episodes, since every tool call, sandbox start and grading waits in a thread and
    asyncio's default pool (a handful of threads) would queue them behind each other.
    """

    def __init__(
        self,
        policy: TokenPolicy,
        tokenizer: Tokenizer,
        harness: HarnessSection,
        rollout: RolloutSection,
        episodes: int,
        gradings: int,
    ) -> None:
        """`episodes` run at once (generation batches across them), `gradings` of them are
        graded at once (each starts pytest in a sandbox)."""
        workers = 2 * episodes + gradings + 4
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers))
        self.policy = policy
        self.tokenizer = tokenizer
        self.harness = harness
        self.rollout = rollout
        self.sampling = SamplingParams(temperature=rollout.temperature)
        self.limits = Limits(wall_s=rollout.sandbox_wall_s, memory_mb=rollout.sandbox_memory_mb)
        self._episodes = asyncio.Semaphore(episodes)
        self._gradings = asyncio.Semaphore(gradings)
        # rollout.harness = mini-swe-agent: the recording endpoint its model talks to,
        # started with the first episode (`fleetrl.rollout.mswe.LocalEndpoint`), under
        # "local"; a guided group's scripted expert has its own under "guide".
        # Shared by shallow copies (an evaluation's runs): one endpoint per engine.
        self._endpoint: dict[str, LocalEndpoint] = {}
        self._guide_engine: ScriptedEngine | None = None
        self._endpoint_lock = asyncio.Lock()

    async def run_one(
        self,
        task: Task,
        group_id: str = "",
        grade: bool = True,
        policy: TokenPolicy | None = None,
        sampling: SamplingParams | None = None,
    ) -> Trajectory:
        """One episode on `task`, graded; the trajectory carries reward and flags. With
        `grade=False` the verifier is skipped (reward stays 0): for a scripted policy that
        checks its own work, where grading would cost ~10x the episode. `policy` replaces
        the Rollouts' own for this episode (the guide of a guided group), `sampling` their
        sampling parameters (an evaluation episode's own seed)."""
        rollout = self.rollout
        if rollout.harness != "fleetrl":
            sampling = sampling or self.sampling
            if policy is None:
                return await self._run_mswe(task, group_id, grade, "local", sampling)
            if policy is not self._guide_engine:
                raise ValueError("mini-swe-agent episodes sample from the Rollouts' engines")
            return await self._run_mswe(task, group_id, grade, "guide", sampling)
        async with self._episodes:
            repo = await asyncio.to_thread(ensure_repo, task)
            sandbox = await asyncio.to_thread(
                open_sandbox, repo, rollout.sandbox_backend, self.limits
            )
            try:
                episode = await run_episode(
                    policy or self.policy,
                    self.tokenizer,
                    sandbox,
                    task,
                    self.harness,
                    sampling or self.sampling,
                    group_id,
                    rollout.env_latency_s,
                )
                changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
            finally:
                await asyncio.to_thread(sandbox.close)
        trajectory = episode.trajectory
        if not grade:
            return trajectory
        calls = [(record.name, record.arguments) for record in episode.tool_log]
        async with self._gradings:
            result = await asyncio.to_thread(
                verify, task, changes, calls, timeout=rollout.verify_timeout_s
            )
        trajectory.reward = result.reward
        trajectory.flags = result.flags
        return trajectory

    async def _run_mswe(
        self,
        task: Task,
        group_id: str,
        grade: bool,
        engine_name: str,
        sampling: SamplingParams,
    ) -> Trajectory:
        """`run_one` inside mini-swe-agent (`rollout.harness`): the agent works in a thread
        and samples through the recording endpoint of one of this Rollouts' engines
        (`engine_name`: "local", the policy's; "guide", the scripted expert's), whose
        session gives the tokens; graded like any episode, with the commands it ran as
        the tool log."""
        from fleetrl.rollout import mswe  # the optional extra, loaded only where chosen

        engine = self.policy if engine_name == "local" else self._guide_engine
        if not isinstance(engine, RolloutEngine):
            raise ValueError("mini-swe-agent episodes sample from the Rollouts' own engine")
        async with self._endpoint_lock:
            if engine_name not in self._endpoint:
                endpoint = mswe.LocalEndpoint(engine, self.tokenizer)
                await endpoint.start()
                self._endpoint[engine_name] = endpoint
        url, rollout = self._endpoint[engine_name].url, self.rollout
        session = mswe.new_session_id(task)
        model = mswe.endpoint_model(url, session, sampling, self.harness)
        async with self._episodes:
            repo = await asyncio.to_thread(ensure_repo, task)
            sandbox = await asyncio.to_thread(
                open_sandbox, repo, rollout.sandbox_backend, self.limits
            )
            try:
                episode = await asyncio.to_thread(
                    mswe.run_mswe_agent, model, sandbox, task, self.harness
                )
                changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
            finally:
                await asyncio.to_thread(sandbox.close)
        segments = await asyncio.to_thread(mswe.session_segments, url, session)
        trajectory = mswe.episode_trajectory(episode, segments, task, group_id)
        if grade:
            async with self._gradings:
                result = await asyncio.to_thread(
                    verify, task, changes, episode.tool_calls, timeout=rollout.verify_timeout_s
                )
            trajectory.reward, trajectory.flags = result.reward, result.flags
        await asyncio.to_thread(mswe.post_reward, url, session, trajectory.reward, task.instance_id)
        return trajectory

    async def close(self) -> None:
        """Stop what the Rollouts started besides its episodes (mini-swe-agent's endpoints)."""
        for name in list(self._endpoint):
            await self._endpoint.pop(name).close()

    async def run_group(self, task: Task, samples: int, group_id: str) -> GroupResult:
        """`samples` concurrent episodes of one task sharing `group_id`; episodes that
        raise are failed episodes (`settle_group`). While every completed episode scored 0,
        the group is drawn again, up to `rollout.explore_rounds` times, and the last draw is
        the group: a task the policy solves once in 20 tries then yields a success to learn
        from, where one draw of 8 would most often fail whole and be skipped. Only the last
        draw is kept, so the group is as fresh and as large as any other. A group still
        failed whole is then guided when `rollout.guide_failed_groups` is on (`_guided`)."""
        draws = 0
        while True:
            draws += 1
            outcomes = await asyncio.gather(
                *(self._attempt(task, group_id) for _ in range(samples))
            )
            scores = [o.reward for o in outcomes if isinstance(o, Trajectory)]
            if not scores or max(scores) > 0 or draws > self.rollout.explore_rounds:
                break
        outcomes = list(outcomes)
        guided = None
        if scores and max(scores) == 0 and self.rollout.guide_failed_groups:
            guided = await self._guided(task, group_id, outcomes)
        if guided is not None:
            trajectory, continued = guided
            # the continued sample stays: its slip is what the group should learn to avoid
            kept = [i for i, o in enumerate(outcomes) if isinstance(o, Trajectory)]
            last = max([i for i in kept if i != continued] or kept)
            outcomes[last] = trajectory
        result = settle_group(outcomes)
        result.draws = draws
        result.guided = guided is not None
        if result.failures:
            kept = "dropped" if result.dropped else f"kept {len(result.trajectories)}"
            log.warning(
                "group %s of %s: %d of %d episodes failed, %s: %s",
                group_id,
                task.instance_id,
                sum(result.failures.values()),
                samples,
                kept,
                result.failures,
            )
        return result

    async def _guided(
        self, task: Task, group_id: str, failed: list[Trajectory | Exception]
    ) -> tuple[Trajectory, int | None] | None:
        """The task's guide's verified episode on `task` as a guided sample of the failed
        group, with the index of the failed sample it continued (`rollout.guide_recovery`;
        None when it started afresh, as it does where no sample can be continued or the
        continuation fails). Its tokens are stamped with the newest version the group was
        sampled at (it is as fresh as the group). None where no guide can serve the task
        (it has none or it cannot read it, or an MoE policy: the trainer would replay
        routing the guide has not) or no episode of it earned reward 1."""
        sampled = [s for o in failed if isinstance(o, Trajectory) for s in o.segments]
        if any(s.routed_experts is not None for s in sampled):
            log.warning("no guidance for %s: the expert routes no MoE experts", task.instance_id)
            return None
        version = max(v for s in sampled for v in s.versions)
        if self.rollout.harness != "fleetrl":
            trajectory = await self._mswe_guide_episode(task, group_id)
            return None if trajectory is None else (_stamp_guided(trajectory, 0, version), None)
        guide = guide_for(task)
        if guide is None:
            log.warning("no guidance for %s: no guide serves the task", task.instance_id)
            return None
        starts: list[tuple[int | None, list[list[int]]]] = []
        if self.rollout.guide_recovery:
            room = await self._recovery_room(guide, task)
            for i, outcome in enumerate(failed):
                if isinstance(outcome, Trajectory) and (
                    prefix := refused_prefix(outcome, self.tokenizer, room)
                ):
                    starts.append((i, prefix))
                    break
        starts.append((None, []))
        for continued, prefix in starts:
            trajectory = await self._guide_episode(guide, task, group_id, prefix)
            if trajectory is not None:
                return _stamp_guided(trajectory, len(prefix), version), continued
        return None

    async def _recovery_room(self, guide: Guide, task: Task) -> int:
        """Replies a failed sample may have sent for `guide` to finish it; 0 where the
        guide cannot (it reads the task's files for its plan)."""
        try:
            steps = await asyncio.to_thread(guide.steps, task, RECOVER)
        except ValueError:
            return 0
        return max(0, recovery_room(self.harness.max_turns, len(steps)))

    async def _guide_episode(
        self, guide: Guide, task: Task, group_id: str, prefix: list[list[int]]
    ) -> Trajectory | None:
        """The guide's graded episode on `task`, after replaying `prefix` (a failed
        sample's replies up to its refused edit; empty: the guide's plan from scratch),
        or None where the guide cannot read the task or its episode did not earn 1."""
        plan = RECOVER if prefix else FIX
        try:
            scripted = await asyncio.to_thread(
                guide.policy, [task], plan, self.tokenizer, len(prefix)
            )
        except ValueError as err:
            log.warning("no guidance for %s: %s", task.instance_id, err)
            return None
        policy = Handover(Recorded(prefix), len(prefix), scripted)
        trajectory = await self._attempt(task, group_id, policy)
        problems = scripted.problems[task.instance_id]
        if not isinstance(trajectory, Trajectory) or trajectory.reward != 1.0 or problems:
            start = "after a refused edit" if prefix else "from scratch"
            log.warning(
                "the guide's episode on %s %s failed: %s", task.instance_id, start, problems
            )
            return None
        return trajectory

    async def _mswe_guide_episode(self, task: Task, group_id: str) -> Trajectory | None:
        """The scripted expert's episode on `task` inside mini-swe-agent (its replies from
        the gold patch, `scripted_mswe_actions`, sampled by the guide engine behind its
        own recording endpoint), or None where the expert cannot read the task or its
        episode was not a clean success: reward 1, submitted, no format error, one
        segment."""
        from fleetrl.rollout import mswe  # the optional extra, loaded only where chosen

        try:
            replies = await asyncio.to_thread(lambda: list(mswe.scripted_mswe_actions(task)))
        except ValueError as err:
            log.warning("no guidance for %s: %s", task.instance_id, err)
            return None
        if self._guide_engine is None:
            policy = self.policy
            assert isinstance(policy, RolloutEngine)  # _run_mswe checked it for the group
            # The guide computes nothing: any model of the policy's shape sizes its cache.
            model = policy.model if isinstance(policy, Engine) else init_model(policy.config)
            self._guide_engine = mswe.ScriptedEngine(
                model, self.tokenizer, {}, policy.max_model_len
            )
        self._guide_engine.scripts[task.problem_statement] = replies
        trajectory = await self._attempt(task, group_id, self._guide_engine)
        if (
            not isinstance(trajectory, Trajectory)
            or trajectory.reward != 1.0
            or trajectory.finish_reason != "finish"
            or trajectory.tool_errors
            or len(trajectory.segments) != 1
        ):
            log.warning("the guide's episode on %s inside mini-swe-agent failed", task.instance_id)
            return None
        return trajectory

    async def _attempt(
        self, task: Task, group_id: str, policy: TokenPolicy | None = None
    ) -> Trajectory | Exception:
        """One graded episode, or the exception that ended it (logged with its traceback)."""
        try:
            return await self.run_one(task, group_id, policy=policy)
        except Exception as err:  # CancelledError is a BaseException: shutdown goes through
            log.warning(
                "episode of %s in group %s failed", task.instance_id, group_id, exc_info=err
            )
            return err


def _stamp_guided(trajectory: Trajectory, replayed: int, version: int) -> Trajectory:
    """`trajectory` (a guide's episode) as a guided sample: its first `replayed` replies
    (all in its first context window) out of the loss, its tokens stamped with `version`
    (the newest its group was sampled at: it is as fresh as the group)."""
    mask_replies(trajectory.segments[0], replayed)
    for segment in trajectory.segments:
        segment.guided = True
        segment.versions = [version if m else -1 for m in segment.loss_mask]
    return trajectory
