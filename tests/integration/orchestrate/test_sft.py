"""`fleetrl sft` end to end on a tiny model: demos through the rollout worker, training, a
checkpoint; flags override the config file, the file overrides the defaults; Ctrl-C keeps
the weights trained so far."""

import json
import os
import signal
import subprocess
import sys

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
    assert (
        "4 demonstrations (one per context window) from 4 episodes "
        "(3 graded by the verifier, 0 dropped)" in result.output
    )
    assert load_pretrained(tmp_path / "out").config.hidden_size == 32
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    assert (state["config"]["steps"], state["config"]["bf16"]) == (2, False)  # the flags won
    assert (state["config"]["batch_size"], state["config"]["copies"]) == (2, 1)  # the file
    assert state["result"]["steps"] == 2 and state["about"]["tasks"] == 1
    # where the demonstrations came from, for SFT-more (`fleetrl bench learning`)
    expected = {"suite": "micro", "split": "train", "tasks_dir": None, "skip_solved": None}
    assert state["about"]["tasks_source"] == expected
    # the validation loss on the first validation task, before the first step and at the end
    assert state["about"]["val_tasks"] == 1
    assert [step for step, _ in state["result"]["val_losses"]] == [0, 2]


def test_ctrl_c_stops_after_the_step_and_keeps_the_weights(tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "fleetrl.cli", "sft", str(out), *TINY, "--steps", "100000"]
    argv += ["--log-every", "1", "--val-every", "0", "--batch-size", "2", "--copies", "0"]
    argv += ["--demos-cache", str(tmp_path / "cache")]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    sft = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in sft.stdout:  # the first loss line: training has started
        if line.startswith("step 1/"):
            break
    sft.send_signal(signal.SIGINT)
    _, err = sft.communicate(timeout=120)
    assert sft.returncode == 130, err
    assert "holds the weights so far" in err
    state = json.loads((out / STATE_FILE).read_text())
    assert state["result"]["stopped"] == "interrupted"
    assert 1 <= state["result"]["steps"] < 100000
    assert load_pretrained(out).config.hidden_size == 32


def test_sft_continues_a_shipped_model_named_like_everywhere_else(tmp_path):
    args = ["sft", str(tmp_path / "out"), "--init", "base", "--steps", "1", "--batch-size", "2"]
    args += ["--max-tasks", "1", "--threads", "1", "--val-every", "0"]
    result = runner.invoke(app, [*args, "--demos-cache", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert load_pretrained(tmp_path / "out").config.hidden_size == 256  # the shipped base's
