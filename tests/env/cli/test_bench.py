"""`fleetrl bench sandbox --json`: figures from real sandboxes, and a clean refusal."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_bench_sandbox_smoke_json():
    args = ["bench", "sandbox", "--json", "--n", "4", "--burst", "4", "--max-concurrent", "6"]
    result = runner.invoke(app, [*args, "--pool-size", "2"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert 0 < figures["p50_ms"] <= figures["p99_ms"]
    assert figures["burst4_s"] > 0 and figures["peak_concurrent"] == 6
    bad = runner.invoke(app, ["bench", "sandbox", "--n", "0"])
    assert bad.exit_code == 2
