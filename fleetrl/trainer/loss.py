"""The policy-gradient loss with off-policy and train/inference mismatch correction.

Three policies meet in one token's loss (AReaL's decoupled PPO):

- behaviour μ: the engine that sampled the token (its logprob travels with the token; it
  may be several versions old, and even at the same version differs slightly from the
  trainer's numerics);
- proximal π_prox: the trainer's weights at the start of the step (before its first
  minibatch's update), recomputed on the exact sampled tokens (with the engine's MoE
  routing replayed);
- π_θ: the weights being optimised.

    ratio r = π_θ / π_prox                      (clipped, asymmetric: [1 - ε_low, 1 + ε_high])
    weight w = π_prox / μ                       (no gradient; corrects staleness and mismatch)
       TIS: w = min(w, C)                       (truncate)
       MIS: w = w if 1/C <= w <= C else 0      (mask the token)
    loss_token = -w · min(r·A, clip(r)·A)  [+ β · k3(π_ref, π_θ)]

All logprobs are at the temperature the tokens were sampled at (`fleetrl.trainer.step`).
The loss is a sum over tokens divided by `normalizer`, which the caller sets for the whole
minibatch so that micro-batches accumulate to the same gradient: Dr. GRPO ("seq_sum_norm")
divides by trajectories x a fixed `norm_tokens` (long and short answers are not re-weighted
by their length, nor episodes by their number of segments); "token_mean" (DAPO) divides by
the batch's loss tokens.

Shapes: B samples, T positions; every tensor here is [B, T] and `mask` marks the tokens
the policy sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fleetrl.config import TrainerSection

# The statistics `policy_loss` averages over the `measured` tokens (those an engine
# sampled); its other per-token statistics are over every loss token.
MEASURED_METRICS = ("mismatch_abs_logprob", "mismatch_kl_k3", "correction_truncated_frac")


@dataclass
class LossOutput:
    """The loss to backpropagate and what to log about it."""

    loss: torch.Tensor  # scalar
    metrics: dict[str, float]  # mismatch, clipping, correction statistics (see policy_loss)


def loss_normalizer(config: TrainerSection, trajectories: float, loss_tokens: int) -> float:
    """The denominator of a whole minibatch's loss (see the module docstring).

    trajectories: how many trajectories the minibatch holds, a segment counting as its
    share of its trajectory (`TrainSample.share`); loss_tokens: its tokens with loss."""
    if config.aggregation == "seq_sum_norm":
        return float(trajectories * config.norm_tokens)
    if config.aggregation == "token_mean":
        return float(max(loss_tokens, 1))
    raise ValueError(f"unknown aggregation {config.aggregation!r}: seq_sum_norm or token_mean")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def policy_loss(
    logprobs: torch.Tensor,
    proximal: torch.Tensor,
    behaviour: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: TrainerSection,
    normalizer: float,
    reference: torch.Tensor | None = None,
    measured: torch.Tensor | None = None,
) -> LossOutput:
    """The decoupled, corrected PPO loss of a (micro-)batch.

    logprobs: log π_θ with gradient; proximal, behaviour, reference: log π_prox, log μ,
    log π_ref (no gradient); advantages: per sample [B] or per token [B, T]; mask: [B, T].
    normalizer: see `loss_normalizer`. measured: the tokens an engine sampled, which
    MEASURED_METRICS average over (default: mask; a guided segment's are not among them).
    """
    mask = mask.float()
    measured = mask if measured is None else measured.float()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    ratio = torch.exp(logprobs - proximal)
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)

    log_w = (proximal - behaviour).detach()
    weight = torch.exp(log_w)
    keep = mask
    if config.correction == "tis":
        weight = weight.clamp(max=config.correction_cap)
    elif config.correction == "mis":
        inside = (weight <= config.correction_cap) & (weight >= 1 / config.correction_cap)
        keep = mask * inside.float()
    elif config.correction != "none":
        raise ValueError(f"unknown correction {config.correction!r}: tis, mis or none")
    per_token = -weight * surrogate

    if config.kl_coef > 0:
        if reference is None:
            raise ValueError("kl_coef > 0 needs reference logprobs")
        delta = reference - logprobs
        per_token = per_token + config.kl_coef * (torch.exp(delta) - delta - 1)

    loss = (per_token * keep).sum() / normalizer

    with torch.no_grad():
        # k3 estimate of KL(μ || π_prox) from samples of μ: w - 1 - log w.
        mismatch_k3 = torch.exp(log_w) - 1 - log_w
        truncated = (torch.exp(log_w) > config.correction_cap).float()
        metrics = {
            "mismatch_abs_logprob": _masked_mean(log_w.abs(), measured),
            "mismatch_kl_k3": _masked_mean(mismatch_k3, measured),
            "correction_truncated_frac": _masked_mean(truncated, measured)
            if config.correction == "tis"
            else 0.0,
            "correction_masked_frac": 1 - float(keep.sum() / mask.sum().clamp(min=1)),
            "clip_frac": _masked_mean(((ratio - clipped).abs() > 0).float(), mask),
            "ratio_mean": _masked_mean(ratio, mask),
            "loss_tokens": float(keep.sum()),
        }
    return LossOutput(loss, metrics)
