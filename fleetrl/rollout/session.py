"""Evaluation runs: every task of a list, N samples at one temperature, through one engine.

    checkpoint ─▶ one engine, one Rollouts (`in_session`)
               ─▶ runs given together (`Session.run`): concurrent, sharing its episodes
                  in flight; each graded episode ─▶ progress bar, transcript line
               ─▶ per run: `evaluate_policy` ─▶ EvalResult (`fleetrl.rollout.stats`)

Every run of one checkpoint goes through one engine (the temperature is per request), so
a whole temperature sweep, plus the greedy run of the reported split, is one batch. With a
seed, sample k of a task draws from a seed of its own, so the same seed gives the same
episodes however they were batched. `after_slip`: each episode opens with the task's
guide's slip (`fleetrl.envs.tasks.guide.slip_opening`: the scripted micro expert reads the
file and sends a mis-copied edit, which the tool refuses), and the model takes over.

Not covered: which runs to make (the protocol, `fleetrl.rollout.evaluate`); models served
elsewhere (`fleetrl.envs.harness.loop.run_episode_openai` runs their episodes).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, TypeVar

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig
from fleetrl.envs.harness.loop import TokenPolicy
from fleetrl.envs.tasks import guide
from fleetrl.envs.tasks.suites import guide_for
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.stats import EvalError, EvalResult, summarise
from fleetrl.rollout.worker import Rollouts, open_rollout_engine
from fleetrl.types import Task, Trajectory

_T = TypeVar("_T")


def _slip_opening(task: Task, tokenizer: Tokenizer, model: TokenPolicy) -> TokenPolicy:
    """`guide.slip_opening` by the task's guide; EvalError for a task whose guide cannot
    (only the micro expert slips)."""
    task_guide = guide_for(task)
    try:
        if task_guide is None:
            raise ValueError("no guide serves it")
        return guide.slip_opening(task_guide, task, tokenizer, model)
    except ValueError as err:
        raise EvalError(f"after a slip: {task.instance_id} is no micro task ({err})") from None


async def evaluate_policy(
    rollouts: Rollouts,
    tasks: list[Task],
    samples_per_task: int,
    on_episode: Callable[[Trajectory], None] | None = None,
    after_slip: bool = False,
) -> EvalResult:
    """Run and grade `samples_per_task` episodes of every task at `rollouts`' temperature
    (`on_episode` is called as each one is graded, e.g. to advance a progress bar).
    With a seed in `rollouts.sampling`, sample k of a task draws from a seed of its own
    (`SamplingParams.reseeded`), so the same seed gives the same episodes however they were
    batched, and every model and temperature meets the same draws.
    `after_slip`: each episode opens with the expert's slip (`guide.slip_opening`); episodes
    where the expert found no mis-copy to send (no edit refused) are left out."""
    start = time.monotonic()

    async def graded(task: Task, sample: int) -> Trajectory:
        policy = _slip_opening(task, rollouts.tokenizer, rollouts.policy) if after_slip else None
        sampling = rollouts.sampling.reseeded(task.instance_id, sample)
        trajectory = await rollouts.run_one(task, policy=policy, sampling=sampling)
        if on_episode is not None:
            on_episode(trajectory)
        return trajectory

    episodes = [graded(task, k) for task in tasks for k in range(samples_per_task)]
    trajectories = list(await asyncio.gather(*episodes))
    if after_slip:
        trajectories = [t for t in trajectories if t.failed_edits > 0]
    temperature = rollouts.sampling.temperature
    kept = len({t.task_id for t in trajectories})
    return summarise(trajectories, kept, time.monotonic() - start, temperature)


@dataclass
class Run:
    """One run to do: every task of `tasks`, `samples` times, at `temperature`."""

    tasks: list[Task]
    temperature: float
    samples: int
    label: str  # progress bar description
    after_slip: bool = False  # each episode opens with the expert's slip (`evaluate_policy`)


class Session:
    """One checkpoint behind one engine: runs given together go through it concurrently
    and share its budget of episodes in flight; one progress bar per run; each graded
    episode written to `transcripts` when given (`episode_record`)."""

    def __init__(
        self, rollouts: Rollouts, bar: Progress | None, transcripts: TextIO | None = None
    ) -> None:
        self.rollouts = rollouts
        self.bar = bar
        self.transcripts = transcripts

    async def run(self, runs: list[Run]) -> list[EvalResult]:
        """The results of `runs`, in order."""
        return list(await asyncio.gather(*map(self._one, runs)))

    async def _one(self, run: Run) -> EvalResult:
        # A shallow copy shares the engine, thread pool and semaphores; only the sampling
        # parameters (temperature) differ between runs.
        rollouts = copy.copy(self.rollouts)
        rollouts.sampling = replace(self.rollouts.sampling, temperature=run.temperature)
        on_episode = self._on_episode(run)
        return await evaluate_policy(rollouts, run.tasks, run.samples, on_episode, run.after_slip)

    def _on_episode(self, run: Run) -> Callable[[Trajectory], None] | None:
        bar, out = self.bar, self.transcripts
        if bar is None and out is None:
            return None
        job = (
            bar.add_task(run.label, total=run.samples * len(run.tasks), passed=0)
            if bar is not None
            else 0
        )
        split_of = {task.instance_id: task.split for task in run.tasks}
        passed = 0

        def on_episode(trajectory: Trajectory) -> None:
            nonlocal passed
            passed += trajectory.reward >= 1.0
            if bar is not None:
                bar.update(job, advance=1, passed=passed)
            if out is not None:
                split = split_of[trajectory.task_id]
                record = episode_record(trajectory, split, run.temperature, self.rollouts.tokenizer)
                out.write(json.dumps(record) + "\n")
                out.flush()

        return on_episode


def episode_record(
    trajectory: Trajectory, split: str, temperature: float, tokenizer: Tokenizer
) -> dict[str, Any]:
    """One graded episode as a JSON document for reading what a model did, not only how
    often it passed: its task, outcome and the text of each context window (prompt, the
    model's replies and the tool results, as the model saw them)."""
    return {
        "task_id": trajectory.task_id,
        "split": split,
        "temperature": temperature,
        "reward": trajectory.reward,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.turns,
        "tool_calls": trajectory.tool_calls,
        "tool_errors": trajectory.tool_errors,
        "failed_edits": trajectory.failed_edits,
        "flags": trajectory.flags,
        "windows": [tokenizer.decode(segment.token_ids) for segment in trajectory.segments],
    }


def in_session(
    checkpoint: Path,
    config: RunConfig,
    work: Callable[[Session], Awaitable[_T]],
    progress: bool,
    transcripts: Path | None = None,
) -> _T:
    """Load the checkpoint once, start one engine sized for `eval.max_concurrent` episodes
    on `eval.threads` torch threads, and run `work` with it (under progress bars when
    `progress`; every graded episode written to `transcripts` as a JSON line when given;
    the file is replaced)."""
    torch.set_num_threads(config.eval.threads)
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    episodes, gradings = config.eval.max_concurrent, config.eval.max_concurrent_verify
    # the rollouts' engine and dtype, on the evaluation's threads
    rollout = config.rollout.model_copy(update={"threads": config.eval.threads})

    async def main(bar: Progress | None) -> _T:
        engine = open_rollout_engine(
            checkpoint, config.harness, rollout, episodes, config.trainer.seed
        )
        out, rollouts = None, None
        try:
            rollouts = Rollouts(
                engine, tokenizer, config.harness, config.rollout, episodes, gradings
            )
            rollouts.sampling = replace(rollouts.sampling, seed=config.trainer.seed)
            if transcripts is not None:
                out = transcripts.open("w", encoding="utf-8")
            return await work(Session(rollouts, bar, out))
        finally:
            if out is not None:
                out.close()
            if rollouts is not None:
                await rollouts.close()
            await engine.close()

    if not progress:
        return asyncio.run(main(None))
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    with Progress(*columns, TextColumn("pass {task.fields[passed]}"), TimeElapsedColumn()) as bar:
        return asyncio.run(main(bar))
