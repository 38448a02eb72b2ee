"""Crashes survived: `fleetrl train` with its trainer killed -9 between checkpoints at three
points and one of its two regions killed -9 mid-group. The run finishes, and its ledger
(the train records' group ids) is exactly-once in the lineage that survives: in the last
record of each step no group appears twice, and each region's groups were read in order
with none missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetrl.store.weights import WeightStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 10


def children(pid: int) -> dict[int, str]:
    """The launcher's child processes: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == pid:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
    return {p: c.decode(errors="replace") for p, c in found.items()}


def role_pid(launcher: int, role: str) -> int | None:
    """The pid of the launcher's child running `role` ("trainer" or "region-1")."""
    for pid, command in children(launcher).items():
        if role == "trainer" and " trainer --store " in command:
            return pid
        if role != "trainer" and f"--name {role} " in command:
            return pid
    return None


def steps_logged(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    steps = [json.loads(line).get("step", 0) for line in metrics.open() if '"train"' in line]
    return max(steps, default=0)


def test_trainer_and_region_killed_mid_run_finish_exactly_once(tmp_path, tiny_checkpoint):
    overrides = [
        f"model.path={tiny_checkpoint}", f"trainer.steps={STEPS}", "trainer.groups_per_step=2",
        "trainer.checkpoint_every=3", "trainer.max_staleness=1", "rollout.group_size=2",
        "trainer.dynamic_sampling=false",
        "rollout.max_concurrent_groups=2", "harness.max_turns=2", "eval.enabled=false",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "fleetrl.cli", "train", "--name", "f", "--regions", "2"]
    argv += ["--runs-dir", str(tmp_path)] + [a for o in overrides for a in ("--set", o)]
    log = (tmp_path / "launcher.log").open("wb")
    launcher = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    run = tmp_path / "f"
    # Kill points: the trainer after steps 2 (before its first checkpoint), 4 and 7 (one
    # step past a checkpoint each), region-1 after step 3, mid-group. The last kill has three
    # steps of margin: a trainer killed after its final checkpoint would have nothing to redo.
    kills = [(2, "trainer"), (3, "region-1"), (4, "trainer"), (7, "trainer")]
    killed = []
    deadline = time.monotonic() + 800
    try:
        while kills and launcher.poll() is None and time.monotonic() < deadline:
            step, role = kills[0]
            pid = role_pid(launcher.pid, role)
            logged = steps_logged(run / "metrics.jsonl")
            if logged >= step and pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed.append((logged, role))
                kills.pop(0)
                time.sleep(1.0)  # let the launcher see the death before the next poll
            time.sleep(0.2)
        assert launcher.wait(max(1, deadline - time.monotonic())) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
        log.close()
    assert [role for _, role in killed] == ["trainer", "region-1", "trainer", "trainer"]
    assert killed[-1][0] < STEPS, f"the last kill came too late to be redone: {killed}"

    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    train = [r for r in records if r["kind"] == "train"]
    last = {r["step"]: r for r in train}  # a later incarnation's record of a step wins
    assert sorted(last) == list(range(1, STEPS + 1))
    assert max(r["incarnation"] for r in train) == 4  # three restarts
    kinds = ("group_ids", "skipped_group_ids", "dropped_group_ids")
    accounted = [g for s in sorted(last) for k in kinds for g in last[s][k]]
    accounted += last[STEPS]["pending_group_ids"]
    assert len(accounted) == len(set(accounted)), "a group was trained twice"
    by_region: dict[str, list[int]] = {}
    for group in accounted:
        region, seq = group.split("/")
        by_region.setdefault(region, []).append(int(seq))
    assert set(by_region) == {"region-0", "region-1"}
    for region, seqs in by_region.items():
        assert sorted(seqs) == list(range(len(seqs))), f"{region}: a group was lost"
    # Versions only increased: the store's versions are distinct and its latest is the
    # final trainer's, above every version a dead incarnation published.
    weights = WeightStore(str(run / "store"))
    versions = weights.versions()
    assert weights.latest() == max(versions) == last[STEPS]["version"]
    assert [r["version"] for r in (last[s] for s in sorted(last))] == sorted(
        r["version"] for r in last.values()
    )
