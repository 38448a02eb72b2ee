"""Fixtures shared by the integration tests: runs expensive enough to do once per session."""

from __future__ import annotations

import functools
import json

import pytest

from tests.env.store.conftest import s3_server  # noqa: F401  (SeaweedFS, once per session)

# The flags and the tiny model of the one weight-sync benchmark run that the benchmark's
# checks and the CLI's checks share.
WEIGHTS_BENCH_ARGS = ["--steps", "2", "--lrs", "1e-6,1e-5", "--synthetic-params", "300000"]
WEIGHTS_BENCH_ARGS += ["--threads", "1", "--decode-batch", "2"]
WEIGHTS_BENCH_TINY = {
    "batch_size": 2,
    "seq_len": 16,
    "vocab_size": 128,
    "hidden_size": 64,
    "num_hidden_layers": 1,
}


@pytest.fixture(scope="session")
def weights_bench_figures() -> dict:
    """`fleetrl bench weights --json` on a tiny model: two steps at each of two learning
    rates and a 300 k-parameter synthetic state dict, parsed from the command's output.

    The command has no model-size flags (its default model is 3.4 M parameters), so the
    tiny model comes in through the defaults of the config the command builds."""
    from typer.testing import CliRunner

    from fleetrl.bench import weights as weights_bench
    from fleetrl.cli import app

    tiny = functools.partial(weights_bench.WeightsBenchConfig, **WEIGHTS_BENCH_TINY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(weights_bench, "WeightsBenchConfig", tiny)
        result = CliRunner().invoke(app, ["bench", "weights", "--json", *WEIGHTS_BENCH_ARGS])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["config"] | WEIGHTS_BENCH_TINY == figures["config"]  # the tiny model ran
    return figures
