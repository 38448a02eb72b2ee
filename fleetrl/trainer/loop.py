"""The trainer process: groups in from the store, policy versions out to the store.

    ┌─▶ gather P groups (cursor; groups staler than max_staleness dropped, groups without
    │   reward variance skipped (dynamic sampling), both counted and given back to the
    │   admission budget)
    │        ─▶ train_step ─▶ version v+1 ─▶ publish (full every K, else delta)
    │        ─▶ progress for regions' admission ─▶ metrics ─▶ checkpoint every N
    └──────────────────────────────────────────────────────────────┘

It shares nothing with the regions but the object store: weights/ (versions), trajectories/
(groups), control/ (its progress and the stop signal, `fleetrl.store.control`). A
checkpoint (in the store: `trainer.checkpoints`) holds the model, the optimizer, the RNG
states, the step, the version, the channel cursor and the groups read but not yet trained,
so a restarted trainer, on this machine or another, resumes exactly: no group lost, none
trained twice in the lineage that survives. The model trains in float32; each version is
published rounded to `store.publish_dtype` (bf16 by default: what the engines serve).

A step is one batch: it publishes one version and logs one `train` record, whatever the
number of optimizer steps (`trainer.minibatches`) it takes; `TrainerState.step`, the
ledger and the checkpoints count steps.

At N ranks (`fleetrl.trainer.parallel`) every rank runs this loop: rank 0 reads the groups
and hands every rank the batch and the state, and alone claims the incarnation, checks the
fence, reports progress and logs; every rank trains its share, publishes the tensors it
owns (`fleetrl.trainer.publish`) and saves its shards of each checkpoint.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from fleetrl.config import RunConfig, TrainerSection
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint, save_pretrained
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.observe.export import open_sinks
from fleetrl.observe.metrics import MetricsLogger
from fleetrl.store.admission import fleet_budget, hand_out
from fleetrl.store.control import (
    Progress,
    check_fence,
    claim_incarnation,
    signal_stop,
    store_url,
    write_progress,
)
from fleetrl.store.objectstore import ObjectStore
from fleetrl.store.serving import rollback_targets
from fleetrl.store.trajectories import GroupRecord, TrajectoryChannel, decode_record, encode_record
from fleetrl.store.weights import WeightStore, WeightStoreOptions
from fleetrl.trainer.advantages import Baselines, has_signal
from fleetrl.trainer.checkpoints import load_checkpoint, save_checkpoint
from fleetrl.trainer.metrics import RunCounters, StepTiming, ledger, sync_record, train_record
from fleetrl.trainer.parallel import ONE_RANK, Ranks, from_leader, shard_model, whole
from fleetrl.trainer.publish import publish_version
from fleetrl.trainer.step import samples_from_groups, samples_from_sessions, train_step

T = TypeVar("T")


@dataclass
class TrainerState:
    """Everything besides tensors that an exact resume needs."""

    step: int = 0  # steps (batches) done
    version: int = 0  # policy version of the current weights
    cursor: dict[str, int] = field(default_factory=dict)  # channel: region -> last seq read
    trained_samples: int = 0  # samples of the groups that made up batches
    dropped_samples: int = 0  # samples of groups dropped as too stale
    dropped_groups: int = 0  # those groups (the admission budget counts whole groups)
    skipped_groups: int = 0  # groups without reward variance (no signal)
    filtered_groups: int = 0  # of those, kept out of batches by dynamic sampling
    incarnation: int = 0  # this process's start count in the run (store.control)
    baselines: Baselines = field(default_factory=Baselines)  # online: rewards' running means


def staleness(record: GroupRecord, version: int) -> int:
    """How many versions the group's oldest sampled token lags `version`."""
    oldest = min(
        (v for t in record.trajectories for s in t.segments for v in s.versions if v >= 0),
        default=version,
    )
    return version - oldest


def make_optimizer(
    model: torch.nn.Module, lr: float, output_norm_lr: float | None, weight_decay: float
) -> torch.optim.AdamW:
    """AdamW over every parameter. Given `output_norm_lr`, the final norm's gain (it scales
    all output logits: an inverse temperature per hidden dimension) learns at that rate
    instead, an opt-in way to let a short run sharpen the policy."""
    if output_norm_lr is None:
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    norm = model.model.norm.weight
    rest = [p for p in model.parameters() if p is not norm]
    groups = [{"params": rest}, {"params": [norm], "lr": output_norm_lr}]
    return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)


