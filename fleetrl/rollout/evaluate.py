"""Evaluation: pass@1 of a checkpoint on a task split, by a protocol that cannot flatter.

    val split ─▶ sweep config.eval.temperatures ─▶ T with the best pass@1 (ties: lower T)
    reported split ─▶ N samples per task at T ─▶ pass@1 [bootstrap CI], pass@k, recovery
                   └▶ greedy (T = 0), one sample per task ─▶ greedy pass@1 [bootstrap CI]

- The unit of evaluation is the task: the 95% interval is a percentile bootstrap over
  tasks of their mean success, never a binomial interval over episodes
  (`fleetrl.rollout.stats`).
- The temperature is chosen on `val` and only reported elsewhere; choosing it on the
  reported split would pick the luckiest run. The choice is kept per weights and settings
  (`sweep_cache_path`), so every split reported for one model is reported at one
  temperature; `fleetrl train`'s end-of-run evaluation is kept the same way
  (`evaluation_cache_path`).
- pass@1 at T says how often one attempt works; greedy says what the mode of the policy
  does; pass@8 (Chen et al. 2021, unbiased) says what it can do at all. Sharpening moves
  pass@1 and greedy towards pass@8; a new skill moves pass@8 itself.
- recovery: episodes that had an edit_file call refused and still passed. A model that
  rarely fails an edit leaves few such episodes; `after_slip` measures recovery on every
  episode instead: the scripted expert reads the file and sends a mis-copied edit, which
  the tool refuses, and the model takes over from there (`fleetrl.rollout.session`;
  micro tasks).

The runs of one checkpoint go through one engine at once (`fleetrl.rollout.session`): the
whole sweep, plus the greedy run of the reported split, is one batch.

Not covered: evaluation of models served elsewhere
(`fleetrl.envs.harness.loop.run_episode_openai` runs their episodes).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from fleetrl.config import RunConfig
from fleetrl.envs.tasks.suites import configured_tasks
from fleetrl.files import cache_dir, write_whole
from fleetrl.model.checkpoint import weights_digest
from fleetrl.rollout.session import Run, Session, in_session
from fleetrl.rollout.stats import EvalError, EvalResult, bootstrap_interval, pass_at_k
from fleetrl.types import Task, Trajectory

TEMPERATURES: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7, 1.0)
REPORTED_K = 8  # the pass@k of the protocol's document


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


def sweep_tasks(config: RunConfig) -> list[Task]:
    """The tasks the temperature is chosen on: the first `eval.sweep_tasks` of the val
    split (all when 0)."""
    tasks = split_tasks(config, config.eval.val_split)
    return tasks[: config.eval.sweep_tasks] if config.eval.sweep_tasks else tasks


def _sweep_runs(config: RunConfig, label: str) -> list[Run]:
    """The temperature sweep on the val split; greedy takes one sample per task, since its
    samples would repeat."""
    split = config.eval.val_split
    tasks = sweep_tasks(config)
    return [
        Run(tasks, t, 1 if t == 0 else config.eval.val_samples, f"{label}{split} T={t:g}")
        for t in dict.fromkeys(config.eval.temperatures)
    ]


def _by_temperature(runs: list[Run], results: list[EvalResult]) -> dict[float, EvalResult]:
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
    run = Run(split_tasks(config, split), temperature, samples_per_task, progress or "")

    async def work(session: Session) -> EvalResult:
        return (await session.run([run]))[0]

    return in_session(checkpoint, config, work, progress is not None)


def episodes_of(
    checkpoint: Path, config: RunConfig, tasks: list[Task], temperature: float
) -> list[Trajectory]:
    """One episode of the checkpoint per task at `temperature`, in task order: for looking
    at what a model does, not only at how often it passes."""

    async def work(session: Session) -> list[Trajectory]:
        rollouts = session.rollouts
        sampling = replace(rollouts.sampling, temperature=temperature)

        async def one(task: Task) -> Trajectory:
            return await rollouts.run_one(task, sampling=sampling.reseeded(task.instance_id, 0))

        return list(await asyncio.gather(*map(one, tasks)))

    return in_session(checkpoint, config, work, progress=False)


def choose_temperature(
    checkpoint: Path, config: RunConfig, progress: str | None = None
) -> tuple[float, dict[float, EvalResult]]:
    """The checkpoint's temperature: `eval.temperatures` swept on `eval.val_split`
    (`eval.val_samples` samples per task, one when greedy), all through one engine at
    once; the best pass@1 wins, ties go to the lower temperature (`pick_temperature`).
    Returns it with every temperature's run. `progress`: progress bars with this label."""
    runs = _sweep_runs(config, f"{progress} " if progress else "")

    async def work(session: Session) -> list[EvalResult]:
        return await session.run(runs)

    sweep = _by_temperature(runs, in_session(checkpoint, config, work, progress is not None))
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


def evaluation_cache_path(weights: str, config: RunConfig) -> Path:
    """Where `fleetrl train` keeps `evaluate_checkpoint`'s result (best temperature as
    `eval.best_temperature` says) for these weights (a `weights_digest`) under these
    settings (split and sweep tasks, episodes, temperatures, seed, tasks, harness), so that
    a base model shared by many runs is evaluated once."""
    settings = (
        "seeded-v1",  # the protocol: results of an earlier one are never reused
        config.trainer.seed,  # every episode's draws
        config.eval.split,
        tasks_digest(split_tasks(config, config.eval.split)),
        tasks_digest(sweep_tasks(config)),
        config.eval.episodes,
        config.eval.max_tasks,
        config.rollout.temperature,
        config.eval.best_temperature,
        config.eval.val_split,
        config.eval.temperatures,
        config.eval.val_samples,
        config.tasks.model_dump(),
        config.harness.model_dump(),
    )
    return cache_dir() / "evals" / f"{results_key(weights, settings)}.json"


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

    async def work(session: Session) -> EvalResult:
        sweep: dict[float, EvalResult] = {}
        temperature = config.rollout.temperature
        if best_temperature:
            runs = _sweep_runs(config, label)
            sweep = _by_temperature(runs, await session.run(runs))
            temperature = pick_temperature(sweep)
        samples = 1 if temperature == 0 else budget
        run = Run(tasks, temperature, samples, f"{label}{split} T={temperature:g}")
        (result,) = await session.run([run])
        result.val_sweep = _sweep_figures(sweep)
        return result

    return in_session(checkpoint, config, work, progress is not None)


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
    greedy_run = Run(tasks, 0.0, 1, f"{name}{split} greedy", after_slip)

    def run_at(t: float) -> Run:
        return Run(tasks, t, samples, f"{name}{split} T={t:g} x{samples}", after_slip)

    digest = weights_digest(checkpoint)  # read once: a checkpoint can be gigabytes
    # Only a choice reads the val split: a given temperature evaluates a folder without one.
    cached = sweep_cache_path(digest, config) if temperature is None else None

    async def work(session: Session) -> dict[str, Any]:
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

    return in_session(checkpoint, config, work, progress, transcripts)


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
