"""`fleetrl eval --harness mini-swe-agent` for real on a tiny model: the protocol's document
of episodes run inside the mini-swe-agent package, with the keys of `fleetrl eval`'s own."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fleetrl.cli import app

# Two tasks of each split, short episodes of a random model (reward 0: the keys matter).
TINY = ["--max-tasks", "2", "--samples", "2", "--threads", "1", "--json"]
TINY += ["--set", "harness.max_turns=2", "--set", "harness.max_reply_tokens=8"]
TINY += ["--set", "eval.temperatures=[0.0, 1.0]", "--set", "eval.max_concurrent=4"]


def test_eval_inside_mini_swe_agent_gives_the_document_of_fleetrl_eval(tiny_checkpoint: Path):
    runner = CliRunner()
    args = ["eval", str(tiny_checkpoint), "--harness", "mini-swe-agent", "--best-temperature"]
    inside = runner.invoke(app, [*args, *TINY])
    assert inside.exit_code == 0, inside.output
    document = json.loads(inside.output)
    # the preset's suite (product), 2 held-out tasks x 2 samples at the temperature chosen
    assert document["split"] == "heldout" and document["tasks"] == 2
    assert set(document["val_sweep"]) == {"0.0", "1.0"}
    assert document["pass_at_1"] == 0.0 and document["after_slip"] is False
    own = runner.invoke(app, ["eval", str(tiny_checkpoint), "--harness", "fleetrl", *TINY])
    assert own.exit_code == 0, own.output
    assert set(json.loads(own.output)) == set(document)
