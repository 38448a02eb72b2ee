"""`fleetrl bench mismatch` end to end: real episodes on a held-out task, scored by the
trainer's model; bad options refused before any work."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_bench_mismatch_scores_the_engines_own_tokens_and_refuses_bad_options():
    args = ["bench", "mismatch", "--tasks", "1", "--engine", "fleetrl", "--dtype", "float32",
            "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (arm,) = json.loads(result.output)["arms"]
    assert (arm["model"], arm["engine"], arm["dtype"], arm["scoring"]) == (
        "base",
        "fleetrl",
        "float32",
        "own",
    )
    assert arm["tokens"] > 0 and arm["kl_k3"] < 1e-6 and arm["mis_masked"] == 0.0
    bad = runner.invoke(app, ["bench", "mismatch", "--dtype", "float16"])
    assert bad.exit_code == 2 and "--dtype 'float16'" in bad.output
