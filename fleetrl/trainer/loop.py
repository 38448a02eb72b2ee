"""The trainer process: groups in from the store, policy versions out to the store.

    ┌─▶ read new groups (cursor) ─▶ drop groups staler than max_staleness (counted)
    │        ─▶ P groups ─▶ train_step ─▶ version v+1 ─▶ publish (full every K, else delta)
    │        ─▶ progress object for regions' admission ─▶ metrics ─▶ checkpoint every N
    └──────────────────────────────────────────────────────────────┘

It shares nothing with the regions but the object store: weights/ (versions), trajectories/
(groups), control/ (its progress and the stop signal). A checkpoint holds the model, the
optimizer, the RNG states, the step, the version, the channel cursor and the groups read
but not yet trained, so a restarted trainer resumes exactly: no group lost, none trained
twice. The model trains in float32; versions are published in `publish_dtype`.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.model.checkpoint import load_pretrained, save_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.observe.metrics import MetricsLogger
from fleetrl.rollout.evaluate import resolve_checkpoint
from fleetrl.store.trajectories import GroupRecord, TrajectoryChannel, decode_record, encode_record
from fleetrl.store.weights import WeightStore, WeightStoreOptions
from fleetrl.trainer.loss import LossConfig
from fleetrl.trainer.step import StepConfig, samples_from_groups, train_step

PROGRESS_KEY = "control/trainer.json"  # what regions read for admission
STOP_KEY = "control/stop"  # written when the run is over


@dataclass
class TrainerState:
    """Everything besides tensors that an exact resume needs."""

    step: int = 0  # optimizer steps done
    version: int = 0  # policy version of the current weights
    cursor: dict[str, int] = field(default_factory=dict)  # channel: region -> last seq read
    trained_samples: int = 0
    dropped_samples: int = 0  # samples of groups dropped as too stale
    skipped_groups: int = 0  # groups without reward variance (no signal)


def store_url(config: RunConfig, run_dir: Path) -> str:
    """The run's object store: the configured URL or a folder in the run directory."""
    return config.store.url or str(run_dir / "store")


def staleness(record: GroupRecord, version: int) -> int:
    """How many versions the group's oldest sampled token lags `version`."""
    oldest = min(
        (v for t in record.trajectories for s in t.segments for v in s.versions if v >= 0),
        default=version,
    )
    return version - oldest


def fast_bf16() -> bool:
    """Whether bfloat16 matmuls beat float32 here: on CUDA, or a CPU with AVX512-BF16/AMX."""
    if torch.cuda.is_available():
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def make_optimizer(
    model: torch.nn.Module, lr: float, output_norm_lr: float, weight_decay: float
) -> torch.optim.AdamW:
    """AdamW over every parameter; the final norm's gain, which scales all output logits
    (an inverse temperature per hidden dimension), learns at `output_norm_lr`: sharpening
    the policy is most of what a short RL run can do, and at the matrices' rate that one
    vector would barely move."""
    norm = model.model.norm.weight
    rest = [p for p in model.parameters() if p is not norm]
    groups = [{"params": rest}, {"params": [norm], "lr": output_norm_lr}]
    return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)


def _checkpoint(run_dir: Path, model, optimizer, state: TrainerState, pending) -> None:
    path = run_dir / "checkpoints" / f"step_{state.step:06d}"
    save_pretrained(model, path)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "state": asdict(state),
            "pending": [encode_record(r) for r in pending],
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        },
        path / "trainer_state.pt",
    )
    (run_dir / "checkpoints" / "LATEST").write_text(path.name)


