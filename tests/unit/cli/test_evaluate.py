"""`fleetrl eval --harness`: which harness the episodes run in, refused where it cannot be."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.config import RunConfig

runner = CliRunner()


@pytest.fixture
def reported(monkeypatch: pytest.MonkeyPatch) -> list[RunConfig]:
    """`fleetrl eval` up to the protocol's document, which is faked: the configurations
    it was asked to evaluate under."""
    import fleetrl.rollout.evaluate as evaluate

    configs: list[RunConfig] = []

    def report(checkpoint: Any, config: RunConfig, split: str, *args: Any) -> dict[str, Any]:
        configs.append(config)
        return {"split": split, "pass_at_1": 0.5}

    monkeypatch.setattr(evaluate, "protocol_report", report)
    return configs


def test_an_unknown_harness_is_refused_in_one_line():
    result = runner.invoke(app, ["eval", "base", "--harness", "swe-agent", "--json"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--harness 'swe-agent': choose one of fleetrl, mini-swe-agent" in result.output


def test_after_slip_is_refused_inside_mini_swe_agent():
    # The slip is an edit_file call of fleetrl's own harness: mini-swe-agent has no such tool.
    result = runner.invoke(app, ["eval", "base", "--harness", "mini-swe-agent", "--after-slip"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--after-slip" in result.output and "does not apply to mini-swe-agent" in result.output
    by_config = ["eval", "base", "--after-slip", "--set", "rollout.harness=mini-swe-agent"]
    assert runner.invoke(app, by_config).exit_code == 2


def test_mini_swe_agent_reads_its_preset_unless_a_config_is_given(reported, tmp_path):
    result = runner.invoke(app, ["eval", "base", "--harness", "mini-swe-agent", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"split": "heldout", "pass_at_1": 0.5}
    preset = reported[-1]
    assert preset.rollout.harness == "mini-swe-agent" and preset.tasks.suite == "product"
    assert preset.harness.max_reply_tokens == 256  # what base-mswe was made with
    own = tmp_path / "run.toml"
    own.write_text("[harness]\nmax_turns = 3\n")
    args = ["eval", "base", "--harness", "mini-swe-agent", "--config", str(own), "--json"]
    assert runner.invoke(app, args).exit_code == 0
    mine = reported[-1]
    assert mine.rollout.harness == "mini-swe-agent" and mine.harness.max_turns == 3
    assert mine.tasks.suite == "micro" and mine.harness.max_reply_tokens == 128


def test_the_fleetrl_harness_overrides_a_config_that_names_another(reported, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[rollout]\nharness = "mini-swe-agent"\n')
    args = ["eval", "base", "--config", str(config), "--harness", "fleetrl", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert reported[-1].rollout.harness == "fleetrl"
