"""The Ray launcher on a local Ray instance: a tiny run created in a local-folder store, its
trainer (one actor, or one per rank) and regions as actors. Checks the machinery
(placement, restarts, shutdown), not learning."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from fleetrl.config import RunConfig
from fleetrl.config_files import load_config
from fleetrl.orchestrate import ray_launcher
from fleetrl.orchestrate.local import RunFailed
from fleetrl.orchestrate.ray_launcher import namespace, run_ray
from fleetrl.orchestrate.run import create_run
from fleetrl.store.admission import read_heartbeats
from fleetrl.store.objectstore import open_store
from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.store.weights import WeightStore
from tests.integration.orchestrate.test_faults import steps_logged
from tests.integration.orchestrate.test_fleet_faults import assert_ledger_exactly_once

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def quiet_ray(monkeypatch):
    """No usage reports from the Ray instances the launcher starts (they also start faster)."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def tiny_run(tmp_path: Path, name: str, steps: int) -> RunConfig:
    """A run of the shipped base model in a local-folder store, created as the caller does."""
    overrides = {
        "name": name,
        "store": {"url": str(tmp_path / "store")},
        "trainer": {
            "steps": steps,
            "groups_per_step": 2,
            "checkpoint_every": 1,
            "dynamic_sampling": False,
        },
        "rollout": {"group_size": 2, "max_concurrent_groups": 1},
        "eval": {"enabled": False},
    }
    config = load_config(None, overrides)
    create_run(config, config.store.url)
    return config


def trained_groups(run_dir: Path, steps: int) -> list[str]:
    """The ids of the groups each step trained on or skipped, after checking the steps."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, steps + 1))
    assert (run_dir / "final" / "config.json").is_file()
    return [g for r in train for g in r["group_ids"] + r["skipped_group_ids"]]


def test_trainer_and_two_regions_run_as_actors(tmp_path):
    config = tiny_run(tmp_path, "ray", steps=3)
    run_dir = tmp_path / "run"
    run_ray(config, run_dir, regions=2, progress=False)
    groups = trained_groups(run_dir, 3)
    assert len(groups) == len(set(groups)) == 6
    # Both regions ran; which of them the budget went to depends on which loaded first.
    assert set(read_heartbeats(open_store(config.store.url))) == {"region-0", "region-1"}
    assert {g.split("/")[0] for g in groups} <= {"region-0", "region-1"}
    assert WeightStore(config.store.url).latest() == 3
    assert (run_dir / "regions" / "region-1" / "base").is_dir()  # each its own work folder
    assert not ray.is_initialized()  # the launcher stopped the Ray it started


def test_a_killed_region_is_restarted_and_the_run_finishes(tmp_path):
    """With one region, the run only finishes if Ray brings the killed region back."""
    config = tiny_run(tmp_path, "ray-restart", steps=2)
    pids: list[int] = []
    errors: list[BaseException] = []

    def kill_region_after_its_first_group() -> None:
        try:
            region = None
            while region is None:
                time.sleep(0.5)
                with contextlib.suppress(ValueError):  # not created yet
                    if ray.is_initialized():
                        region = ray.get_actor("region-0", namespace=namespace(config.name))
            pids.append(ray.get(region.pid.remote()))
            while TrajectoryChannel(config.store.url).count("region-0") < 1:
                time.sleep(0.5)
            os.kill(pids[0], signal.SIGKILL)
            pids.append(ray.get(region.pid.remote(), timeout=120))
        except BaseException as err:
            errors.append(err)

    killer = threading.Thread(target=kill_region_after_its_first_group, daemon=True)
    killer.start()
    run_ray(config, tmp_path / "run", regions=1, progress=False)
    killer.join(10)
    assert not errors, errors
    assert len(pids) == 2 and pids[0] != pids[1]  # a new process took over
    groups = trained_groups(tmp_path / "run", 2)
    assert len(groups) == len(set(groups)) == 4


def test_a_role_that_keeps_failing_fails_the_launch(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_launcher, "MAX_RESTARTS", 2)  # the bound, not its size, is tested
    config = tiny_run(tmp_path, "ray-broken", steps=1)
    shutil.rmtree(tmp_path / "store" / "run" / "base")  # no role can open the run now
    with pytest.raises(RunFailed, match="Ray gave up restarting it"):
        run_ray(config, tmp_path / "run", regions=1, progress=False)
    assert not ray.is_initialized()


def test_a_killed_rank_restarts_all_ranks_and_the_run_finishes(tmp_path):
    """A trainer at 2 ranks is two actors, each saving its shards; rank 1's process killed
    after step 1: the launcher replaces both ranks, and the new incarnation resumes from
    the store's checkpoint."""
    config = tiny_run(tmp_path, "ray-rank-restart", steps=3)
    run_dir = tmp_path / "run"
    errors: list[BaseException] = []

    def kill_rank_1_after_the_first_step() -> None:
        try:
            rank = None
            while rank is None:
                time.sleep(0.5)
                with contextlib.suppress(ValueError):  # not created yet
                    if ray.is_initialized():
                        rank = ray.get_actor("trainer-1", namespace=namespace(config.name))
            pid = ray.get(rank.pid.remote())
            while steps_logged(run_dir / "metrics.jsonl") < 1:
                time.sleep(0.2)
            os.kill(pid, signal.SIGKILL)
        except BaseException as err:
            errors.append(err)

    killer = threading.Thread(target=kill_rank_1_after_the_first_step, daemon=True)
    killer.start()
    run_ray(config, run_dir, regions=1, progress=False, trainer_ranks=2)
    killer.join(10)
    assert not errors, errors
    assert_ledger_exactly_once(run_dir / "metrics.jsonl", 3)
    train = [json.loads(line) for line in (run_dir / "metrics.jsonl").open() if '"train"' in line]
    assert max(r["incarnation"] for r in train) == 2
    assert (run_dir / "final").is_dir()  # rank 0 worked in run_dir
    dcp = tmp_path / "store" / "checkpoints" / "step_000003" / "dcp"
    assert sorted(p.name for p in dcp.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not ray.is_initialized()


def test_a_store_without_a_run_is_refused_before_ray_starts(tmp_path):
    config = load_config(None, {"store": {"url": str(tmp_path / "empty")}})
    with pytest.raises(RunFailed, match="holds no run"):
        run_ray(config, tmp_path / "run", progress=False)
    assert not ray.is_initialized()
