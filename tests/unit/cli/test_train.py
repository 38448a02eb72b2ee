"""`fleetrl train`: clean refusals of an unknown launcher and of an unusable task filter."""

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_train_refuses_an_unknown_launcher():
    result = runner.invoke(app, ["train", "--launcher", "slurm"])
    assert result.exit_code == 2 and "--launcher must be local or ray" in result.output


def test_train_refuses_a_skip_solved_file_it_cannot_read(tmp_path):
    missing = tmp_path / "eval.json"
    args = ["train", "--runs-dir", str(tmp_path), "--set", f"tasks.skip_solved={missing}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and f"tasks.skip_solved: cannot read {missing}" in result.output
