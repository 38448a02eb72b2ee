"""Evaluation: pass@1 of a checkpoint on a task split, by a protocol that cannot flatter.

    val split ─▶ sweep config.eval.temperatures ─▶ T with the best pass@1 (ties: lower T)
    reported split ─▶ N samples per task at T ─▶ pass@1 [bootstrap CI], pass@k, recovery
                   └▶ greedy (T = 0), one sample per task ─▶ greedy pass@1 [bootstrap CI]

- The unit of evaluation is the task: samples of one task are correlated (a model that
  solves it tends to solve it again), so the 95% interval is a percentile bootstrap over
  tasks of their mean success, never a binomial interval over episodes.
- The temperature is chosen on `val` and only reported elsewhere; choosing it on the
  reported split would pick the luckiest run.
- pass@1 at T says how often one attempt works; greedy says what the mode of the policy
  does; pass@8 (Chen et al. 2021, unbiased) says what it can do at all. Sharpening moves
  pass@1 and greedy towards pass@8; a new skill moves pass@8 itself.
- recovery: episodes that had an edit_file call refused and still passed. A model that
  rarely fails an edit leaves few such episodes; `after_slip` measures recovery on every
  episode instead: the scripted expert reads the file and sends a mis-copied edit, which
  the tool refuses, and the model takes over from there (`slip_opening`; micro tasks).

Every run of one checkpoint goes through one engine (the temperature is per request), and
runs whose temperature is known run concurrently, sharing its episodes in flight: the
whole sweep, plus the greedy run of the reported split, is one batch.

Not covered: paired comparisons between two checkpoints on the same tasks; evaluation of
models served elsewhere (`fleetrl.envs.harness.loop.run_episode_openai` runs their episodes).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig
from fleetrl.envs.harness.handover import Handover
from fleetrl.envs.harness.loop import TokenPolicy
from fleetrl.envs.micro.expert import PLANS, Expert
from fleetrl.envs.tasks.suites import configured_tasks
from fleetrl.files import cache_dir, write_whole
from fleetrl.model.checkpoint import load_pretrained, weights_digest
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.worker import Rollouts, rollout_engine
from fleetrl.types import Task, Trajectory

TEMPERATURES: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7, 1.0)
PASS_AT_K = (2, 4, 8)  # pass@k reported for each k up to the samples per task
REPORTED_K = 8  # the pass@k of the protocol's document
SLIP_TURNS = PLANS["slip"].index("slip") + 1  # the expert's turns before a slip hand-over

_T = TypeVar("_T")


class EvalError(ValueError):
    """An evaluation that cannot run as asked (e.g. a temperature chosen on the reported
    split); the message says why in one line."""


def bootstrap_interval(
    per_task: list[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over tasks (`per_task`: each task's mean
    success, or any per-task score in [0, 1]); deterministic for a seed.

    The bootstrap only sees the spread it observed: when every task scored the same (all
    failed, say, which is common on a few tasks) it would collapse to a point and claim
    certainty. Then the interval is the Wilson interval with each task as one trial."""
    if not per_task:
        return 0.0, 1.0
    values = np.asarray(per_task, dtype=np.float64)
    if np.all(values == values[0]):
        return wilson_interval(float(values.sum()), len(values))
    return _percentile_bootstrap(values, level, resamples, seed)


def _percentile_bootstrap(
    values: np.ndarray, level: float, resamples: int, seed: int
) -> tuple[float, float]:
    """Percentile interval of the mean of `values` over `resamples` draws with replacement."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    alpha = (1.0 - level) / 2
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_gain(
    after: dict[str, float],
    before: dict[str, float],
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean over tasks of `after` - `before` (each {task id: its pass rate}, the same tasks)
    and a percentile bootstrap interval of it, each resample drawing the same tasks for both.

    Two models evaluated on one split share its tasks, whose difficulty varies far more
    than either model's luck on them: pairing takes that shared part out, so the interval
    of the gain is much narrower than the gap two separate intervals need."""
    if set(after) != set(before):
        raise EvalError("a paired gain needs both models evaluated on the same tasks")
    if not after:
        return 0.0, -1.0, 1.0
    diffs = np.array([after[i] - before[i] for i in sorted(after)], dtype=np.float64)
    return float(diffs.mean()), *_percentile_bootstrap(diffs, level, resamples, seed)