def _resume(run_dir: Path, model, optimizer) -> tuple[TrainerState, list[GroupRecord]]:
    latest = run_dir / "checkpoints" / "LATEST"
    if not latest.is_file():
        return TrainerState(), []
    path = run_dir / "checkpoints" / latest.read_text().strip()
    model.load_state_dict(load_pretrained(path).state_dict())
    saved = torch.load(path / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"]["torch"])
    random.setstate(saved["rng"]["python"])
    return TrainerState(**saved["state"]), [decode_record(r) for r in saved["pending"]]


def _histogram(values: list[int]) -> list[int]:
    counts = [0] * (max(values, default=0) + 1)
    for v in values:
        counts[v] += 1
    return counts


def run_trainer(config: RunConfig, run_dir: Path, poll_s: float = 0.2) -> TrainerState:
    """Train for `config.trainer.steps` steps, publishing every version; returns the state."""
    tc = config.trainer
    torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    random.seed(tc.seed)
    base = resolve_checkpoint(config.model.path)
    model = load_pretrained(base, dtype=torch.float32)
    optimizer = make_optimizer(model, tc.lr, tc.output_norm_lr, tc.weight_decay)
    # The KL reference is the starting model, frozen (kept only when the loss needs it).
    reference = load_pretrained(base, dtype=torch.float32) if tc.kl_coef > 0 else None
    state, pending = _resume(run_dir, model, optimizer)
    weights = WeightStore(
        store_url(config, run_dir), WeightStoreOptions(full_every=config.store.full_every)
    )
    if weights.latest() is None or weights.latest() < state.version:
        weights.publish(state.version, model.state_dict())
    channel = TrajectoryChannel(weights.store)
    step_config = StepConfig(
        loss=LossConfig(
            clip_low=tc.clip_low,
            clip_high=tc.clip_high,
            correction=tc.correction,
            correction_cap=tc.correction_cap,
            kl_coef=tc.kl_coef,
            norm_tokens=tc.norm_tokens,
        ),
        advantage=tc.advantage,
        micro_batch_size=tc.micro_batch_size,
        max_grad_norm=tc.max_grad_norm,
        bf16=fast_bf16() if tc.bf16 is None else tc.bf16,
    )
    logger = MetricsLogger(run_dir / "metrics.jsonl")
    last_step_end = time.monotonic()
    while state.step < tc.steps:
        wait_start = time.monotonic()
        while len(pending) < tc.groups_per_step:
            fresh = channel.read_new(state.cursor)
            for record in fresh:
                if staleness(record, state.version) > tc.max_staleness:
                    state.dropped_samples += len(record.trajectories)
                else:
                    pending.append(record)
            if not fresh:
                _write_progress(weights, state)
                time.sleep(poll_s)
        wait_s = time.monotonic() - wait_start
        batch, pending = pending[: tc.groups_per_step], pending[tc.groups_per_step :]
        # Staleness is re-checked at training time: the version may have moved on.
        ages = [staleness(r, state.version) for r in batch]
        sample_ages = [age for age, r in zip(ages, batch, strict=True) for _ in r.trajectories]
        groups = [r.trajectories for r in batch]
        samples, skipped = samples_from_groups(groups, tc.advantage)
        state.skipped_groups += skipped
        metrics: dict[str, float] = {}
        if samples:
            metrics = train_step(model, optimizer, samples, step_config, reference)
        state.step += 1
        state.version += 1
        publish_start = time.monotonic()
        published = weights.publish(state.version, model.state_dict())
        publish_s = time.monotonic() - publish_start
        state.trained_samples += sum(len(g) for g in groups)
        _write_progress(weights, state)
        rewards = [t.reward for g in groups for t in g]
        tokens = sum(sum(s.loss_mask) for g in groups for t in g for s in t.segments)
        wall = time.monotonic() - last_step_end
        last_step_end = time.monotonic()
        logger.log(
            "train",
            state.step,
            {
                **metrics,
                "version": state.version,
                "reward": sum(rewards) / len(rewards),
                "pass_rate": sum(r >= 1.0 for r in rewards) / len(rewards),
                "staleness_hist": _histogram(sample_ages),
                "staleness_mean": sum(ages) / len(ages),
                "dropped_samples": state.dropped_samples,
                "skipped_groups": state.skipped_groups,
                "wait_s": wait_s,
                "forward_backward_s": metrics.get("step_s", 0.0),
                "publish_s": publish_s,
                "samples_per_s": len(rewards) / wall,
                "tokens_per_s": tokens / wall,
                "trainer_idle_frac": wait_s / wall,
                "output_scale": float(model.model.norm.weight.detach().mean()),
                "tool_errors_mean": sum(t.tool_errors for g in groups for t in g) / len(rewards),
            },
        )
        logger.log(
            "sync",
            state.version,
            {
                "sync_bytes": published.delta_bytes + published.full_bytes,
                "sync_full_bytes": published.elements * 4,
                "changed_frac": published.changed / max(published.elements, 1),
                **_region_sync(batch),
            },
        )
        if state.step % tc.checkpoint_every == 0 or state.step == tc.steps:
            _checkpoint(run_dir, model, optimizer, state, pending)
    final = run_dir / "final"
    save_pretrained(model, final)
    Tokenizer.from_pretrained(base).save(final)
    weights.store.put(STOP_KEY, b"stop")
    logger.close()
    return state


def _region_sync(batch: list[GroupRecord]) -> dict[str, float]:
    """Mean weight-swap pause and fetch time the regions reported with these groups."""
    syncs = [s for r in batch for s in r.report.syncs]
    if not syncs:
        return {}
    return {
        "sync_pause_ms": 1000 * sum(s["pause_s"] for s in syncs) / len(syncs),
        "sync_fetch_ms": 1000 * sum(s["fetch_s"] for s in syncs) / len(syncs),
    }


def _write_progress(weights: WeightStore, state: TrainerState) -> None:
    progress = {
        "version": state.version,
        "trained_samples": state.trained_samples,
        "dropped_samples": state.dropped_samples,
    }
    weights.store.put(PROGRESS_KEY, json.dumps(progress).encode())
