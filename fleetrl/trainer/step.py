"""One trainer step on a batch of groups: the algorithm in one place.

    groups of trajectories ─▶ group advantages (skip groups without signal)
        ─▶ segments as padded sequences (inputs, targets, loss mask, behaviour logprobs,
           sampling temperature, replayed MoE experts)
        ─▶ π_prox: logprobs of the exact sampled tokens at the current weights, once,
           before any update (the first minibatch's: its own forward's, detached)
        ─▶ per minibatch: forward with router replay ─▶ corrected policy loss
           ─▶ backward (micro-batches accumulate) ─▶ clip ─▶ AdamW

Logprobs are those of logits / T, T the temperature each segment was sampled at (greedy
segments, T = 0, at T = 1: the temperature the engine reports their logprobs at), so
importance weights, the KL term and the entropy are of the distribution that sampled. The
engine's top-k / top-p truncation is not replayed: RL samples with both off.

The model trains in float32 (its own master weights); serving casts are made when a version
is published. Shapes: B sequences, T positions.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from fleetrl.config import TrainerSection
from fleetrl.model.qwen3 import Qwen3
from fleetrl.trainer.advantages import Baselines, Estimator, group_advantages
from fleetrl.trainer.loss import MEASURED_METRICS, loss_normalizer, policy_loss
from fleetrl.trainer.parallel import (
    ONE_RANK,
    Ranks,
    all_sum,
    clip_grad_norm,
    most_per_rank,
    share,
)
from fleetrl.types import Segment, Trajectory


@functools.cache
def fast_bf16() -> bool:
    """Whether bfloat16 matmuls beat float32 here: on CUDA, or a CPU with AVX512-BF16/AMX."""
    if torch.cuda.is_available():
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@dataclass
class TrainSample:
    """One segment to train on with the advantage of its trajectory."""

    segment: Segment
    advantage: float
    share: float = 1.0  # of its trajectory, 1 / its segments: what the loss counts it as


@dataclass
class SequenceBatch:
    """Padded training tensors for B segments."""

    inputs: torch.Tensor  # [B, T] token ids fed to the model (segment[:-1], padded)
    targets: torch.Tensor  # [B, T] the next token at each position (segment[1:])
    mask: torch.Tensor  # [B, T] 1 where the target was sampled by the policy
    behaviour: torch.Tensor  # [B, T] behaviour logprob of the target (0 where mask is 0)
    advantages: torch.Tensor  # [B]
    temperature: torch.Tensor  # [B] the logits' divisor: each segment's sampling temperature
    routed_experts: torch.Tensor | None  # [B, T, L_moe, k] engine routing of the inputs
    guided: torch.Tensor  # [B] bool: the expert's episode of a guided group (no behaviour)

    def to(self, device: torch.device) -> SequenceBatch:
        """The batch on `device` (itself when it is there already)."""
        if self.inputs.device == device:
            return self
        routed = self.routed_experts
        return SequenceBatch(
            *(t.to(device) for t in (self.inputs, self.targets, self.mask, self.behaviour)),
            self.advantages.to(device),
            self.temperature.to(device),
            routed.to(device) if routed is not None else None,
            self.guided.to(device),
        )


def samples_from_groups(
    groups: list[list[Trajectory]], estimator: Estimator
) -> tuple[list[TrainSample], list[int]]:
    """Advantages per group; returns the samples to train on and the indices of the groups
    skipped for lack of signal (no reward variance)."""
    samples: list[TrainSample] = []
    skipped: list[int] = []
    for index, group in enumerate(groups):
        rewards = torch.tensor([t.reward for t in group], dtype=torch.float32)
        advantages, informative = group_advantages(rewards, estimator)
        if not informative:
            skipped.append(index)
            continue
        for trajectory, advantage in zip(group, advantages.tolist(), strict=True):
            share = 1 / len(trajectory.segments)
            samples += [TrainSample(s, advantage, share) for s in trajectory.segments]
    return samples, skipped


def samples_from_sessions(
    sessions: list[Trajectory], baselines: Baselines, decay: float
) -> list[TrainSample]:
    """online: each session's segments with its advantage against its task's running
    baseline (`Baselines`, which takes the sessions' rewards in)."""
    rewards = [(t.task_id, t.reward) for t in sessions]
    advantages = baselines.advantages(rewards, decay)
    return [
        TrainSample(segment, advantage, 1 / len(trajectory.segments))
        for trajectory, advantage in zip(sessions, advantages, strict=True)
        for segment in trajectory.segments
    ]


def collate(samples: list[TrainSample], pad_id: int = 0, replay: bool = True) -> SequenceBatch:
    """Right-pad the segments into one batch (pad positions carry mask 0); with `replay`,
    the engine's MoE routing of every input (an MoE batch then needs it on every segment)."""
    width = max(len(s.segment.token_ids) for s in samples) - 1
    B = len(samples)
    inputs = torch.full((B, width), pad_id, dtype=torch.long)
    targets = torch.full((B, width), pad_id, dtype=torch.long)
    mask = torch.zeros(B, width)
    behaviour = torch.zeros(B, width)
    routed = None
    first = samples[0].segment.routed_experts
    if first is not None and replay:
        layers, k = len(first[0]), len(first[0][0])
        routed = torch.zeros(B, width, layers, k, dtype=torch.long)
    for b, sample in enumerate(samples):
        seg = sample.segment
        n = len(seg.token_ids) - 1
        inputs[b, :n] = torch.tensor(seg.token_ids[:-1])
        targets[b, :n] = torch.tensor(seg.token_ids[1:])
        mask[b, :n] = torch.tensor(seg.loss_mask[1:], dtype=torch.float32)
        behaviour[b, :n] = torch.tensor(seg.logprobs[1:])
        if routed is not None:
            if seg.routed_experts is None:
                raise ValueError("an MoE batch needs routed experts on every segment")
            routed[b, :n] = torch.tensor(seg.routed_experts[:-1])
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    temps = [s.segment.temperature or 1.0 for s in samples]  # greedy: logprobs at T = 1
    temperature = torch.tensor(temps, dtype=torch.float32)
    guided = torch.tensor([s.segment.guided for s in samples], dtype=torch.bool)
    return SequenceBatch(inputs, targets, mask, behaviour, advantages, temperature, routed, guided)


def token_logprobs(
    model: Qwen3, batch: SequenceBatch, bf16: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(target | prefix) [B, T] at each segment's sampling temperature, with the
    engine's routing replayed, and the entropy of each position's distribution [B, T] (no
    gradient); `bf16`: matmuls under autocast. Both are computed at the loss positions
    (`batch.mask`) only and are 0 elsewhere: the prompts and tool results, about half of
    a demo batch's tokens, need no vocabulary projection."""
    inputs = batch.inputs
    at = batch.mask.bool()
    with torch.autocast(inputs.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(inputs, routed_experts=batch.routed_experts, logits_at=at).logits
    temperature = batch.temperature.to(inputs.device)[:, None].expand_as(at)[at]
    logprobs = torch.log_softmax(logits.float() / temperature[:, None], dim=-1)  # [N, V]
    chosen = logprobs.gather(-1, batch.targets[at][:, None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    zeros = torch.zeros(at.shape, dtype=chosen.dtype, device=inputs.device)
    return zeros.masked_scatter(at, chosen), zeros.masked_scatter(at, entropy)


@dataclass(frozen=True)
class StepStats:
    """What one `train_step` measured; the leading fields of the "train" record
    (`fleetrl.observe.records.TrainRecord`), which takes them by name."""

    mismatch_abs_logprob: float  # nats/token: mean |log π_prox - log μ| (sampled tokens)
    mismatch_kl_k3: float  # nats/token: k3 estimate of KL(engine μ ‖ π_prox)
    correction_truncated_frac: float  # fraction: weights cut at the TIS cap
    correction_masked_frac: float  # fraction: tokens masked by MIS
    clip_frac: float  # fraction: tokens whose ratio π_θ/π_prox was clipped
    ratio_mean: float  # mean ratio π_θ/π_prox (1 when config.minibatches = 1)
    loss_tokens: float  # count: tokens that carried loss after the correction
    loss: float  # the policy loss: mean over minibatches of each one's loss
    grad_norm: float  # global gradient norm before clipping, mean over minibatches
    entropy: float  # nats/token: entropy of the trainer's distribution
    advantage_mean: float  # mean advantage of the trained segments
    advantage_abs_mean: float  # mean |advantage|: the signal's strength
    advantage_std: float  # std of the advantages (0 for one segment)
    train_tokens: float  # count: sampled tokens trained on
    train_sequences: float  # count: segments trained on
    step_s: float  # s: forward, backward and optimizer steps


@dataclass
class MicroBatch:
    """One forward/backward's batch and the logprobs that stay fixed during a step."""

    batch: SequenceBatch
    proximal: torch.Tensor | None  # [B, T] log π_prox; None: the first forward's, detached
    reference: torch.Tensor | None  # [B, T] log π_ref, with a KL term only
    idle: bool = False  # run for the other ranks' sake only: its loss counts 0


def minibatches(samples: list[TrainSample], parts: int) -> list[list[TrainSample]]:
    """`parts` minibatches (fewer when there are fewer samples), each spanning the batch's
    lengths, and each sorted by length so its micro-batches pad little."""
    by_length = sorted(samples, key=lambda s: len(s.segment.token_ids))
    parts = max(1, min(parts, len(samples)))
    return [by_length[i::parts] for i in range(parts)]


def _prepare(
    model: Qwen3,
    part: list[TrainSample],
    config: TrainerSection,
    reference: Qwen3 | None,
    proximal: bool,
    bf16: bool,
    ranks: Ranks,
) -> list[MicroBatch]:
    """Collate this rank's share of one minibatch into micro-batches with their fixed
    logprobs, before any update: π_prox when `proximal` (every minibatch after the first),
    π_ref with a KL term. Every rank gets as many micro-batches as the busiest one: the
    missing ones are idle (the minibatch's first sample, its loss not counted)."""
    mine = share(part, ranks)
    device = next(model.parameters()).device
    size = config.micro_batch_size
    count = -(-most_per_rank(len(part), ranks) // size)
    prepared = []
    for index in range(count):
        chunk = mine[index * size : (index + 1) * size]
        batch = collate(chunk or part[:1], 0, config.router_replay).to(device)
        with torch.no_grad():
            prox = token_logprobs(model, batch, bf16)[0] if proximal else None
            ref = None
            if config.kl_coef > 0 and reference is not None:
                ref = token_logprobs(reference, batch, bf16)[0]
        prepared.append(MicroBatch(batch, prox, ref, idle=not chunk))
    return prepared


def train_step(
    model: Qwen3,
    optimizer: torch.optim.Optimizer,
    samples: list[TrainSample],
    config: TrainerSection,
    reference: Qwen3 | None = None,
    ranks: Ranks = ONE_RANK,
) -> StepStats:
    """One trainer step over `samples`: `config.minibatches` optimizer steps against one
    proximal policy (the weights at entry); returns what it measured (loss and grad_norm:
    means over the minibatches; the rest over every token or sample).

    With several `ranks` (`model` sharded by `fleetrl.trainer.parallel.shard_model`) every
    rank passes the whole batch and trains its share of it; the step and what it measured
    are the same as one rank's, up to float summation order.

    `reference` (a frozen model) is needed when the loss has a KL term (`kl_coef > 0`).
    Matmuls run in bfloat16 under autocast (master weights, logprobs and loss stay float32)
    when `config.bf16` says so or, unset, where bfloat16 is fast (`fast_bf16`).
    """
    bf16 = fast_bf16() if config.bf16 is None else config.bf16
    if config.kl_coef > 0 and reference is None:
        raise ValueError("kl_coef > 0 needs a reference model")
    start = time.perf_counter()
    model.train()
    parts = minibatches(samples, config.minibatches)
    # π_prox is fixed for the whole step: every minibatch's ratio is against the weights
    # at entry. The first minibatch needs no extra forward: its own is at those weights.
    prepared = [
        _prepare(model, part, config, reference, index > 0, bf16, ranks)
        for index, part in enumerate(parts)
    ]
    # Sums of the loss's per-token statistics, each weighted by the tokens it is a mean
    # over (MEASURED_METRICS: the sampled ones; the rest: every loss token), and the
    # weights' totals; loss_tokens is a plain sum.
    weighted: dict[str, float] = {}
    totals: dict[str, float] = {}
    loss_sum = entropy_sum = grad_norm_sum = 0.0
    for part, micro_batches in zip(parts, prepared, strict=True):
        part_tokens = sum(sum(s.segment.loss_mask[1:]) for s in part)
        # Trajectories, not segments: an episode split into n contexts counts once in all.
        trajectories = sum(s.share for s in part)
        normalizer = loss_normalizer(config, trajectories, part_tokens)
        for micro in micro_batches:
            batch = micro.batch
            logprobs, entropy = token_logprobs(model, batch, bf16)
            proximal = logprobs.detach() if micro.proximal is None else micro.proximal
            # A guided segment was not sampled: its behaviour policy is taken to be the
            # proximal one (weight 1), and it stays out of the mismatch statistics.
            guided = batch.guided[:, None]
            measured = batch.mask * ~guided
            out = policy_loss(
                logprobs,
                proximal,
                torch.where(guided, proximal, batch.behaviour),
                batch.advantages,
                batch.mask,
                config,
                normalizer,
                reference=micro.reference,
                measured=measured,
            )
            if micro.idle:  # the backward's collectives only
                (out.loss * 0.0).backward()
                for name in out.metrics:
                    weighted.setdefault(name, 0.0)
                    totals.setdefault(name, 0.0)
                continue
            (out.loss * ranks.world).backward()  # FSDP averages the ranks' gradients
            tokens, sampled = float(batch.mask.sum()), float(measured.sum())
            for name, value in out.metrics.items():
                if name == "loss_tokens":
                    weight = 1.0
                elif name in MEASURED_METRICS:
                    weight = sampled
                else:
                    weight = tokens
                weighted[name] = weighted.get(name, 0.0) + value * weight
                totals[name] = totals.get(name, 0.0) + weight
            loss_sum += out.loss.item()
            entropy_sum += float((entropy * batch.mask).sum())
        grad_norm_sum += clip_grad_norm(model, config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    names = sorted(weighted)
    summed = all_sum([weighted[n] for n in names] + [totals[n] for n in names], ranks)
    n = len(names)
    weighted = dict(zip(names, summed[:n], strict=True))
    totals = dict(zip(names, summed[n:], strict=True))
    loss_sum, entropy_sum = all_sum([loss_sum, entropy_sum], ranks)
    mask_total = sum(sum(s.segment.loss_mask[1:]) for s in samples)
    per_token = max(mask_total, 1)
    means = {
        name: value if name == "loss_tokens" else value / max(totals[name], 1)
        for name, value in weighted.items()
    }
    advantages = torch.tensor([s.advantage for s in samples])
    return StepStats(
        **means,
        loss=loss_sum / len(parts),
        grad_norm=grad_norm_sum / len(parts),
        entropy=entropy_sum / per_token,
        advantage_mean=float(advantages.mean()),
        advantage_abs_mean=float(advantages.abs().mean()),
        advantage_std=float(advantages.std()) if len(samples) > 1 else 0.0,
        train_tokens=float(mask_total),
        train_sequences=float(len(samples)),
        step_s=time.perf_counter() - start,
    )