def task_rates(document: dict[str, Any]) -> dict[str, float]:
    """{task id: pass rate} of an evaluation's document (`EvalResult.to_json` or a
    `protocol_report`): its samples passed over its samples per task."""
    samples = document["samples_per_task"]
    return {task: passes / samples for task, passes in document["task_passes"].items()}


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples of a task passes, from n samples of
    which c passed: the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    With n < k no unbiased estimator exists; this returns the plug-in 1 - (1 - c/n)^k,
    which is biased low (never flatters) and exact for greedy decoding, whose samples
    would all repeat the first."""
    if not 0 <= c <= n or n < 1 or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, n >= 1, k >= 1; got {n=} {c=} {k=}")
    if n < k:
        return 1.0 - (1.0 - c / n) ** k
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass
class EvalResult:
    """One evaluation run: every task `samples_per_task` times at one temperature."""

    pass_at_1: float  # mean over tasks of the fraction of their samples that passed
    ci_low: float  # 95% percentile bootstrap over tasks of pass_at_1, lower bound
    ci_high: float  # and upper bound
    episodes: int  # graded episodes
    tasks: int  # distinct tasks
    duration_s: float  # s: the run, from its first episode to its last grading
    temperature: float  # sampling temperature (0: greedy)
    samples_per_task: int  # episodes of each task
    pass_at_k: dict[int, float] = field(default_factory=dict)  # k <= samples_per_task only
    pass_at_k_ci: dict[int, tuple[float, float]] = field(default_factory=dict)  # bootstrap
    recovery: float = 0.0  # fraction of episodes with a failed edit that still passed
    recovery_rate: float = 0.0  # of the episodes with a failed edit, the fraction that passed
    failed_edit_episodes: int = 0  # episodes with at least one edit_file call refused
    task_passes: dict[str, int] = field(default_factory=dict)  # task id -> samples passed
    val_sweep: dict[str, float] = field(default_factory=dict)  # str(T) -> pass@1 on val
    finish_reasons: dict[str, int] = field(default_factory=dict)  # how episodes ended
    flags: dict[str, int] = field(default_factory=dict)  # anti-cheat flags raised, by name
    mean_tool_errors: float = 0.0  # per episode

    def to_json(self) -> dict[str, Any]:
        """The run as a JSON document (integer keys become strings)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalResult:
        """The run of a `to_json` document read back from JSON."""
        data = dict(data)
        data["pass_at_k"] = {int(k): v for k, v in data.get("pass_at_k", {}).items()}
        data["pass_at_k_ci"] = {int(k): tuple(v) for k, v in data.get("pass_at_k_ci", {}).items()}
        return cls(**data)


def summarise(
    trajectories: list[Trajectory], tasks: int, duration_s: float, temperature: float = 1.0
) -> EvalResult:
    """pass@1 and pass@k with bootstrap intervals over tasks, recovery and diagnostics of
    one run's graded trajectories; `samples_per_task` is the fewest any task had."""
    n = len(trajectories)
    attempts = Counter(t.task_id for t in trajectories)
    passes = {task: 0 for task in attempts} | Counter(
        t.task_id for t in trajectories if t.reward >= 1.0
    )
    per_task = [passes[task] / attempts[task] for task in attempts]
    samples = min(attempts.values(), default=0)
    at_k = {
        k: [pass_at_k(attempts[task], passes[task], k) for task in attempts]
        for k in PASS_AT_K
        if k <= samples
    }
    low, high = bootstrap_interval(per_task)
    failed_edit = [t for t in trajectories if t.failed_edits > 0]
    recovered = sum(t.reward >= 1.0 for t in failed_edit)
    return EvalResult(
        pass_at_1=float(np.mean(per_task)) if per_task else 0.0,
        ci_low=low,
        ci_high=high,
        episodes=n,
        tasks=tasks,
        duration_s=duration_s,
        temperature=temperature,
        samples_per_task=samples,
        pass_at_k={k: float(np.mean(v)) for k, v in at_k.items()},
        pass_at_k_ci={k: bootstrap_interval(v) for k, v in at_k.items()},
        recovery=recovered / n if n else 0.0,
        recovery_rate=recovered / len(failed_edit) if failed_edit else 0.0,
        failed_edit_episodes=len(failed_edit),
        task_passes=dict(passes),
        finish_reasons=dict(Counter(t.finish_reason for t in trajectories)),
        flags=dict(Counter(flag for t in trajectories for flag in t.flags)),
        mean_tool_errors=sum(t.tool_errors for t in trajectories) / max(n, 1),
    )


