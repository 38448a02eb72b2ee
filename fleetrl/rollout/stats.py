"""Evaluation statistics: pass@1 and pass@k with intervals over tasks, paired gains.

- The unit of evaluation is the task: samples of one task are correlated (a model that
  solves it tends to solve it again), so the 95% interval is a percentile bootstrap over
  tasks of their mean success, never a binomial interval over episodes.
- pass@k (Chen et al. 2021, unbiased) says what a model can do at all; pass@1 how often one
  attempt works.
- Two models on the same tasks compare by a paired bootstrap (`paired_gain`).

Pure functions of graded trajectories and evaluation documents: running the episodes is
`fleetrl.rollout.session`, the protocol that chooses a temperature `fleetrl.rollout.evaluate`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fleetrl.types import Trajectory

PASS_AT_K = (2, 4, 8)  # pass@k reported for each k up to the samples per task


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
    return _percentile_interval(_resampled_means(values, resamples, rng), level)


def _resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The means of `resamples` draws of len(values) values with replacement."""
    return values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)


def _percentile_interval(estimates: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` interval of bootstrap estimates."""
    alpha = (1.0 - level) / 2
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
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


def unpaired_gain(
    after: list[float],
    before: list[float],
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """mean(after) - mean(before) of two independent samples (scores of different tasks or
    episodes) and a percentile bootstrap interval of it, each sample resampled on its own."""
    if not after or not before:
        raise EvalError("an unpaired gain needs scores on both sides")
    rng = np.random.default_rng(seed)
    a, b = np.asarray(after, dtype=np.float64), np.asarray(before, dtype=np.float64)
    diffs = _resampled_means(a, resamples, rng) - _resampled_means(b, resamples, rng)
    return float(a.mean() - b.mean()), *_percentile_interval(diffs, level)


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
