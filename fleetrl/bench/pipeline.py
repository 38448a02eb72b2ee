"""`fleetrl bench pipeline`: the synchronous and the asynchronous loop on one workload.

Both runs use the same model, tasks, batch (P groups of G samples), concurrency and number
of optimizer steps, one after the other, each as real trainer and region processes over a
fresh store:

- sync: max_staleness 0 — a whole batch is generated at version v, then the region waits
  for v + 1 while the trainer trains (the classic generate / train / publish loop);
- async: max_staleness O — the region keeps groups in flight while the trainer trains, and
  a slow episode delays only its own group.

Throughput is measured between the first and the last optimizer step (start-up excluded):
samples/s = trained samples / that time. Also: the trainer's idle fraction, mean staleness,
reward at the same number of samples, and the episode-time distribution (its tail is
what the synchronous loop waits for).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleetrl.config import RunConfig
from fleetrl.config_files import with_overrides
from fleetrl.observe.metrics import read_metrics
from fleetrl.orchestrate.local import run_local
from fleetrl.store.trajectories import TrajectoryChannel


def _episode_times(run_dir: Path) -> list[float]:
    channel = TrajectoryChannel(str(run_dir / "store"))
    return [s for record in channel.read_new({}) for s in record.report.episode_s]


def _measure(run_dir: Path) -> dict[str, float]:
    """Steady-state figures of one finished run (steps 2..N, after start-up)."""
    train = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    steady = train[1:] or train
    span = train[-1]["time"] - train[0]["time"]
    trained = sum(sum(r["staleness_hist"]) for r in steady)
    times = sorted(_episode_times(run_dir))
    return {
        "samples_per_s": trained / span if span > 0 else 0.0,
        "trainer_idle_frac": statistics.mean(r["trainer_idle_frac"] for r in steady),
        "staleness_mean": statistics.mean(r["staleness_mean"] for r in train),
        "reward": statistics.mean(r["reward"] for r in train),
        "pass_rate": statistics.mean(r["pass_rate"] for r in train),
        "samples": sum(sum(r["staleness_hist"]) for r in train),
        "dropped_samples": train[-1]["dropped_samples"],
        "episode_s_p50": times[len(times) // 2],
        "episode_s_p99": times[min(len(times) - 1, int(0.99 * len(times)))],
    }


@dataclass
class PipelineWorkload:
    """What both modes run: the same batch, concurrency and number of steps."""

    steps: int = 8  # optimizer steps per mode
    groups_per_step: int = 4  # P
    group_size: int = 8  # G
    max_staleness: int = 2  # the asynchronous run's bound (the synchronous one's is 0)
    env_latency_s: float = 1.0  # mean simulated environment wait per tool turn


def run_pipeline_bench(
    base: RunConfig, workload: PipelineWorkload, progress: bool = True
) -> dict[str, Any]:
    """Run sync then async from the `base` configuration; return both sides' figures and
    `speedup` (async / sync).

    Both runs may keep (max_staleness + 1) batches of groups in flight (the synchronous
    one's admission never uses more than one); `env_latency_s` adds the long-tailed
    environment waits of production episodes (see `rollout.env_latency_s`)."""
    w = workload
    result: dict[str, Any] = {}
    for mode, staleness in (("sync", 0), ("async", w.max_staleness)):
        overrides = {
            "name": f"bench-{mode}",
            "trainer": {
                "steps": w.steps,
                "groups_per_step": w.groups_per_step,
                "max_staleness": staleness,
            },
            "rollout": {
                "group_size": w.group_size,
                "max_concurrent_groups": w.groups_per_step * (w.max_staleness + 1),
                "env_latency_s": w.env_latency_s,
            },
            "eval": {"enabled": False},
            "store": {"collect_garbage": False},  # episode times are read from the channel
        }
        config = with_overrides(base, overrides)
        with tempfile.TemporaryDirectory(prefix=f"fleetrl-bench-{mode}-") as tmp:
            run_dir = Path(tmp) / config.name
            run_local(config, run_dir, progress=progress)
            result[mode] = _measure(run_dir)
    result["speedup"] = result["async"]["samples_per_s"] / result["sync"]["samples_per_s"]
    result["config"] = asdict(workload) | {"model": base.model.path}
    return result
