"""`fleetrl bench trainer` end to end: the same batch trained and published at 1 rank and
at 2 (two real processes over gloo); the 2 ranks hold half the model state each and take
the step 1 rank takes."""

import json

import pytest
from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_bench_trainer_measures_each_layout_on_the_same_batch(tiny_checkpoint):
    args = [
        "bench", "trainer", "--json", "--layouts", "1x1,2x1", "--steps", "1",
        "--prompt-tokens", "8", "--completion-tokens", "8",
        "--set", f"model.path={tiny_checkpoint}", "--set", "trainer.groups_per_step=2",
        "--set", "rollout.group_size=2",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert (figures["episodes"], figures["trained_tokens"]) == (4, 32)
    one, two = figures["layouts"]
    assert (one["layout"], two["layout"]) == ("1x1", "2x1")
    assert two["state_mb_per_rank"] == pytest.approx(one["state_mb_per_rank"] / 2, rel=0.1)
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-3, abs=1e-6)
    for layout in (one, two):
        assert layout["step_s"] > 0 and layout["publish_s"] > 0
        assert layout["peak_rss_mb"] > layout["state_mb_per_rank"] > 0
        assert layout["delta_bytes"] > 0