def run_trainer(
    config: RunConfig,
    run_dir: Path,
    poll_s: float = 0.2,
    store: ObjectStore | None = None,
    ranks: Ranks = ONE_RANK,
) -> TrainerState:
    """Train for `config.trainer.steps` steps, publishing every version; returns the state.

    `config` is one `check_trainable` passed (the trainer's start-up checks it before it
    copies the run: `orchestrate.roles.start_trainer`); `store`: the run's store as the
    start-up opened it (None: opened here from `config.store.url`). At several `ranks`
    every rank calls it: rank 0 reads the groups and speaks for the trainer (control,
    metrics), every rank trains its share, publishes its tensors and saves its shards."""
    tc = config.trainer
    torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    random.seed(tc.seed)
    base = resolve_checkpoint(config.model.path)
    model = shard_model(load_pretrained(base, dtype=torch.float32), ranks)
    tokenizer = Tokenizer.from_pretrained(base)
    optimizer = make_optimizer(model, tc.lr, tc.output_norm_lr, tc.weight_decay)
    # The KL reference is the starting model, frozen (kept only when the loss needs it).
    reference = None
    if tc.kl_coef > 0:
        reference = shard_model(load_pretrained(base, dtype=torch.float32), ranks)
    options = WeightStoreOptions(
        full_every=config.store.full_every, publish_dtype=config.store.publish_dtype
    )
    weights = WeightStore(store or store_url(config.store.url, run_dir), options)
    state, pending = _resume(weights.store, model, optimizer, ranks)
    state.incarnation = from_leader(lambda: claim_incarnation(weights.store), ranks)
    _publish_start(weights, model, state, ranks)
    channel = TrajectoryChannel(weights.store)
    logger = None
    if ranks.leader:
        sinks = open_sinks(run_dir, config.observe, config.name, config.model_dump(mode="json"))
        logger = MetricsLogger(run_dir / "metrics.jsonl", sinks=sinks)
    step_start = time.monotonic()
    while state.step < tc.steps:
        # Rank 0 reads the groups (and counts them in `state`); every rank gets them.
        read = partial(_gather, channel, weights.store, state, pending, config, poll_s)
        state, gathered = from_leader(partial(_with_state, read, state), ranks)
        pending, dropped, filtered, wait_s = gathered
        batch, pending = _cut(pending, tc)
        if tc.mode == "online":
            sessions = [t for r in batch for t in r.trajectories]
            samples = samples_from_sessions(sessions, state.baselines, tc.baseline_decay)
            silent: list[int] = []
        else:
            samples, silent = samples_from_groups([r.trajectories for r in batch], tc.advantage)
        stats = train_step(model, optimizer, samples, tc, reference, ranks) if samples else None
        skipped = filtered + [batch[i] for i in silent]
        trained = [r for i, r in enumerate(batch) if i not in silent]
        consumed = batch + filtered  # the step's groups, for its reward and staleness
        # Staleness as trained: against the version these weights had before the step.
        ages = [staleness(r, state.version) for r in consumed]
        state.step, state.version = state.step + 1, state.version + 1
        state.skipped_groups += len(silent)
        state.trained_samples += sum(len(r.trajectories) for r in batch)
        # A newer trainer took over: stop (every rank).
        from_leader(partial(check_fence, weights.store, state.incarnation), ranks)
        publish_start = time.monotonic()
        published = publish_version(weights, state.version, model, ranks)
        publish_s = time.monotonic() - publish_start
        scale = float(whole(model.model.norm.weight).detach().mean())
        if logger is not None:
            _report_progress(weights.store, state, config, waiting_s=0.0)
            wall_s, step_start = time.monotonic() - step_start, time.monotonic()
            timing = StepTiming(wait_s, publish_s, wall_s)
            counters = RunCounters(state.version, state.dropped_samples, state.skipped_groups)
            books = ledger(state.incarnation, trained, skipped, dropped, pending)
            record = train_record(consumed, ages, stats, counters, timing, scale, books)
            logger.log_record(state.step, record)
            logger.log_record(state.version, sync_record(published, consumed))
        if state.step % tc.checkpoint_every == 0 or state.step == tc.steps:
            saved = [encode_record(r) for r in pending]
            save_checkpoint(
                weights.store,
                state.step,
                model,
                optimizer,
                asdict(state),
                saved,
                keep=tc.keep_checkpoints,
                tokenizer=tokenizer,
                ranks=ranks,
            )
            if config.store.collect_garbage and ranks.leader:  # the checkpoint holds what was read
                channel.delete_before(state.cursor)
                weights.gc(pinned=rollback_targets(weights.store))
    _save_final(model, tokenizer, run_dir / "final", ranks)
    if logger is not None:
        signal_stop(weights.store)
        logger.close()
    return state


def _resume(
    store: ObjectStore, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ranks: Ranks
) -> tuple[TrainerState, list[GroupRecord]]:
    """The state and pending groups of the run's last checkpoint (fresh ones without)."""
    restored = load_checkpoint(store, model, optimizer, ranks)
    if restored is None:
        return TrainerState(), []
    state, pending = restored
    baselines = Baselines(**state.pop("baselines", {}))  # none in checkpoints from before
    return TrainerState(**state, baselines=baselines), [decode_record(r) for r in pending]


