"""The trainer loop in online mode (real-time RL): single-session groups in, a step every
`online_sessions` sessions or once `online_interval_s` passed, advantages against running
baselines that survive a checkpoint. Each run trains the shared tiny checkpoint."""

import json

import torch

from fleetrl.model.checkpoint import load_pretrained
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.trainer.advantages import Baselines
from fleetrl.trainer.loop import run_trainer
from fleetrl.types import Trajectory
from tests.integration.trainer.test_loop import sampled_segment

torch.set_num_threads(1)
# (task, reward) of the sessions fed, in order: tasks come back, rewards differ.
SESSIONS = [("a", 1.0), ("b", 0.0), ("a", 0.0), ("c", 1.0)] * 2


def session(seed: int, task: str, reward: float, version: int = 0) -> Trajectory:
    """One served session: a prompt and 5 sampled tokens."""
    segment = sampled_segment(torch.Generator().manual_seed(seed), version)
    return Trajectory(task, [segment], reward, "external", 1, 0, 0, 0.1)


def feed_sessions(tmp_path, run, seqs) -> None:
    """Hand in one group of ONE session per index of SESSIONS, as region "r" (group ids
    r/0, r/1, ... in order)."""
    channel = TrajectoryChannel(str(tmp_path / run / "store"))
    for i in seqs:
        task, reward = SESSIONS[i]
        channel.append("r", [session(i, task, reward)], RegionReport("r", 0))


def train_records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").open()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def online(config_for, run, steps, sessions, interval_s=600.0):
    return config_for(
        run,
        steps,
        mode="online",
        online_sessions=sessions,
        online_interval_s=interval_s,
        baseline_decay=0.5,
        bf16=False,
    )


def test_a_step_takes_online_sessions_sessions(tmp_path, config_for):
    feed_sessions(tmp_path, "n", range(7))
    state = run_trainer(online(config_for, "n", 2, sessions=3), tmp_path / "n")
    records = train_records(tmp_path / "n")
    assert [r["group_ids"] for r in records] == [["r/0", "r/1", "r/2"], ["r/3", "r/4", "r/5"]]
    assert records[-1]["pending_group_ids"] == ["r/6"]
    assert state.trained_samples == 6 and state.version == 2
    assert set(state.baselines.tasks) == {"a", "b", "c"}


def test_a_step_trains_fewer_sessions_once_the_interval_passed(tmp_path, config_for):
    feed_sessions(tmp_path, "t", range(2))  # fewer than the 16 a step takes
    config = online(config_for, "t", 1, sessions=16, interval_s=1.0)
    state = run_trainer(config, tmp_path / "t")
    [record] = train_records(tmp_path / "t")
    assert record["group_ids"] == ["r/0", "r/1"] and state.trained_samples == 2
    assert record["wait_s"] >= 1.0  # it waited for more, then trained what it had


def test_a_resumed_online_run_ends_where_an_uninterrupted_one_does(tmp_path, config_for):
    # Uninterrupted: 4 steps of 2 sessions.
    feed_sessions(tmp_path, "straight", range(8))
    straight = run_trainer(online(config_for, "straight", 4, sessions=2), tmp_path / "straight")
    # Interrupted after 2 steps (checkpoint_every 1), resumed to 4.
    feed_sessions(tmp_path, "resumed", range(4))
    first = run_trainer(online(config_for, "resumed", 2, sessions=2), tmp_path / "resumed")
    assert first.baselines != Baselines()
    feed_sessions(tmp_path, "resumed", range(4, 8))
    resumed = run_trainer(online(config_for, "resumed", 4, sessions=2), tmp_path / "resumed")

    assert resumed.baselines == straight.baselines  # restored from the checkpoint
    assert resumed.trained_samples == straight.trained_samples == 8
    a = load_pretrained(tmp_path / "straight" / "final").state_dict()
    b = load_pretrained(tmp_path / "resumed" / "final").state_dict()
    assert all(torch.allclose(a[name], b[name], rtol=0, atol=1e-7) for name in a)
    records = train_records(tmp_path / "resumed")
    assert [r["group_ids"] for r in records][2:] == [["r/4", "r/5"], ["r/6", "r/7"]]
