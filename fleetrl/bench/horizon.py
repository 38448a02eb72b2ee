"""`fleetrl bench horizon`: what self-summarisation buys on tasks longer than the window.

    held-out tasks with facts (the `long` suite), the run configuration's harness budgets
      ├─▶ none:     the trained policy, no compaction (summarise_at = 0): the episode
      │             ends at context_full
      ├─▶ truncate: the trained policy, summarise_at = 0, truncate: the oldest turns are
      │             dropped until the next one fits
      ├─▶ prompted: the base model summarising (its own summaries, prompted, untrained)
      └─▶ trained:  the trained policy summarising
    each arm: its temperature chosen on eval.val_split under its own harness (the rule and
    cache of `fleetrl eval --best-temperature`: `pick_temperature`, `sweep_cache_path`), or
    the one given; then every task `samples` times at it
    ─▶ per arm: pass@1 with a bootstrap interval over tasks, compaction error, tokens per
       solved episode, tokens per summary, how episodes ended
    ─▶ paired gains over tasks: trained vs truncate, trained vs prompted (points, 95% CI)

One engine per model: the trained model's three arms run concurrently through one
session (a shallow copy of its `Rollouts` per arm, each with the arm's harness, sharing
engine and episode budget), then the base model's arm through another. Every arm meets
the same draws (`evaluate_policy` seeds each task's sample k alike) and the same token
budgets: only `summarise_at` and `truncate` differ.

Metrics (`arm_report`): compaction error is the mean, over the episodes that wrote at
least one summary, of the fraction of their task's facts found in none of the episode's
summaries (`fleetrl.observe.horizon.compaction_error`; null when no episode summarised);
tokens per solved is every token the policy processed (the length of every context
window of every episode, prompts included) over the episodes solved (null when none);
summary tokens is the mean length of a summary re-encoded by the tokenizer (null when
there is none). Not covered: summaries of models served elsewhere.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from rich.progress import Progress

from fleetrl.config import RunConfig
from fleetrl.config_files import with_overrides
from fleetrl.files import write_whole
from fleetrl.model.checkpoint import weights_digest
from fleetrl.observe.horizon import compaction_error
from fleetrl.rollout.evaluate import pick_temperature, split_tasks, sweep_cache_path, sweep_tasks
from fleetrl.rollout.session import Run, Session, evaluate_policy, in_session
from fleetrl.rollout.stats import EvalResult, paired_gain, task_rates
from fleetrl.types import Task, Trajectory

ARMS = ("none", "truncate", "prompted", "trained")
TRAINED_ARMS = ("none", "truncate", "trained")  # through the trained model's engine
# The gains reported: (after, before) arms, paired over tasks.
GAINS = {
    "trained_vs_truncate": ("trained", "truncate"),
    "trained_vs_prompted": ("trained", "prompted"),
}
NO_FACTS = "bench horizon needs tasks with facts, e.g. --set tasks.suite=long"


class HorizonBenchError(ValueError):
    """The benchmark cannot run as configured; the message says why in one line."""


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


def arm_config(config: RunConfig, arm: str) -> RunConfig:
    """The run configuration of one arm: the harness of `config` with compaction as the
    arm has it (`none`: off; `truncate`: dropping the oldest turns; `prompted`, `trained`:
    summarising as configured)."""
    harness: dict[str, Any] = {"truncate": arm == "truncate"}
    if arm in ("none", "truncate"):
        harness["summarise_at"] = 0.0
    elif arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}: one of {', '.join(ARMS)}")
    return with_overrides(config, {"harness": harness})


def check_tasks(config: RunConfig, split: str, temperature: float | None) -> list[Task]:
    """The tasks of `split` the benchmark runs (`eval.max_tasks` first ones); refused when
    none has facts, when the summarising arms would not summarise, or when the temperature
    is to be chosen on the reported split. TaskError for a split that does not exist."""
    tasks = split_tasks(config, split)
    if not tasks or not any(task.facts for task in tasks):
        raise HorizonBenchError(NO_FACTS)
    summarising = arm_config(config, "trained").harness
    if any(summarising.summary_limit(task.suite) is None for task in tasks):
        raise HorizonBenchError(
            "harness.summarise_at is 0 for these tasks: the prompted and trained arms would "
            "not summarise (set it, e.g. --set harness.summarise_at=0.8)"
        )
    if temperature is None and split == config.eval.val_split:
        raise HorizonBenchError(
            f"each arm's temperature is chosen on {split!r} (eval.val_split): report "
            "another --split or give --temperature"
        )
    return tasks


def tokens_per_solved(trajectories: Sequence[Trajectory]) -> float | None:
    """Tokens the policy processed (every context window of every episode, prompts
    included) per solved episode; None when no episode was solved."""
    solved = sum(t.reward >= 1.0 for t in trajectories)
    if not solved:
        return None
    return sum(len(s.token_ids) for t in trajectories for s in t.segments) / solved


def mean_compaction_error(
    trajectories: Sequence[Trajectory], facts: dict[str, Sequence[str]]
) -> float | None:
    """Mean `compaction_error` over the episodes that wrote a summary on a task with facts
    (`facts`: task id -> its facts); None when there is none."""
    errors = [
        compaction_error(facts[t.task_id], t.summaries)
        for t in trajectories
        if t.summaries and facts.get(t.task_id)
    ]
    return sum(errors) / len(errors) if errors else None


def summary_tokens(trajectories: Sequence[Trajectory], tokenizer: _Encoder) -> float | None:
    """Mean tokens per summary (its text re-encoded); None when no episode summarised."""
    lengths = [len(tokenizer.encode(text)) for t in trajectories for text in t.summaries]
    return sum(lengths) / len(lengths) if lengths else None


def arm_report(
    arm: str,
    result: EvalResult,
    trajectories: Sequence[Trajectory],
    facts: dict[str, Sequence[str]],
    tokenizer: _Encoder,
) -> dict[str, Any]:
    """One arm's figures (the module docstring's metrics and the run's pass@1)."""
    harness = {"none": (False, False), "truncate": (False, True)}
    summarise, truncate = harness.get(arm, (True, False))
    return {
        "model": "base" if arm == "prompted" else "trained",
        "summarise": summarise,
        "truncate": truncate,
        "pass_at_1": result.pass_at_1,
        "ci_low": result.ci_low,
        "ci_high": result.ci_high,
        "compaction_error": mean_compaction_error(trajectories, facts),
        "tokens_per_solved": tokens_per_solved(trajectories),
        "summary_tokens": summary_tokens(trajectories, tokenizer),
        "summaries": sum(len(t.summaries) for t in trajectories),
        "summarised_episodes": sum(bool(t.summaries) for t in trajectories),
        "episodes": result.episodes,
        "tasks": result.tasks,
        "samples_per_task": result.samples_per_task,
        "temperature": result.temperature,
        "val_sweep": result.val_sweep,
        "finish_reasons": result.finish_reasons,
        "task_passes": result.task_passes,
    }


