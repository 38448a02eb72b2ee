"""`fleetrl eval --json` on a random model in sandboxes, and a missing checkpoint."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_eval_json_on_a_random_model(tmp_path):
    model_dir = tmp_path / "m"
    assert (
        runner.invoke(
            app, ["model", "init", str(model_dir), "--layers", "1", "--hidden", "64"]
        ).exit_code
        == 0
    )
    args = [
        "eval",
        str(model_dir),
        "--set",
        "eval.max_tasks=2",
        "--episodes",
        "4",
        "--threads",
        "1",
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["episodes"] == 4 and figures["tasks"] == 2
    assert figures["pass_at_1"] == 0.0 and 0.0 == figures["ci_low"] < figures["ci_high"] < 1.0
    missing = runner.invoke(app, ["eval", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "not a checkpoint" in missing.output
