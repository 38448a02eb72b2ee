"""`fleetrl sft` end to end on a tiny model: demos through the rollout worker, training, a
checkpoint; flags override the config file, the file overrides the defaults."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.trainer.sft import STATE_FILE

runner = CliRunner()
TINY = ["--hidden", "32", "--layers", "1", "--max-tasks", "1", "--threads", "1"]


def test_sft_trains_a_tiny_model_and_flags_override_the_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("[sft]\nsteps = 50\nbatch_size = 2\ncopies = 1\nbf16 = true\n")
    args = ["sft", str(tmp_path / "out"), "--config", str(config), "--steps", "2", "--fp32"]
    args += [*TINY, "--demos-cache", str(tmp_path / "cache")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4 demonstrations kept of 4 (3 graded by the verifier, 0 dropped)" in result.output
    assert load_pretrained(tmp_path / "out").config.hidden_size == 32
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    assert (state["config"]["steps"], state["config"]["bf16"]) == (2, False)  # the flags won
    assert (state["config"]["batch_size"], state["config"]["copies"]) == (2, 1)  # the file
    assert state["result"]["steps"] == 2 and state["about"]["tasks"] == 1
    # the validation loss on the first validation task, before the first step and at the end
    assert state["about"]["val_tasks"] == 1
    assert [step for step, _ in state["result"]["val_losses"]] == [0, 2]
