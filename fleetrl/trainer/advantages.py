"""Group-relative advantages: each sample's reward compared with its group's.

A group is N samples of one task drawn from (nearly) the same policy. The estimators:

- `drgrpo` (default, Dr. GRPO): A = r - mean(group). No division by the group's standard
  deviation, which would up-weight tasks that are nearly always solved or failed.
- `grpo`: A = (r - mean) / (std + eps), the original GRPO.
- `rloo`: A = r - mean(other samples) = (r - mean) * N / (N - 1), leave-one-out baseline.

A group whose rewards are all equal carries no signal (every advantage is 0); such groups
are reported (`has_signal`) so the caller can skip them (DAPO's dynamic sampling) and
count them.

Online (real-time RL, `trainer.mode = "online"`), each prompt has one sample: there is no
group to compare with. A session's advantage is its reward minus its task's baseline, a
running mean of the rewards that task earned before (`Baselines`): b ← d·b + (1 - d)·r.
Not leave-one-out over the sessions of a task within a step's window: live traffic rarely
brings one task twice in a window, so most sessions would have no baseline at all, while a
running mean carries a task's history across steps. A task seen for the first time is
compared with the running mean over all tasks (the baseline of its prompt class, here
every prompt); the very first step, with no history at all, with its own mean. A
session's reward joins the baselines after its own advantage is taken: never its own
baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

Estimator = Literal["drgrpo", "grpo", "rloo"]


def group_advantages(
    rewards: torch.Tensor, estimator: Estimator = "drgrpo", eps: float = 1e-6
) -> tuple[torch.Tensor, bool]:
    """Advantages [N] for one group's rewards [N], and whether the group has any signal."""
    if rewards.numel() < 2:
        raise ValueError("a group needs at least 2 samples")
    centred = rewards - rewards.mean()
    informative = has_signal(rewards, eps)
    if estimator == "drgrpo":
        return centred, informative
    if estimator == "grpo":
        return centred / (rewards.std() + eps), informative
    if estimator == "rloo":
        n = rewards.numel()
        return centred * n / (n - 1), informative
    raise ValueError(f"unknown advantage estimator {estimator!r}: drgrpo, grpo or rloo")


def has_signal(rewards: torch.Tensor, eps: float = 1e-6) -> bool:
    """Whether a group's rewards [N] differ, so some advantage is non-zero under every
    estimator: the test dynamic sampling fills batches with."""
    return bool((rewards - rewards.mean()).abs().max() > eps)


@dataclass
class Baselines:
    """online: running means of the rewards, per task and over all tasks (module docstring)."""

    tasks: dict[str, float] = field(default_factory=dict)  # task_id -> running mean
    overall: float | None = None  # over every task; None before the first reward

    def advantages(self, rewards: list[tuple[str, float]], decay: float) -> list[float]:
        """The advantage of each (task_id, reward) against the baselines as they stood,
        then every reward taken into them, in order."""
        if not rewards:
            return []
        fallback = self.overall
        if fallback is None:
            fallback = sum(r for _, r in rewards) / len(rewards)
        out = [r - self.tasks.get(task, fallback) for task, r in rewards]
        for task, r in rewards:
            before = self.tasks.get(task, self.overall if self.overall is not None else r)
            self.tasks[task] = decay * before + (1 - decay) * r
            overall = self.overall if self.overall is not None else r
            self.overall = decay * overall + (1 - decay) * r
        return out
