"""`fleetrl train`: clean refusals of an unknown launcher and of an unusable task filter."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_train_refuses_an_unknown_launcher():
    result = runner.invoke(app, ["train", "--launcher", "slurm"])
    assert result.exit_code == 2 and "--launcher must be local or ray" in result.output


def test_train_refuses_greedy_rollouts_and_a_runs_dir_that_is_a_file(tmp_path):
    greedy = runner.invoke(
        app, ["train", "--runs-dir", str(tmp_path), "--set", "rollout.temperature=0"]
    )
    assert greedy.exit_code == 2 and "rollout.temperature: 0 (greedy)" in greedy.output
    assert not any(tmp_path.iterdir())
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["train", "--runs-dir", str(afile)])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output


def test_train_refuses_a_run_name_outside_the_runs_dir(tmp_path):
    result = runner.invoke(app, ["train", "--runs-dir", str(tmp_path), "--name", "../escape"])
    assert result.exit_code == 2 and "name: String should match pattern" in result.output


def test_train_refuses_a_skip_solved_file_it_cannot_read(tmp_path):
    missing = tmp_path / "eval.json"
    args = ["train", "--runs-dir", str(tmp_path), "--set", f"tasks.skip_solved={missing}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and f"tasks.skip_solved: cannot read {missing}" in result.output


def test_train_refuses_a_skip_solved_file_of_another_model(tmp_path):
    # The demo's file names base-slip's solved tasks; RL from `base` must not leave them out.
    other = tmp_path / "eval.json"
    passes = {"micro-train-0000": 4}
    doc = {"split": "train", "samples_per_task": 4, "task_passes": passes, "weights": "0" * 64}
    other.write_text(json.dumps(doc))
    args = ["train", "--runs-dir", str(tmp_path), "--set", f"tasks.skip_solved={other}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "evaluated other weights" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()
