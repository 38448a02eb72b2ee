"""A run joined only through S3: `fleetrl run create`, then the trainer and two regions as
separate processes, each in its own work folder with its own cache, sharing nothing but a
SeaweedFS bucket reached through the AWS_* variables. One region keeps its own weight store
(a relay copies each version into it once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from fleetrl.store.objectstore import open_store
from fleetrl.store.weights import WeightStore
from tests.env.store.conftest import KEY, SECRET

pytestmark = pytest.mark.timeout(900)

RUN = [
    "--set", "name=fleet", "--set", "trainer.steps=3", "--set", "trainer.groups_per_step=2",
    "--set", "trainer.checkpoint_every=1", "--set", "rollout.group_size=2",
    "--set", "rollout.max_concurrent_groups=1", "--set", "trainer.max_staleness=2",
    "--set", "trainer.dynamic_sampling=false",
]  # fmt: skip


def fleetrl(args: list[str], cwd, env: dict[str, str]) -> subprocess.Popen:
    log = open(cwd / "log.txt", "wb")  # noqa: SIM115 (the process owns it)
    command = [sys.executable, "-m", "fleetrl.cli", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)


def test_trainer_and_two_regions_share_only_an_s3_bucket(tmp_path, s3_server):
    url = f"s3://{s3_server.bucket}/fleet-{uuid.uuid4().hex[:8]}"
    aws = {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    machines = {}
    for machine in ("creator", "trainer", "west", "east"):
        (folder := tmp_path / machine).mkdir()
        env = os.environ | aws | {"FLEETRL_CACHE": str(folder / "cache")}
        machines[machine] = (folder, env)
    creator, env = machines["creator"]
    assert fleetrl(["run", "create", "--store", url, *RUN], creator, env).wait(120) == 0
    processes = {"trainer": fleetrl(["trainer", "--store", url], *machines["trainer"])}
    for region in ("west", "east"):
        args = ["region", "--store", url, "--name", region]
        if region == "east":  # east keeps its own weight store, fed by a relay
            args += ["--regional-store", str(machines["east"][0] / "regional")]
        processes[region] = fleetrl(args, *machines[region])
    try:
        for name, process in processes.items():
            folder = machines[name][0]
            assert process.wait(600) == 0, (folder / "log.txt").read_text()[-3000:]
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    # The trainer's own work folder holds its metrics and final model; nothing else shared.
    trainer_dir = machines["trainer"][0] / "runs" / "fleet"
    records = [json.loads(line) for line in (trainer_dir / "metrics.jsonl").open()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    trained = [g for r in train for g in r["group_ids"] + r["skipped_group_ids"]]
    assert len(trained) == len(set(trained)) == 6
    assert {g.split("/")[0] for g in trained} <= {"west", "east"}
    assert (trainer_dir / "final" / "config.json").is_file()
    store = open_store(url, s3_server.storage_options())
    assert WeightStore(store).latest() == 3
    assert store.exists("checkpoints/LATEST") and store.exists("control/stop")
    for region in ("west", "east"):
        assert not (machines[region][0] / "runs" / "fleet" / "metrics.jsonl").exists()
    # East's engine followed its regional copy, which the relay fed from the origin.
    regional = WeightStore(str(machines["east"][0] / "regional"))
    assert regional.latest() is not None and regional.versions()
    assert "relay-east" in WeightStore(store).followers()
    assert "east" not in WeightStore(store).followers()  # its engine never read the origin