def _publish_start(
    weights: WeightStore, model: torch.nn.Module, state: TrainerState, ranks: Ranks
) -> None:
    """Make the store serve this trainer's weights. A version is a publication, not a step
    count: a fresh run publishes its base as version 0; a trainer resumed from a checkpoint
    older than the store's newest version (it died between checkpoints, or a zombie went
    on) publishes above every version any incarnation reached, so versions only increase."""
    highest = from_leader(weights.highest, ranks)
    if highest is None:
        publish_version(weights, state.version, model, ranks)
    elif highest > state.version:
        state.version = highest + 1
        publish_version(weights, state.version, model, ranks)


def _save_final(model: Qwen3, tokenizer: Tokenizer, folder: Path, ranks: Ranks) -> None:
    """The trained model and its tokenizer as a checkpoint folder (written by rank 0)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options) if ranks.distributed else None
    if ranks.leader:
        save_pretrained(model, folder, state=state)
        tokenizer.save(folder)


def _gather(
    channel: TrajectoryChannel,
    store: ObjectStore,
    state: TrainerState,
    pending: list[GroupRecord],
    config: RunConfig,
    poll_s: float,
) -> tuple[list[GroupRecord], list[GroupRecord], list[GroupRecord], float]:
    """Read groups until a batch of fresh ones is pending. Every pending group is checked
    against the version about to be trained, not only when read: a group left over from an
    earlier step (or a checkpoint) may have aged past max_staleness since. Too-stale groups
    are dropped and counted. With dynamic sampling, groups without reward variance are
    skipped (counted) until P informative ones are pending or `max_skip_batches` x P were
    skipped. Returns the pending groups, the dropped ones, the skipped ones, the seconds
    waited."""
    tc = config.trainer
    start = time.monotonic()
    pending, dropped, skipped = list(pending), [], []
    while True:
        kept = []
        for record in pending:
            if staleness(record, state.version) > tc.max_staleness:
                dropped.append(record)
                state.dropped_samples += len(record.trajectories)
                state.dropped_groups += 1
            elif tc.mode == "groups" and tc.dynamic_sampling and not _has_signal(record):
                skipped.append(record)
                state.skipped_groups += 1
                state.filtered_groups += 1
            else:
                kept.append(record)
        pending = kept
        if _ready(pending, tc, time.monotonic() - start):
            return pending, dropped, skipped, time.monotonic() - start
        if len(skipped) >= tc.max_skip_batches * tc.groups_per_step:
            return pending, dropped, skipped, time.monotonic() - start
        fresh = channel.read_new(state.cursor)
        pending += fresh
        if not fresh:
            _report_progress(store, state, config, time.monotonic() - start)
            time.sleep(poll_s)


def _ready(pending: list[GroupRecord], tc: TrainerSection, waited_s: float) -> bool:
    """Whether the pending groups make a batch: P groups; online, N sessions, or any
    once `online_interval_s` passed."""
    if tc.mode == "groups":
        return len(pending) >= tc.groups_per_step
    sessions = sum(len(r.trajectories) for r in pending)
    return sessions >= tc.online_sessions or (sessions > 0 and waited_s >= tc.online_interval_s)


def _cut(
    pending: list[GroupRecord], tc: TrainerSection
) -> tuple[list[GroupRecord], list[GroupRecord]]:
    """The step's batch and what stays pending: the first P groups; online, the first
    groups holding up to N sessions (at least one group)."""
    if tc.mode == "groups":
        return pending[: tc.groups_per_step], pending[tc.groups_per_step :]
    taken = sessions = 0
    while taken < len(pending) and (
        taken == 0 or sessions + len(pending[taken].trajectories) <= tc.online_sessions
    ):
        sessions += len(pending[taken].trajectories)
        taken += 1
    return pending[:taken], pending[taken:]


def _with_state(read: Callable[[], T], state: TrainerState) -> tuple[TrainerState, T]:
    """What `read()` returns, with `state` as it left it (for the other ranks)."""
    result = read()
    return state, result


def _has_signal(record: GroupRecord) -> bool:
    """Whether a group's rewards differ (`fleetrl.trainer.advantages.has_signal`)."""
    return has_signal(torch.tensor([t.reward for t in record.trajectories]))


def _report_progress(
    store: ObjectStore, state: TrainerState, config: RunConfig, waiting_s: float
) -> None:
    """Tell the regions where training stands and hand out the fleet's admission budget
    (`fleetrl.store.admission`). Groups dropped as too stale or skipped by dynamic sampling
    never take a place in a batch: their samples are given back, or the budget would
    shrink by them for good."""
    progress = Progress(
        state.version,
        state.trained_samples,
        state.dropped_samples,
        state.step,
        waiting_s,
        time.time(),
    )
    write_progress(store, progress)
    tc, group_size = config.trainer, config.rollout.group_size
    batch = tc.groups_per_step * group_size
    returned = (state.dropped_groups + state.filtered_groups) * group_size
    budget = fleet_budget(state.step, tc.max_staleness, batch, returned, last_step=tc.steps)
    hand_out(store, budget, group_size)