def gains(arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """GAINS of the arms' reports: the mean over tasks of the pass-rate difference and its
    paired bootstrap 95% interval, in points (x 100)."""
    out = {}
    for name, (after, before) in GAINS.items():
        gain, low, high = paired_gain(task_rates(arms[after]), task_rates(arms[before]))
        out[name] = {"points": 100 * gain, "ci_low": 100 * low, "ci_high": 100 * high}
    return out


def document(
    split: str, base: Path, trained: Path, arms: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The `--json` output: the arms at the top level in ARMS order (the issue's
    interface), the checkpoints they ran, and the paired gains."""
    ordered = {arm: arms[arm] for arm in ARMS}
    return {
        "split": split,
        "models": {"base": str(base), "trained": str(trained)},
        **ordered,
        "gains": gains(ordered),
    }


def _earlier_choice(path: Path) -> tuple[float | None, dict[str, float]]:
    """The temperature and sweep kept at `path` (as `fleetrl eval` keeps them); (None, {})
    when there are none or the file cannot be read as one."""
    try:
        earlier = json.loads(path.read_text())
        return float(earlier["temperature"]), dict(earlier["val_sweep"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, {}


async def _choose(
    session: Session, config: RunConfig, digest: str, label: str
) -> tuple[float, dict[str, float]]:
    """The arm's temperature on eval.val_split under its harness, as `fleetrl eval
    --best-temperature` chooses it and from its cache when it chose before."""
    cached = sweep_cache_path(digest, config)
    chosen, figures = _earlier_choice(cached)
    if chosen is not None:
        return chosen, figures
    tasks, val = sweep_tasks(config), config.eval.val_split
    runs = [
        Run(tasks, t, 1 if t == 0 else config.eval.val_samples, f"{label} {val} T={t:g}")
        for t in dict.fromkeys(config.eval.temperatures)
    ]
    sweep = {run.temperature: r for run, r in zip(runs, await session.run(runs), strict=True)}
    chosen = pick_temperature(sweep)
    figures = {str(t): r.pass_at_1 for t, r in sweep.items()}
    write_whole(cached, json.dumps({"temperature": chosen, "val_sweep": figures}).encode())
    return chosen, figures


async def _run_arm(
    session: Session,
    config: RunConfig,
    arm: str,
    tasks: list[Task],
    samples: int,
    temperature: float | None,
    digest: str,
) -> dict[str, Any]:
    """One arm through `session`'s engine under the arm's harness: its temperature, then
    every task `samples` times (once when greedy: its samples would repeat); its report."""
    rollouts = copy.copy(session.rollouts)  # shares engine, pool, semaphores
    rollouts.harness = config.harness
    bar = session.bar
    sweep: dict[str, float] = {}
    if temperature is None:
        temperature, sweep = await _choose(Session(rollouts, bar), config, digest, arm)
    rollouts.sampling = replace(rollouts.sampling, temperature=temperature)
    samples = 1 if temperature == 0 else samples
    label = f"{arm} T={temperature:g} x{samples}"
    job = bar.add_task(label, total=samples * len(tasks), passed=0) if bar is not None else 0
    trajectories: list[Trajectory] = []

    def on_episode(trajectory: Trajectory) -> None:
        trajectories.append(trajectory)
        if bar is not None:
            passed = sum(t.reward >= 1.0 for t in trajectories)
            bar.update(job, advance=1, passed=passed)

    result = await evaluate_policy(rollouts, tasks, samples, on_episode)
    result.val_sweep = sweep
    facts = {task.instance_id: task.facts for task in tasks}
    return arm_report(arm, result, trajectories, facts, rollouts.tokenizer)


async def run_arms(
    session: Session,
    config: RunConfig,
    arms: Sequence[str],
    tasks: list[Task],
    samples: int,
    temperature: float | None,
    digest: str,
) -> dict[str, dict[str, Any]]:
    """The reports of `arms` (names of ARMS) of one model, run concurrently through
    `session`'s engine, each under its own harness (`arm_config`). `temperature` None:
    each arm's chosen on eval.val_split (`digest`: the model's `weights_digest`, the key
    of the kept choice)."""
    runs = (
        _run_arm(session, arm_config(config, arm), arm, tasks, samples, temperature, digest)
        for arm in arms
    )
    return dict(zip(arms, await asyncio.gather(*runs), strict=True))


def bench_horizon(
    config: RunConfig,
    base: Path,
    trained: Path,
    split: str,
    samples: int,
    temperature: float | None = None,
    bar: Progress | None = None,
) -> dict[str, Any]:
    """The benchmark's document (`document`): the trained model's arms through one engine,
    then the base model's. `temperature` None: each arm's chosen on eval.val_split.
    `bar`: progress bars there. HorizonBenchError and TaskError as `check_tasks`."""
    tasks = check_tasks(config, split, temperature)
    arms: dict[str, dict[str, Any]] = {}
    for checkpoint, names in ((trained, TRAINED_ARMS), (base, ("prompted",))):
        digest = weights_digest(checkpoint) if temperature is None else ""

        async def work(session: Session, names=names, digest=digest) -> dict[str, dict[str, Any]]:
            session.bar = bar  # ours, on stderr (`in_session`'s would print to stdout)
            return await run_arms(session, config, names, tasks, samples, temperature, digest)

        arms |= in_session(checkpoint, config, work, progress=False)
    return document(split, base, trained, arms)
