"""`fleetrl bench realtime`: an online run of the tiny random model as real trainer, gate
and serve processes, four simulated users, the latency phases and the held-out evaluation;
the ledger and the reward bins on made-up sessions; and its refusals, before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetrl.bench.realtime import (
    reward_change,
    reward_over_time,
    session_ledger,
    sessions_per_version,
)
from fleetrl.cli import app
from fleetrl.rollout.users import UserSession
from fleetrl.store.control import Progress
from fleetrl.store.trajectories import GroupRecord, RegionReport
from fleetrl.types import Trajectory


def bench_tiny(tmp_path: Path, checkpoint: Path, timeout_s: int, *flags: str) -> dict[str, Any]:
    """`fleetrl bench realtime --json FLAGS` on the tiny model, sized for a test (a FLAGS
    --set comes after these and wins); its figures."""
    tiny = {
        "model.path": checkpoint,
        "trainer.online_sessions": 2,
        "harness.max_turns": 2,
        "harness.max_reply_tokens": 16,
        "gate.tasks": 2,
        "gate.poll_s": 0.5,
        "eval.enabled": "false",
    }
    argv = [sys.executable, "-m", "fleetrl.cli", "bench", "realtime", "--json"]
    argv += ["--heldout-tasks", "2", "--runs-dir", str(tmp_path)]
    for key, value in tiny.items():
        argv += ["--set", f"{key}={value}"]
    argv += flags
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


# The tiny random model solves nothing: every reward is 0, every version passes the gate
# (no worse), and the figures check the path, the ledger and the swaps, not learning. One
# user at a time: their feedback never overlaps (the recorder's concurrent flushes are
# another test's subject).
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_realtime_end_to_end(tmp_path, tiny_checkpoint):
    figures = bench_tiny(
        tmp_path, tiny_checkpoint, 280,
        "--sessions", "4", "--rate", "5", "--concurrency", "1", "--latency-requests", "20",
        "--task-pool", "2",
    )  # fmt: skip

    sessions = figures["sessions"]
    assert sessions | {"started": 4, "answered": 4, "failed": 0, "lost": 0} == sessions
    assert sessions | {"trained": 4, "pending": 0, "duplicated": 0, "expired": 0} == sessions
    assert figures["user_errors"] == {}
    server = figures["server"]
    assert server | {"rewarded": 4, "groups_sent": 4, "send_failures": 0} == server
    assert figures["trainer_ended"] == "its steps done"
    assert figures["config"]["trainer_steps"] == 2
    assert figures["versions_published"] >= 3  # the base and one per step
    verdicts = figures["verdicts"]
    assert verdicts and all(verdict["passed"] for verdict in verdicts)
    assert figures["served_version"] == verdicts[-1]["version"] >= 1

    bins = figures["reward_over_time"]  # one per round through the pool of 2 tasks
    assert [b["sessions"] for b in bins] == [2, 2] and all(b["mean_reward"] == 0 for b in bins)
    assert figures["reward_change"] == {"mean": 0, "low": 0, "high": 0, "paired": True, "tasks": 2}
    assert all(0 <= b["from_s"] <= b["to_s"] for b in bins)
    assert sum(figures["sessions_per_version"].values()) >= 4  # a session may span two
    assert figures["feedback_age_s"]["max"] >= figures["feedback_age_s"]["mean"] > 0
    assert figures["staleness_mean"] >= 0

    latency = figures["latency"]
    assert latency["toggled_between"] == [0, figures["served_version"]]
    for phase in ("no_swaps", "swaps"):
        assert latency[phase]["requests"] == 20 and latency[phase]["failed"] == 0
        assert 0 < latency[phase]["p50_s"] <= latency[phase]["p99_s"]
    assert latency["no_swaps"]["versions_seen"] == [figures["served_version"]]
    assert latency["swaps"]["toggles"] >= 2 and latency["p99_ratio"] > 0
    assert len(latency["swaps"]["versions_seen"]) == 2  # the server swapped in flight

    heldout = figures["heldout"]
    assert heldout["tasks"] == 2
    assert [heldout["first"]["version"], heldout["last"]["version"]] == [
        0,
        figures["served_version"],
    ]
    for version in ("first", "last"):
        low, value, high = (heldout[version][k] for k in ("ci_low", "pass_at_1", "ci_high"))
        assert 0 <= low <= value <= high <= 1
    assert heldout["gain"]["ci_low"] <= heldout["gain"]["points"] <= heldout["gain"]["ci_high"]

    logs = tmp_path / "realtime" / "logs"
    assert {p.name for p in logs.iterdir()} >= {"trainer.log", "gate.log", "serve.log"}
    assert "Traceback" not in (logs / "serve.log").read_text()


# Six users over about 12 s: the trainer is killed about 4 s in, the serving process about
# 8 s in, each started again; the users retry through the restart and every session they
# were answered for reaches the channel and a step.
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_realtime_loses_no_session_when_trainer_and_server_are_killed(
    tmp_path, tiny_checkpoint
):
    figures = bench_tiny(
        tmp_path, tiny_checkpoint, 400,
        "--faults", "--sessions", "6", "--rate", "0.5", "--concurrency", "2",
        "--latency-requests", "4",
        "--set", "trainer.max_staleness=100",  # no session dropped: each must be trained
    )  # fmt: skip

    assert [fault["role"] for fault in figures["faults"]] == ["trainer", "serve"]
    assert all(fault["restart_s"] > 0 for fault in figures["faults"])
    sessions = figures["sessions"]
    assert sessions | {"started": 6, "answered": 6, "failed": 0, "lost": 0} == sessions
    assert sessions["trained"] + sessions["pending"] == 6 + sessions["duplicated"]
    assert figures["user_errors"] == {}
    assert figures["trainer_ended"] == "its steps done"
    logs = tmp_path / "realtime" / "logs"
    assert (logs / "serve.log").read_text().count("fleetrl: serving") == 2


def user(
    i: int, arrived: float, reward: float | None, versions: set[int], task: str = "t", **kw: Any
) -> UserSession:
    return UserSession(
        f"user-0-{i}", task, arrived, arrived, arrived + 1, reward, versions=versions, **kw
    )


def group(seq: int, recorder_group: str) -> GroupRecord:
    trajectory = Trajectory("t", [], 0.0, "external", 1, 0, 0, 1.0, group_id=recorder_group)
    return GroupRecord("serve", seq, [trajectory], RegionReport("serve", 0, [0.0]))


def test_the_ledger_places_every_group_of_the_channel():
    users = [user(i, 100.0 + i, 1.0, {0}, feedback_status=200) for i in range(4)]
    users.append(user(4, 104.0, None, set(), error="feedback: HTTP 409"))
    # serve-1 went into the channel twice; user 4's went in though its feedback failed
    channel = [group(seq, f"serve-{g}") for seq, g in enumerate([0, 1, 1, 2, 3, 4])]
    train = [
        {"group_ids": ["serve/0", "serve/1"], "skipped_group_ids": []},
        {"group_ids": ["serve/2"], "skipped_group_ids": []},
    ]
    # It dropped serve/3 after its last record (only its progress counts it); serve/4 and
    # serve/5 wait.
    ledger = session_ledger(users, train, Progress(dropped_samples=1), channel, expired=0)
    assert ledger == {
        "started": 5,
        "answered": 4,
        "failed": 1,
        "trained": 3,
        "skipped": 0,
        "dropped": 1,
        "pending": 2,
        "duplicated": 1,
        "expired": 0,
        "lost": -1,  # user 4's group was sent, its feedback answered with an error
    }
    assert session_ledger(users[:4], [], Progress(), channel[:1], 0)["lost"] == 3


def test_reward_over_time_bins_sessions_in_arrival_order():
    users = [user(i, 10.0 + i, float(i >= 6), {i // 4}) for i in reversed(range(10))]
    bins = reward_over_time(users, 4)
    assert [b["sessions"] for b in bins] == [3, 3, 2, 2]
    assert [b["mean_reward"] for b in bins] == [0.0, 0.0, 1.0, 1.0]
    assert [b["versions"] for b in bins] == [[0], [0, 1], [1], [2]]
    assert bins[0]["from_s"] == 0.0 and bins[-1]["to_s"] == 10.0
    assert len(reward_over_time(users[:2], 8)) == 2 and reward_over_time([], 8) == []
    assert sessions_per_version(users) == {"0": 4, "1": 4, "2": 2}


def test_the_reward_change_pairs_rounds_of_a_pool_task_by_task():
    # Two rounds through 20 tasks: the first solves 10, the second those and 5 more. Paired
    # (each task compared with itself), the rise is clear; unpaired, the task draws' own
    # spread hides it.
    first = [user(i, i, float(i < 10), {0}, f"t{i}") for i in range(20)]
    second = [user(20 + i, 20 + i, float(i < 15), {1}, f"t{i}") for i in reversed(range(20))]
    paired = reward_change(first + second, 2, paired=True)
    assert paired == paired | {"mean": 0.25, "paired": True, "tasks": 20}
    assert 0 < paired["low"] < 0.25 < paired["high"]
    unpaired = reward_change(first + second, 2, paired=False)
    assert unpaired["mean"] == 0.25 and unpaired["paired"] is False
    assert unpaired["low"] < 0 < paired["low"]
    # an ungraded session leaves its task out of the pairing; one bin has no change
    first[0].reward = None
    assert reward_change(first + second, 2, paired=True)["tasks"] == 19
    assert reward_change(first, 1, paired=False) is None


runner = CliRunner()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--rate", "0"], "--rate"),
        (["--rate", "-1.5"], "--rate"),
        (["--sessions", "0"], "--sessions"),
        (["--concurrency", "0"], "--concurrency"),
        (["--heldout-tasks", "0"], "--heldout-tasks"),
        (["--latency-requests", "0"], "--latency-requests"),
        (["--name", "../up"], "--name"),
        (["--sessions", "20", "--task-pool", "7"], "--task-pool"),
        (["--sessions", "20", "--task-pool", "20"], "--task-pool"),
        (["--task-pool", "0"], "--task-pool"),
    ],
)
def test_bench_realtime_refuses_bad_options_up_front(tmp_path, options, named):
    result = runner.invoke(app, ["bench", "realtime", "--runs-dir", str(tmp_path), *options])
    assert result.exit_code == 2
    assert named in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_bench_realtime_refuses_a_run_folder_that_exists(tmp_path):
    (tmp_path / "taken").mkdir()
    result = runner.invoke(
        app, ["bench", "realtime", "--runs-dir", str(tmp_path), "--name", "taken"]
    )
    assert result.exit_code == 2 and "exists already" in result.output
    assert list((tmp_path / "taken").iterdir()) == []
