"""A trainer run with both exports on: its TensorBoard scalars are the figures of its
metrics.jsonl, and its offline W&B run holds the same kinds. (The sinks' details, on records
fed to the logger: tests/unit/observe and tests/env/observe.)"""

import time

import pytest
import torch

from fleetrl.config_files import load_config
from fleetrl.observe.metrics import read_metrics, scalars
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.trainer.loop import run_trainer
from fleetrl.types import Segment, Trajectory

torch.set_num_threads(1)


def group(seed: int) -> list[Trajectory]:
    """Two samples of one prompt with different rewards (an informative group)."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for reward in (1.0, 0.0):
        completion = torch.randint(10, 200, (5,), generator=g).tolist()
        segment = Segment(
            token_ids=[1, 2, 3, *completion],
            loss_mask=[0, 0, 0, 1, 1, 1, 1, 1],
            logprobs=[0.0] * 3 + [-7.0] * 5,
            versions=[-1] * 3 + [0] * 5,
        )
        samples.append(Trajectory(f"t{seed}", [segment], reward, "finish", 1, 0, 0, 0.1))
    return samples


def test_a_trainer_run_exports_what_it_logs(tmp_path, tiny_checkpoint, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run = tmp_path / "run"
    config = load_config(
        overrides={
            "name": "exported",
            "model": {"path": str(tiny_checkpoint)},
            "rollout": {"group_size": 2},
            "trainer": {"steps": 2, "groups_per_step": 1, "checkpoint_every": 2},
            "store": {"url": str(run / "store")},
            "observe": {"tensorboard": True, "wandb": True},
        }
    )
    channel = TrajectoryChannel(str(run / "store"))
    for seed in range(2):
        channel.append("r", group(seed), RegionReport("r", 0))
    run_trainer(config, run)

    records = read_metrics(run / "metrics.jsonl")
    assert [r["kind"] for r in records] == ["train", "sync"] * 2
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    for record in records:
        for field, value in scalars(record).items():
            points = {e.step: e.value for e in events.Scalars(f"{record['kind']}/{field}")}
            assert points[record["step"]] == pytest.approx(value, rel=1e-6), field
    # W&B's service writes the offline run on its own time: wait for the last kind logged.
    (file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 20
    while b"sync/sync_bytes" not in file.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    logged = file.read_bytes()
    assert b"exported" in logged  # the W&B run's name is the run's
    for key in (b"train/reward", b"train/loss", b"train/step", b"sync/sync_bytes"):
        assert key in logged, key
