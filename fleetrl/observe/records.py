"""The typed records of `metrics.jsonl`: one dataclass per kind, its fields the line's keys.

Role: the producers build these (the trainer a `TrainRecord` per step and a `SyncRecord`
per published version, the local orchestrator an `EvalRecord` per evaluated checkpoint) and
log them with `MetricsLogger.log_record`; the report (`fleetrl.observe.report`) names its
series through them, so a plot cannot ask for a key that nothing logs.

Contract: field names are the JSON keys, and metrics.jsonl is a file format: renaming a
field changes the format. A field that is None is left out of the line (the key is absent,
as it was before these types existed). `kind` is the record's kind in the file and
`step_axis` what its `step` counts. Fields are keyword-only, so a record's key order (the
order of the fields) need not put the optional fields last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, kw_only=True)
class TrainRecord:
    """One trainer step: the step's own metrics, then the batch's and the loop's.

    The fields up to `step_s` are those of `train_step`'s `StepStats`, None when no group
    of the batch had reward variance, so no optimizer step ran; token statistics are over
    the tokens the policy sampled.
    """

    kind: ClassVar[str] = "train"
    step_axis: ClassVar[str] = "train step"

    mismatch_abs_logprob: float | None = None  # nats/token: mean |log π_prox - log μ|
    mismatch_kl_k3: float | None = None  # nats/token: k3 estimate of KL(engine μ ‖ π_prox)
    correction_truncated_frac: float | None = None  # fraction: weights cut at the TIS cap
    correction_masked_frac: float | None = None  # fraction: tokens masked by MIS
    clip_frac: float | None = None  # fraction: tokens whose ratio π_θ/π_prox was clipped
    ratio_mean: float | None = None  # mean ratio π_θ/π_prox (1 when trainer.minibatches = 1)
    loss_tokens: float | None = None  # count: tokens that carried loss after the correction
    loss: float | None = None  # the policy loss: mean over minibatches of each one's loss
    grad_norm: float | None = None  # global gradient norm before clipping, mean over minibatches
    entropy: float | None = None  # nats/token: entropy of the trainer's distribution
    advantage_mean: float | None = None  # mean advantage of the trained segments
    advantage_abs_mean: float | None = None  # mean |advantage|: the signal's strength
    advantage_std: float | None = None  # std of the advantages (0 for one segment)
    train_tokens: float | None = None  # count: sampled tokens trained on
    train_sequences: float | None = None  # count: segments trained on
    step_s: float | None = None  # s: forward, backward and optimizer step
    version: int  # the policy version this step published
    reward: float  # mean reward of the sampled trajectories of every group the step used
    # (skipped groups too; guided groups' expert episodes not: they are not the policy's)
    pass_rate: float  # fraction of those trajectories with reward >= 1
    staleness_hist: list[int]  # trajectories at 0, 1, 2, … versions behind at training
    staleness_mean: float  # versions: mean staleness of the batch's groups
    dropped_samples: int  # trajectories dropped as too stale, since the run began
    skipped_groups: int  # groups skipped for lack of reward variance, since the run began
    wait_s: float  # s: waiting for enough groups
    forward_backward_s: float  # s: `step_s`, 0 when no optimizer step ran
    publish_s: float  # s: publishing the new version
    samples_per_s: float  # trajectories trained per second of the step's wall time
    tokens_per_s: float  # sampled tokens trained per second of the step's wall time
    trainer_idle_frac: float  # fraction of the step's wall time spent waiting for groups
    output_scale: float  # mean gain of the final norm (the logits' scale)
    tool_errors_mean: float  # tool errors per sampled trajectory of the batch
    # The ledger: with the last record of each step, every group read is in exactly one of
    # these lists once (ids "region/seq" of the trajectory channel).
    incarnation: int  # the trainer's start count (1 for the first process of the run)
    group_ids: list[str]  # groups trained in this step
    skipped_group_ids: list[str]  # groups without reward variance: in the batch, or kept
    # out of it by dynamic sampling (trainer.dynamic_sampling)
    dropped_group_ids: list[str]  # groups dropped since the previous step: too stale
    pending_group_ids: list[str]  # groups read but not trained yet, after this step
    # s: mean age, at this step, of the groups it trained since they were handed in (a
    # served session's feedback, real-time RL); None when no group says when
    feedback_age_s: float | None = None
    guided_samples: int = 0  # expert episodes in guided groups (rollout.guide_failed_groups)
    guided_recoveries: int = 0  # of them, the ones finishing a sample after a refused edit


@dataclass(frozen=True, kw_only=True)
class SyncRecord:
    """One published policy version: what it cost to send, and what it cost the regions."""

    kind: ClassVar[str] = "sync"
    step_axis: ClassVar[str] = "policy version"

    sync_bytes: int  # bytes a follower holding the previous version downloads (manifest + delta)
    full_bytes: int  # bytes of one full version in the served dtype (uncompressed)
    unchanged_frac: float  # fraction of elements bit-identical to the previous version
    # Means over the weight swaps the regions reported with the trained groups (None: none).
    sync_pause_ms: float | None = None  # ms: inference paused to apply a version
    sync_fetch_ms: float | None = None  # ms: fetching a version from the store


@dataclass(frozen=True, kw_only=True)
class EvalRecord:
    """A held-out evaluation of one checkpoint (the numbers of its `EvalResult`)."""

    kind: ClassVar[str] = "eval"
    step_axis: ClassVar[str] = "train step"

    pass_at_1: float  # mean over tasks of the fraction of their episodes passed
    ci_low: float  # 95% bootstrap interval over tasks of pass_at_1, lower bound
    ci_high: float  # and upper bound
    episodes: int  # graded episodes
    tasks: int  # distinct tasks
    duration_s: float  # s: the whole evaluation
    mean_tool_errors: float  # tool errors per episode
    model: str  # which checkpoint: "base" or "final"
    temperature: float | None = None  # sampling temperature of its episodes (0: greedy)


Record = TrainRecord | SyncRecord | EvalRecord
RECORDS: dict[str, type[Record]] = {r.kind: r for r in (TrainRecord, SyncRecord, EvalRecord)}
