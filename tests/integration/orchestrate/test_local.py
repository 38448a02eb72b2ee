"""`fleetrl train` end to end: trainer and region processes sharing a store, then eval and
the report. A tiny random model: this checks the machinery, not learning."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.store.weights import WeightStore


def test_train_runs_the_whole_loop(tmp_path, tiny_checkpoint):
    overrides = [
        f"model.path={tiny_checkpoint}", "trainer.steps=2", "trainer.groups_per_step=2",
        "rollout.group_size=2", "rollout.max_concurrent_groups=2", "eval.episodes=2",
        "eval.max_tasks=2", "eval.base=false", "trainer.dynamic_sampling=false",
    ]  # fmt: skip
    argv = [
        sys.executable,
        "-m",
        "fleetrl.cli",
        "train",
        "--name",
        "t",
        "--runs-dir",
        str(tmp_path),
    ]
    for item in overrides:
        argv += ["--set", item]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "t"
    assert "final: pass@1" in done.stdout
    for name in ("config.toml", "metrics.jsonl", "report.html", "eval.json", "final/config.json"):
        assert (run / name).exists(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(max(0, len(r["staleness_hist"]) - 1) <= 2 for r in train)
    assert json.loads((run / "eval.json").read_text())["final"]["episodes"] == 2
    # The end-of-run evaluation records the temperature it chose on val for the final model.
    chosen = json.loads((run / "eval.json").read_text())["final"]["temperature"]
    assert [r["temperature"] for r in records if r["kind"] == "eval"] == [chosen]
    assert WeightStore(str(run / "store")).latest() == 2
    assert TrajectoryChannel(str(run / "store")).count() >= 4
    # A finished run is not overwritten.
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "finished run" in again.stderr


def test_the_demo_configuration_trains_on_the_product_suite(tmp_path, tiny_checkpoint):
    """`make demo`'s file, shrunk to one step of a tiny random model: its groups fail whole
    on the product's tasks, the expert's guided episodes give them the signal to train on,
    and the product's repositories are written in the cache on first use. The file's
    `tasks.skip_solved` is base-slip's evaluation, so another model turns it off."""
    overrides = [
        f"model.path={tiny_checkpoint}", "tasks.skip_solved=",
        "trainer.steps=1", "trainer.groups_per_step=2",
        "rollout.group_size=2", "rollout.max_concurrent_groups=2", "eval.episodes=2",
        "eval.max_tasks=2", "eval.base=false", "eval.best_temperature=false",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "fleetrl.cli", "train", "demo"]  # the preset, by name
    argv += ["--name", "d", "--runs-dir", str(tmp_path)]
    for item in overrides:
        argv += ["--set", item]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (tmp_path / "d" / "metrics.jsonl").open()]
    (train,) = [r for r in records if r["kind"] == "train"]
    assert train["guided_samples"] >= 1 and train["train_sequences"] == 4
    repos = Path(os.environ["FLEETRL_CACHE"]) / "suites" / "product"
    assert any(repo.name.startswith("product-train-") for repo in repos.glob("*/*"))


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_terminated_train_leaves_no_process_behind(tmp_path, tiny_checkpoint):
    argv = [sys.executable, "-m", "fleetrl.cli", "train", "--name", "t"]
    argv += ["--runs-dir", str(tmp_path), "--set", f"model.path={tiny_checkpoint}"]
    argv += ["--set", "trainer.steps=50"]
    launcher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(children := _children(launcher.pid)) < 2:  # the trainer and one region
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.2)
    time.sleep(2.0)  # both are loading their model
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 128 + signal.SIGTERM, err
    # The launcher reaped them (no zombie either): nothing writes into the store any more.
    assert [pid for pid in children if Path(f"/proc/{pid}").exists()] == []


def test_a_role_that_refuses_its_input_is_not_restarted(tmp_path):
    # A stored config the trainer refuses (greedy rollouts) exits 2: the launcher reports it
    # at once with the role's one line, instead of restarting it CRASH_LIMIT times.
    from fleetrl.orchestrate.local import RunFailed, _Process, _watch
    from fleetrl.store.objectstore import open_store
    from fleetrl.store.run import CONFIG_KEY

    store = tmp_path / "store"
    open_store(str(store)).put(CONFIG_KEY, b"[rollout]\ntemperature = 0\n")
    trainer = _Process("trainer", "trainer", tmp_path / "trainer.log")
    trainer.start(str(store), tmp_path / "run")
    with pytest.raises(RunFailed, match="trainer refused its input") as failed:
        _watch([trainer], str(store), tmp_path / "run", steps=1, progress=False)
    assert "rollout.temperature: 0 (greedy)" in str(failed.value)
    assert len(trainer.restarts.crashes) == 0  # never counted as a crash, never restarted