def slip_opening(task: Task, tokenizer: Tokenizer, model: TokenPolicy) -> TokenPolicy:
    """The policy of one episode after a slip: the scripted expert reads the task's file
    and sends an edit whose `old` is mis-copied (the tool refuses it, showing the closest
    lines), then `model` goes on. EvalError for a task the expert cannot read."""
    try:
        expert = Expert([task], "slip", tokenizer)
    except ValueError as err:
        raise EvalError(f"after a slip: {task.instance_id} is no micro task ({err})") from None
    return Handover(expert, SLIP_TURNS, model)


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
    `after_slip`: each episode opens with the expert's slip (`slip_opening`); episodes
    where the expert found no mis-copy to send (no edit refused) are left out."""
    start = time.monotonic()

    async def graded(task: Task, sample: int) -> Trajectory:
        policy = slip_opening(task, rollouts.tokenizer, rollouts.policy) if after_slip else None
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


def pick_temperature(sweep: dict[float, EvalResult]) -> float:
    """The selection rule: the temperature with the best pass@1; among equals the lowest
    (closer to greedy, less variance)."""
    return min(sweep, key=lambda t: (-sweep[t].pass_at_1, t))


def tasks_digest(tasks: list[Task]) -> str:
    """sha256 of task records, their machine-specific repository paths left out: part of
    the key of a cached result, so that a split whose tasks changed (a suite grown, a task
    folder regenerated) is evaluated again rather than read back."""
    records = [{**asdict(task), "repo": ""} for task in tasks]
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def split_tasks(config: RunConfig, split: str) -> list[Task]:
    """The configured tasks of `split` (its first `eval.max_tasks` when set); TaskError
    when the split does not exist."""
    tasks = configured_tasks(config.tasks, split)
    return tasks[: config.eval.max_tasks] if config.eval.max_tasks else tasks


@dataclass
class _Run:
    """One run to do: every task of `tasks`, `samples` times, at `temperature`."""

    tasks: list[Task]
    temperature: float
    samples: int
    label: str  # progress bar description
    after_slip: bool = False  # each episode opens with the expert's slip (`slip_opening`)


class _Session:
    """One checkpoint behind one engine: runs given together go through it concurrently
    and share its budget of episodes in flight; one progress bar per run; each graded
    episode written to `transcripts` when given (`episode_record`)."""

    def __init__(
        self, rollouts: Rollouts, bar: Progress | None, transcripts: TextIO | None = None
    ) -> None:
        self.rollouts = rollouts
        self.bar = bar
        self.transcripts = transcripts

    async def run(self, runs: list[_Run]) -> list[EvalResult]:
        """The results of `runs`, in order."""
        return list(await asyncio.gather(*map(self._one, runs)))

    async def _one(self, run: _Run) -> EvalResult:
        # A shallow copy shares the engine, thread pool and semaphores; only the sampling
        # parameters (temperature) differ between runs.
        rollouts = copy.copy(self.rollouts)
        rollouts.sampling = replace(self.rollouts.sampling, temperature=run.temperature)
        on_episode = self._on_episode(run)
        return await evaluate_policy(rollouts, run.tasks, run.samples, on_episode, run.after_slip)

    def _on_episode(self, run: _Run) -> Callable[[Trajectory], None] | None:
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


def _in_session(
    checkpoint: Path,
    config: RunConfig,
    work: Callable[[_Session], Awaitable[_T]],
    progress: bool,
    transcripts: Path | None = None,
) -> _T:
    """Load the checkpoint once, start one engine sized for `eval.max_concurrent` episodes
    on `eval.threads` torch threads, and run `work` with it (under progress bars when
    `progress`; every graded episode written to `transcripts` as a JSON line when given;
    the file is replaced)."""
    torch.set_num_threads(config.eval.threads)
    model = load_pretrained(checkpoint)
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    episodes, gradings = config.eval.max_concurrent, config.eval.max_concurrent_verify

    async def main(bar: Progress | None) -> _T:
        engine = rollout_engine(model, config.harness, episodes, config.trainer.seed)
        out = None
        try:
            rollouts = Rollouts(
                engine, tokenizer, config.harness, config.rollout, episodes, gradings
            )
            rollouts.sampling = replace(rollouts.sampling, seed=config.trainer.seed)
            if transcripts is not None:
                out = transcripts.open("w", encoding="utf-8")
            return await work(_Session(rollouts, bar, out))
        finally:
            if out is not None:
                out.close()
            await engine.close()

    if not progress:
        return asyncio.run(main(None))
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    with Progress(*columns, TextColumn("pass {task.fields[passed]}"), TimeElapsedColumn()) as bar:
        return asyncio.run(main(bar))


def sweep_tasks(config: RunConfig) -> list[Task]:
    """The tasks the temperature is chosen on: the first `eval.sweep_tasks` of the val
    split (all when 0)."""
    tasks = split_tasks(config, config.eval.val_split)
    return tasks[: config.eval.sweep_tasks] if config.eval.sweep_tasks else tasks


def _sweep_runs(config: RunConfig, label: str) -> list[_Run]:
    """The temperature sweep on the val split; greedy takes one sample per task, since its
    samples would repeat."""
    split = config.eval.val_split
    tasks = sweep_tasks(config)
    return [
        _Run(tasks, t, 1 if t == 0 else config.eval.val_samples, f"{label}{split} T={t:g}")
        for t in dict.fromkeys(config.eval.temperatures)
    ]


def _by_temperature(runs: list[_Run], results: list[EvalResult]) -> dict[float, EvalResult]:
    return {run.temperature: result for run, result in zip(runs, results, strict=True)}


def _sweep_figures(sweep: dict[float, EvalResult]) -> dict[str, float]:
    return {str(t): result.pass_at_1 for t, result in sweep.items()}


def _refuse_choosing_on(config: RunConfig, split: str) -> None:
    if split == config.eval.val_split:
        raise EvalError(
            f"the temperature is chosen on {split!r} (eval.val_split): reporting that split "
            "at it flatters; report another split or give the temperature"
        )


def evaluate_at(
    checkpoint: Path,
    config: RunConfig,
    split: str,
    temperature: float,
    samples_per_task: int,
    progress: str | None = None,
) -> EvalResult:
    """One run of a checkpoint: every task of `split` `samples_per_task` times at
    `temperature`. `progress`: show a progress bar with this label."""
    run = _Run(split_tasks(config, split), temperature, samples_per_task, progress or "")

    async def work(session: _Session) -> EvalResult:
        return (await session.run([run]))[0]

    return _in_session(checkpoint, config, work, progress is not None)


def episodes_of(
    checkpoint: Path, config: RunConfig, tasks: list[Task], temperature: float
) -> list[Trajectory]:
    """One episode of the checkpoint per task at `temperature`, in task order: for looking
    at what a model does, not only at how often it passes."""

    async def work(session: _Session) -> list[Trajectory]:
        rollouts = session.rollouts
        sampling = replace(rollouts.sampling, temperature=temperature)

        async def one(task: Task) -> Trajectory:
            return await rollouts.run_one(task, sampling=sampling.reseeded(task.instance_id, 0))

        return list(await asyncio.gather(*map(one, tasks)))

    return _in_session(checkpoint, config, work, progress=False)


def choose_temperature(
    checkpoint: Path, config: RunConfig, progress: str | None = None
) -> tuple[float, dict[float, EvalResult]]:
    """The checkpoint's temperature: `eval.temperatures` swept on `eval.val_split`
    (`eval.val_samples` samples per task, one when greedy), all through one engine at
    once; the best pass@1 wins, ties go to the lower temperature (`pick_temperature`).
    Returns it with every temperature's run. `progress`: progress bars with this label."""
    runs = _sweep_runs(config, f"{progress} " if progress else "")

    async def work(session: _Session) -> list[EvalResult]:
        return await session.run(runs)

    sweep = _by_temperature(runs, _in_session(checkpoint, config, work, progress is not None))
    return pick_temperature(sweep), sweep


