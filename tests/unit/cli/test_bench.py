"""`fleetrl bench engine` and `bench weights` in this process: figures and refusals."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_bench_engine_smoke_json():
    result = runner.invoke(
        app,
        [
            "bench", "engine", "--json", "--requests", "3", "--min-tokens", "2",
            "--max-tokens", "6", "--rounds", "1", "--threads", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["useful_tokens"] >= 6
    assert figures["speedup_vs_transformers"] > 0
    bad = runner.invoke(app, ["bench", "engine", "--min-tokens", "9", "--max-tokens", "3"])
    assert bad.exit_code == 2


def test_bench_weights_refuses_bad_learning_rates():
    bad = runner.invoke(app, ["bench", "weights", "--lrs", "fast"])
    assert bad.exit_code == 2 and "--lrs" in bad.output
