"""`fleetrl train`: a clean refusal of an unknown launcher."""

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_train_refuses_an_unknown_launcher():
    result = runner.invoke(app, ["train", "--launcher", "slurm"])
    assert result.exit_code == 2 and "--launcher must be local or ray" in result.output