def sweep_cache_path(weights: str, config: RunConfig) -> Path:
    """Where `fleetrl eval` keeps the temperature it chose for these weights (a
    `weights_digest`) under these
    settings (val split and tasks, temperatures, samples, seed, harness, rollout), so that
    every split reported for one model is reported at one temperature, as in `fleetrl
    bench learning`, without sweeping again (a sweep is seeded, so it would choose the same)."""
    settings = (
        "sweep-v2",  # v2: every episode seeded (`evaluate_policy`)
        config.eval.val_split,
        tasks_digest(sweep_tasks(config)),
        config.eval.temperatures,
        config.eval.val_samples,
        config.eval.max_tasks,
        config.trainer.seed,
        config.tasks.model_dump(mode="json"),
        config.harness.model_dump(mode="json"),
        config.rollout.model_dump(mode="json", exclude={"temperature"}),
    )
    return cache_dir() / "sweeps" / f"{results_key(weights, settings)}.json"


def results_key(weights: str, settings: tuple[Any, ...]) -> str:
    """24 hex digits naming results computed from these weights (a `weights_digest`) under
    these settings (JSON-able): the file name of a cached evaluation or temperature choice."""
    digest = hashlib.sha256(weights.encode())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:24]


def _earlier_choice(path: Path) -> tuple[float | None, dict[str, float]]:
    """The temperature and sweep figures kept at `path`; (None, {}) when there are none or
    the file cannot be read as one (then the sweep runs again and rewrites it)."""
    try:
        earlier = json.loads(path.read_text())
        return float(earlier["temperature"]), dict(earlier["val_sweep"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, {}


def evaluate_checkpoint(
    checkpoint: Path,
    config: RunConfig,
    split: str | None = None,
    progress: str | None = None,
    best_temperature: bool = False,
) -> EvalResult:
    """The end-of-run evaluation of `fleetrl train`: at least `eval.episodes` episodes of
    `split` (default `eval.split`; one sample per task when greedy), at the temperature
    chosen on `eval.val_split` when `best_temperature` (its sweep in `val_sweep`, both
    through one engine), at `rollout.temperature` otherwise. `progress`: progress bars
    with this label."""
    split = split or config.eval.split
    if best_temperature:
        _refuse_choosing_on(config, split)
    tasks = split_tasks(config, split)
    budget = max(1, math.ceil(config.eval.episodes / len(tasks)))
    label = f"{progress} " if progress else ""

    async def work(session: _Session) -> EvalResult:
        sweep: dict[float, EvalResult] = {}
        temperature = config.rollout.temperature
        if best_temperature:
            runs = _sweep_runs(config, label)
            sweep = _by_temperature(runs, await session.run(runs))
            temperature = pick_temperature(sweep)
        samples = 1 if temperature == 0 else budget
        run = _Run(tasks, temperature, samples, f"{label}{split} T={temperature:g}")
        (result,) = await session.run([run])
        result.val_sweep = _sweep_figures(sweep)
        return result

    return _in_session(checkpoint, config, work, progress is not None)


def protocol_report(
    checkpoint: Path,
    config: RunConfig,
    split: str,
    temperature: float | None = None,
    progress: bool = False,
    samples: int | None = None,
    transcripts: Path | None = None,
    after_slip: bool = False,
) -> dict[str, Any]:
    """The protocol's document for `split` (the `fleetrl eval --json` output).

    `temperature` None: chosen on `eval.val_split` first (`choose_temperature`; refused
    when `split` is that split), or read from an earlier choice for the same weights and
    settings (`sweep_cache_path`; `val_sweep` is then that sweep's, and no val episode
    runs). At the temperature, `samples` (default `eval.samples`) samples per task:
    pass_at_1, ci_low, ci_high (bootstrap over tasks), pass_at_k, recovery and the run's
    diagnostics (`EvalResult`); pass_at_8 with its bootstrap CI and how it was estimated;
    greedy (one sample per task) with greedy_ci; val_sweep {str(T): pass@1 on val} when
    the temperature was chosen. At temperature 0 the greedy
    run is the reported run. The sweep and the greedy run share one batch, then the
    reported run follows, all through one engine. `transcripts`: every episode of these
    runs written there as a JSON line (`episode_record`) as it is graded. `after_slip`: the
    reported and greedy runs open each episode with the expert's slip (the temperature is
    still chosen on plain val episodes); `after_slip` in the document says so. `weights`:
    the checkpoint's `weights_digest`, which `tasks.skip_solved` is checked against."""
    samples = samples or config.eval.samples
    if temperature is None:
        _refuse_choosing_on(config, split)
    tasks = split_tasks(config, split)
    name = f"{checkpoint.name} "
    if after_slip:
        name += "after a slip, "
    greedy_run = _Run(tasks, 0.0, 1, f"{name}{split} greedy", after_slip)

    def run_at(t: float) -> _Run:
        return _Run(tasks, t, samples, f"{name}{split} T={t:g} x{samples}", after_slip)

    digest = weights_digest(checkpoint)  # read once: a checkpoint can be gigabytes
    # Only a choice reads the val split: a given temperature evaluates a folder without one.
    cached = sweep_cache_path(digest, config) if temperature is None else None

    async def work(session: _Session) -> dict[str, Any]:
        chosen, figures = temperature, {}
        if cached is not None:
            chosen, figures = _earlier_choice(cached)
        if chosen is None:
            runs = _sweep_runs(config, name)
            *swept, greedy = await session.run([*runs, greedy_run])
            sweep = _by_temperature(runs, swept)
            chosen, figures = pick_temperature(sweep), _sweep_figures(sweep)
            assert cached is not None
            write_whole(cached, json.dumps({"temperature": chosen, "val_sweep": figures}).encode())
            reported = greedy if chosen == 0 else (await session.run([run_at(chosen)]))[0]
        elif chosen == 0:
            greedy = reported = (await session.run([greedy_run]))[0]
        else:
            greedy, reported = await session.run([greedy_run, run_at(chosen)])
        reported.val_sweep = figures
        return _document(split, reported, greedy) | {"after_slip": after_slip, "weights": digest}

    return _in_session(checkpoint, config, work, progress, transcripts)


def _document(split: str, reported: EvalResult, greedy: EvalResult) -> dict[str, Any]:
    n, k = reported.samples_per_task, REPORTED_K
    at_k = [pass_at_k(n, c, k) for c in reported.task_passes.values()]
    if n >= k:
        estimator = "unbiased"
    elif reported.temperature == 0:
        estimator = "greedy: its samples repeat"
    else:
        estimator = f"plug-in from {n} samples per task, biased low"
    return reported.to_json() | {
        "split": split,
        f"pass_at_{k}": float(np.mean(at_k)) if at_k else 0.0,
        f"pass_at_{k}_ci": list(bootstrap_interval(at_k)),
        f"pass_at_{k}_estimator": estimator,
        "greedy": greedy.pass_at_1,
        "greedy_ci": [greedy.ci_low, greedy.ci_high],
    }


def describe(document: dict[str, Any]) -> list[str]:
    """`protocol_report`'s document as the lines `fleetrl eval` prints."""
    d = document
    chosen = ""
    if d["val_sweep"]:
        sweep = ", ".join(f"T={t} {p:.3f}" for t, p in d["val_sweep"].items())
        chosen = f", chosen on val ({sweep})"
    low8, high8 = d["pass_at_8_ci"]
    low_g, high_g = d["greedy_ci"]
    slip = ", every episode after the expert's slip" if d.get("after_slip") else ""
    return [
        f"{d['split']} at temperature {d['temperature']:g}{chosen}{slip}",
        f"pass@1   {d['pass_at_1']:.3f}  95% CI [{d['ci_low']:.3f}, {d['ci_high']:.3f}]  "
        f"({d['episodes']} episodes on {d['tasks']} tasks, {d['samples_per_task']} per task)",
        f"pass@8   {d['pass_at_8']:.3f}  95% CI [{low8:.3f}, {high8:.3f}]  "
        f"({d['pass_at_8_estimator']})",
        f"greedy   {d['greedy']:.3f}  95% CI [{low_g:.3f}, {high_g:.3f}]",
        f"recovery {d['recovery']:.3f}  ({d['recovery_rate']:.3f} of the "
        f"{d['failed_edit_episodes']} episodes with a failed edit passed)",
    ]
