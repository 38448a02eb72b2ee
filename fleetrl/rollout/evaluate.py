"""Evaluation: pass@1 of a checkpoint on a task split, with a 95% confidence interval.

Each task is attempted `samples_per_task` times at the policy's sampling temperature; the
pass rate over all episodes is pass@1, and its Wilson score interval (which stays inside
[0, 1] and behaves at rates near 0 or 1) says how far it can be trusted. Two evaluations
whose intervals do not overlap differ for real.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig
from fleetrl.envs.suites import load_tasks
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.worker import Rollouts, rollout_engine
from fleetrl.types import Task, Trajectory


@dataclass
class EvalResult:
    """pass@1 over `episodes` graded episodes, with its Wilson 95% interval."""

    pass_at_1: float
    ci_low: float
    ci_high: float
    episodes: int
    tasks: int
    duration_s: float
    finish_reasons: dict[str, int] = field(default_factory=dict)  # how episodes ended
    flags: dict[str, int] = field(default_factory=dict)  # anti-cheat flags raised, by name
    mean_tool_errors: float = 0.0  # per episode

    def to_json(self) -> dict[str, Any]:
        """The `fleetrl eval --json` document."""
        return asdict(self)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(trajectories: list[Trajectory], tasks: int, duration_s: float) -> EvalResult:
    """pass@1, interval and diagnostics of graded trajectories."""
    n = len(trajectories)
    passed = sum(1 for t in trajectories if t.reward >= 1.0)
    low, high = wilson_interval(passed, n)
    reasons: dict[str, int] = {}
    flags: dict[str, int] = {}
    for t in trajectories:
        reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
        for flag in t.flags:
            flags[flag] = flags.get(flag, 0) + 1
    return EvalResult(
        pass_at_1=passed / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        episodes=n,
        tasks=tasks,
        duration_s=duration_s,
        finish_reasons=reasons,
        flags=flags,
        mean_tool_errors=sum(t.tool_errors for t in trajectories) / max(n, 1),
    )


async def evaluate_policy(
    rollouts: Rollouts,
    tasks: list[Task],
    samples_per_task: int,
    on_episode: Callable[[Trajectory], None] | None = None,
) -> EvalResult:
    """Run and grade `samples_per_task` episodes of every task (`on_episode` is called as
    each one is graded, e.g. to advance a progress bar)."""
    start = time.monotonic()

    async def graded(task: Task) -> Trajectory:
        trajectory = await rollouts.run_one(task)
        if on_episode is not None:
            on_episode(trajectory)
        return trajectory

    episodes = [task for task in tasks for _ in range(samples_per_task)]
    trajectories = list(await asyncio.gather(*map(graded, episodes)))
    return summarise(trajectories, len(tasks), time.monotonic() - start)


def evaluate_checkpoint(
    checkpoint: Path, config: RunConfig, split: str | None = None, progress: str | None = None
) -> EvalResult:
    """pass@1 of a checkpoint directory over at least `config.eval.episodes` episodes of
    `split` (default `config.eval.split`) of the configured tasks, at the rollout
    temperature (of the split's first `eval.max_tasks` tasks, when set). `progress`: show a
    progress bar with this label."""
    tasks = load_tasks(
        suite=None if config.tasks.tasks_dir else config.tasks.suite,
        tasks_dir=Path(config.tasks.tasks_dir) if config.tasks.tasks_dir else None,
        split=split or config.eval.split,
    )
    tasks = tasks[: config.eval.max_tasks] if config.eval.max_tasks else tasks
    samples = max(1, math.ceil(config.eval.episodes / len(tasks)))
    model = load_pretrained(checkpoint)
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    episodes, gradings = config.eval.max_concurrent, config.eval.max_concurrent_verify

    async def run(on_episode: Callable[[Trajectory], None] | None) -> EvalResult:
        engine = rollout_engine(model, config.harness, episodes, config.trainer.seed)
        try:
            rollouts = Rollouts(
                engine, tokenizer, config.harness, config.rollout, episodes, gradings
            )
            return await evaluate_policy(rollouts, tasks, samples, on_episode)
        finally:
            await engine.close()

    if progress is None:
        return asyncio.run(run(None))
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    with Progress(*columns, TextColumn("pass {task.fields[passed]}"), TimeElapsedColumn()) as bar:
        job = bar.add_task(progress, total=samples * len(tasks), passed=0)
        passed = 0

        def advance(trajectory: Trajectory) -> None:
            nonlocal passed
            passed += trajectory.reward >= 1.0
            bar.update(job, advance=1, passed=passed)

        return asyncio.run(run(advance))
