"""The trainer at 2 ranks as users start it. `fleetrl train --trainer-ranks 2` through
faults: a rank killed -9 ends the trainer's incarnation (the launcher ends the other rank),
restarts it and it resumes from the last checkpoint at 2 ranks; then the run is stopped and
the same command at 1 rank continues it (the checkpoint reshards) to the end. The ledger is
exactly-once over the three incarnations, and versions only increase. And `fleetrl trainer`
under torchrun, as the README shows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetrl.config_files import load_config
from fleetrl.orchestrate.run import create_run
from fleetrl.store.objectstore import open_store
from fleetrl.store.weights import WeightStore
from tests.integration.orchestrate.test_faults import children, steps_logged
from tests.integration.orchestrate.test_fleet_faults import assert_ledger_exactly_once
from tests.integration.trainer.test_loop import feed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 8


def launch(tmp_path: Path, model: Path, ranks: int, log: str) -> subprocess.Popen:
    """`fleetrl train` of run f at `ranks` trainer ranks, logging to tmp_path/log."""
    overrides = [
        f"model.path={model}", f"trainer.steps={STEPS}", "trainer.groups_per_step=2",
        "trainer.checkpoint_every=2", "trainer.max_staleness=1",
        "trainer.dynamic_sampling=false", "rollout.group_size=2",
        "rollout.max_concurrent_groups=2", "harness.max_turns=2", "eval.enabled=false",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "fleetrl.cli", "train", "--name", "f"]
    argv += ["--trainer-ranks", str(ranks), "--runs-dir", str(tmp_path)]
    argv += [a for o in overrides for a in ("--set", o)]
    env = os.environ | {"FLEETRL_CACHE": str(tmp_path / "cache")}
    output = (tmp_path / log).open("wb")
    return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)


def rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of the trainer's rank `rank` (a child of the launcher)."""
    for pid, command in children(launcher).items():
        if " trainer --store " not in command:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    return None


def train_records(metrics: Path) -> list[dict]:
    if not metrics.exists():
        return []
    return [r for line in metrics.open() if (r := json.loads(line))["kind"] == "train"]


def restarted(metrics: Path) -> bool:
    """Whether the second incarnation of the trainer has logged a step."""
    return any(r["incarnation"] == 2 for r in train_records(metrics))


def wait_until(condition, launcher: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert launcher.poll() is None, f"the launcher ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def test_a_killed_rank_restarts_the_trainer_and_another_rank_count_continues(
    tmp_path, tiny_checkpoint
):
    run = tmp_path / "f"
    metrics = run / "metrics.jsonl"
    first = launch(tmp_path, tiny_checkpoint, 2, "first.log")
    try:
        wait_until(lambda: steps_logged(metrics) >= 3, first, "step 3")
        pid = rank_pid(first.pid, 1)
        assert pid is not None, "rank 1 of the trainer not found"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: restarted(metrics), first, "a step of the restarted trainer")
        store = open_store(str(run / "store"))
        latest = store.get("checkpoints/LATEST").decode()
        shards = {k.rsplit("/", 1)[1] for k in store.list(f"checkpoints/{latest}/dcp/")}
        assert {"__0_0.distcp", "__1_0.distcp"} <= shards  # saved at 2 ranks
        wait_until(lambda: steps_logged(metrics) >= 5, first, "step 5")
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
    assert steps_logged(metrics) < STEPS, "the run ended before it could be continued"
    second = launch(tmp_path, tiny_checkpoint, 1, "second.log")
    try:
        assert second.wait(600) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
    assert_ledger_exactly_once(metrics, STEPS)
    records = train_records(metrics)
    assert [r["incarnation"] for r in records][-1] == 3
    assert sorted({r["incarnation"] for r in records}) == [1, 2, 3]
    store = open_store(str(run / "store"))
    final = f"checkpoints/step_{STEPS:06d}/dcp/"
    assert {k.rsplit("/", 1)[1] for k in store.list(final)} == {".metadata", "__0_0.distcp"}
    weights = WeightStore(str(run / "store"))
    last = {r["step"]: r for r in records}
    assert weights.latest() == max(weights.versions()) == last[STEPS]["version"]
    assert (run / "final" / "model.safetensors").is_file()


def test_fleetrl_trainer_runs_under_torchrun(tmp_path, tiny_checkpoint):
    """The README's form: `torchrun … -m fleetrl.cli trainer --store URL`, two ranks on
    this machine, groups handed in by hand (no region)."""
    store = tmp_path / "store"
    overrides = {
        "name": "t",
        "model": {"path": str(tiny_checkpoint)},
        "rollout": {"group_size": 2},
        "trainer": {"steps": 2, "groups_per_step": 2, "checkpoint_every": 1},
    }
    create_run(load_config(overrides=overrides), str(store))
    feed(tmp_path, "", range(4))  # into tmp_path / "store", the run's
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    argv += ["-m", "fleetrl.cli", "trainer", "--store", str(store)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = train_records(tmp_path / "runs" / "t" / "metrics.jsonl")
    assert sorted(g for r in records for g in r["group_ids"]) == [f"r/{i}" for i in range(4)]
    shards = {k.rsplit("/", 1)[1] for k in open_store(str(store)).list("checkpoints/")}
    assert {"__0_0.distcp", "__1_0.distcp"} <= shards
    assert WeightStore(str(store)).latest() == 2
