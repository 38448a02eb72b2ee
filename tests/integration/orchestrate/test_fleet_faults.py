"""The fleet through faults, each role a `fleetrl` process on the store alone: a region
joins mid-run and another leaves; the S3 server is killed for 10 s mid-run. Each run
finishes with an exactly-once ledger, every region's groups read in order, none missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.env.store.conftest import KEY, SECRET, SeaweedFS
from tests.integration.orchestrate.test_faults import steps_logged

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUN = [
    "--set", "name=f", "--set", "trainer.steps=6", "--set", "trainer.groups_per_step=2",
    "--set", "trainer.checkpoint_every=2", "--set", "trainer.max_staleness=1",
    "--set", "trainer.dynamic_sampling=false",
    "--set", "rollout.group_size=2", "--set", "rollout.max_concurrent_groups=2",
    "--set", "harness.max_turns=2",
]  # fmt: skip


def start(args: list[str], folder: Path, env: dict[str, str]) -> subprocess.Popen:
    """`fleetrl ARGS` as a process working in its own folder, logging to folder/log.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    log = (folder / "log.txt").open("ab")
    command = [sys.executable, "-m", "fleetrl.cli", *args]
    return subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for_step(metrics: Path, step: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while steps_logged(metrics) < step:
        assert process.poll() is None, "the trainer ended early"
        assert time.monotonic() < deadline, f"step {step} not reached"
        time.sleep(0.2)


def assert_ledger_exactly_once(metrics: Path, steps: int) -> dict[str, list[int]]:
    """The ledger contract; returns each region's group numbers."""
    train = [json.loads(line) for line in metrics.open() if '"train"' in line]
    last = {r["step"]: r for r in train}
    assert sorted(last) == list(range(1, steps + 1))
    kinds = ("group_ids", "skipped_group_ids", "dropped_group_ids")
    accounted = [g for s in sorted(last) for k in kinds for g in last[s][k]]
    accounted += last[steps]["pending_group_ids"]
    assert len(accounted) == len(set(accounted)), "a group was trained twice"
    by_region: dict[str, list[int]] = {}
    for group in accounted:
        region, seq = group.split("/")
        by_region.setdefault(region, []).append(int(seq))
    for region, seqs in by_region.items():
        assert sorted(seqs) == list(range(len(seqs))), f"{region}: a group was lost"
    return by_region


def test_a_region_joins_mid_run_and_another_leaves(tmp_path, tiny_checkpoint):
    store = str(tmp_path / "store")
    env = os.environ | {"FLEETRL_CACHE": str(tmp_path / "cache")}
    model = ["--set", f"model.path={tiny_checkpoint}"]
    assert start(["run", "create", "--store", store, *RUN, *model], tmp_path, env).wait(120) == 0
    trainer = start(["trainer", "--store", store], tmp_path / "trainer", env)
    early = start(["region", "--store", store, "--name", "early"], tmp_path / "early", env)
    metrics = tmp_path / "trainer" / "runs" / "f" / "metrics.jsonl"
    late = None
    try:
        wait_for_step(metrics, 2, trainer, 300)
        late = start(["region", "--store", store, "--name", "late"], tmp_path / "late", env)
        wait_for_step(metrics, 3, trainer, 300)
        early.send_signal(signal.SIGKILL)  # leaves for good: nobody restarts it
        assert trainer.wait(600) == 0, (tmp_path / "trainer" / "log.txt").read_text()[-3000:]
        assert late.wait(120) == 0
    finally:
        for process in (trainer, early, late):
            if process is not None and process.poll() is None:
                process.kill()
    by_region = assert_ledger_exactly_once(metrics, 6)
    assert set(by_region) == {"early", "late"}  # the latecomer's groups were trained


def test_the_s3_server_down_for_ten_seconds_mid_run_loses_nothing(tmp_path, tiny_checkpoint):
    seaweed = SeaweedFS(tmp_path / "seaweedfs")  # this test's own server: it kills it
    server = seaweed.start()
    url = f"s3://{server.bucket}/outage-{uuid.uuid4().hex[:8]}"
    aws = {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "FLEETRL_CACHE": str(tmp_path / "cache"),
    }
    env = os.environ | aws
    model = ["--set", f"model.path={tiny_checkpoint}"]
    metrics = tmp_path / "trainer" / "runs" / "f" / "metrics.jsonl"
    processes: list[subprocess.Popen] = []
    try:
        assert start(["run", "create", "--store", url, *RUN, *model], tmp_path, env).wait(120) == 0
        trainer = start(["trainer", "--store", url], tmp_path / "trainer", env)
        region = start(["region", "--store", url, "--name", "west"], tmp_path / "west", env)
        processes = [trainer, region]
        wait_for_step(metrics, 2, trainer, 300)
        seaweed.kill()
        time.sleep(10)
        seaweed.start()
        assert trainer.wait(600) == 0, (tmp_path / "trainer" / "log.txt").read_text()[-3000:]
        assert region.wait(180) == 0, (tmp_path / "west" / "log.txt").read_text()[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        seaweed.stop()
    assert set(assert_ledger_exactly_once(metrics, 6)) == {"west"}
