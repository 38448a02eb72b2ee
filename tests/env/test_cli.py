"""The command line where it starts processes: the installed entry point, and the commands
that run sandboxes (bench sandbox, eval)."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_installed_entry_point_prints_help():
    out = subprocess.run(
        [sys.executable, "-m", "fleetrl.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for name in ("model", "serve", "bench"):
        assert name in out.stdout


def test_bench_sandbox_smoke_json():
    args = ["bench", "sandbox", "--json", "--n", "4", "--burst", "4", "--max-concurrent", "6"]
    result = runner.invoke(app, [*args, "--pool-size", "2"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert 0 < figures["p50_ms"] <= figures["p99_ms"]
    assert figures["burst4_s"] > 0 and figures["peak_concurrent"] == 6
    bad = runner.invoke(app, ["bench", "sandbox", "--n", "0"])
    assert bad.exit_code == 2


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
