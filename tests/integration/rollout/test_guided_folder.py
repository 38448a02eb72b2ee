"""`fleetrl train` with guided groups on a folder that `fleetrl tasks make` wrote from a small
repository: a tiny random model fails every sample, so every group is failed whole and the
gold-patch guide's verified episode gives it the signal to train on (the guide's episodes
themselves: tests/env/rollout/test_guide_folder.py)."""

import json
import subprocess
import sys
from pathlib import Path

from fleetrl.envs.tasks.git import git
from fleetrl.store.trajectories import TrajectoryChannel


def fleetrl(*args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fleetrl.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def make_folder(tmp_path: Path) -> Path:
    """One `train` task of a two-function repository (git-tracked, as a user's would be)."""
    repo = tmp_path / "lib"
    repo.mkdir()
    (repo / "lib.py").write_text(
        "def double(x):\n    return x * 2\n\n\ndef half(x):\n    return x / 2\n"
    )
    tests = "from lib import double, half\n\n\ndef test_double():\n    assert double(3) == 6\n"
    (repo / "test_lib.py").write_text(tests + "\n\ndef test_half():\n    assert half(4) == 2\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lib")
    out = tmp_path / "tasks"
    args = ["tasks", "make", str(repo), "--out", str(out), "--kinds", "operator_swap"]
    args += ["--max-tasks", "1", "--val", "0", "--heldout", "0", "--json", "--no-progress"]
    report = json.loads(fleetrl(*args, "--pytest-arg=-p", "--pytest-arg=no:hypothesispytest"))
    assert report["splits"]["train"] == 1
    return out


def test_a_generated_folder_trains_with_guided_groups(tmp_path, tiny_checkpoint):
    folder = make_folder(tmp_path)
    overrides = [
        f"model.path={tiny_checkpoint}", f"tasks.tasks_dir={folder}",
        "rollout.guide_failed_groups=true", "rollout.group_size=2",
        "rollout.max_concurrent_groups=1", "trainer.steps=1", "trainer.groups_per_step=1",
        "trainer.dynamic_sampling=false", "eval.enabled=false",
        "store.collect_garbage=false",  # the channel is read below: keep what was trained
    ]  # fmt: skip
    args = ["train", "--name", "g", "--runs-dir", str(tmp_path / "runs")]
    fleetrl(*args, *(item for o in overrides for item in ("--set", o)))
    run = tmp_path / "runs" / "g"
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    (train,) = [r for r in records if r["kind"] == "train"]
    # the policy's own sample failed (its reward leaves the guide's out); both trained on
    assert train["guided_samples"] == 1 and train["reward"] == 0.0
    assert train["train_sequences"] == 2
    # the trained group: the model's failed sample and the guide's verified one
    group = TrajectoryChannel(str(run / "store")).read_new({})[0].trajectories
    assert sorted(t.reward for t in group) == [0.0, 1.0]
    (guided,) = [t for t in group if t.segments[0].guided]
    assert guided.reward == 1.0 and guided.finish_reason == "finish"
