"""Group-relative advantages: each sample's reward compared with its group's.

A group is N samples of one task drawn from (nearly) the same policy. The estimators:

- `drgrpo` (default, Dr. GRPO): A = r - mean(group). No division by the group's standard
  deviation, which would up-weight tasks that are nearly always solved or failed.
- `grpo`: A = (r - mean) / (std + eps), the original GRPO.
- `rloo`: A = r - mean(other samples) = (r - mean) * N / (N - 1), leave-one-out baseline.

A group whose rewards are all equal carries no signal (every advantage is 0); such groups
are reported (`has_signal`) so the caller can skip them (DAPO's dynamic sampling) and
count them.
"""

from __future__ import annotations

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
