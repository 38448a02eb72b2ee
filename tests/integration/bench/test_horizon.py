"""`fleetrl bench horizon` end to end: the CLI on two held-out long tasks with a tiny
random checkpoint as both models (four arms, the documented keys, no summary without
summarisation); the arms driven by the long suite's scripted expert, whose summaries keep
every fact (what each arm's figures read when a policy does summarise); bad input refused
in one line before any episode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from fleetrl.bench.horizon import ARMS, document, run_arms
from fleetrl.cli import app
from fleetrl.config_files import load_config
from fleetrl.envs.long.expert import LongExpert
from fleetrl.model.checkpoint import resolve_checkpoint
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.evaluate import split_tasks
from fleetrl.rollout.session import Session
from fleetrl.rollout.worker import Rollouts

runner = CliRunner()
ARM_KEYS = {"pass_at_1", "ci_low", "ci_high", "compaction_error", "tokens_per_solved",
            "summary_tokens", "episodes", "tasks", "temperature", "finish_reasons",
            "summaries"}  # fmt: skip


def test_bench_horizon_runs_four_arms_on_held_out_long_tasks(tiny_checkpoint, tmp_path):
    out = tmp_path / "horizon.json"
    model = str(tiny_checkpoint)
    args = ["bench", "horizon", "--trained", model, "--base", model, "--max-tasks", "2",
            "--temperature", "1", "--json", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert json.loads(out.read_text()) == doc
    assert list(doc) == ["split", "models", *ARMS, "gains"]
    assert (doc["split"], doc["models"]) == ("heldout", {"base": model, "trained": model})
    for name, arm in ((name, doc[name]) for name in ARMS):
        assert set(arm) >= ARM_KEYS, name
        assert (arm["episodes"], arm["tasks"], arm["temperature"]) == (2, 2, 1.0)
        assert set(arm["task_passes"]) == {"long-heldout-0000", "long-heldout-0001"}
        assert sum(arm["finish_reasons"].values()) == 2
    for name in ("none", "truncate"):  # no summarisation: never a summary
        arm = doc[name]
        assert arm["summaries"] == 0 and arm["compaction_error"] is None
        assert arm["summary_tokens"] is None
    for name in ("prompted", "trained"):  # may summarise; then its figures are there
        arm = doc[name]
        assert (arm["compaction_error"] is None) == (arm["summaries"] == 0)
    assert set(doc["gains"]) == {"trained_vs_truncate", "trained_vs_prompted"}
    for gain in doc["gains"].values():
        assert set(gain) == {"points", "ci_low", "ci_high"}
        assert gain["ci_low"] <= gain["points"] <= gain["ci_high"]


def test_the_arms_read_an_experts_summaries():
    """The scripted long expert reads the big file, summarises when asked (its notes keep
    the task's facts), then fixes the bug from its notes: it passes where the harness
    summarises and fails where it does not (it stops when no summary is asked for after
    the big file)."""
    config = load_config(Path("long"), {"eval": {"max_tasks": 2, "max_concurrent": 4}})
    tasks = split_tasks(config, "heldout")
    tokenizer = bundled_tokenizer()

    async def main() -> dict:
        expert = LongExpert(tasks, tokenizer)
        rollouts = Rollouts(expert, tokenizer, config.harness, config.rollout, 4, 2)
        try:
            return await run_arms(Session(rollouts, None), config, ARMS, tasks, 1, 1.0, "")
        finally:
            await rollouts.close()

    arms = asyncio.run(main())
    for name in ("prompted", "trained"):
        arm = arms[name]
        assert arm["pass_at_1"] == 1.0, arm["finish_reasons"]
        assert arm["summaries"] == arm["summarised_episodes"] == 2
        assert arm["compaction_error"] == 0.0
        assert arm["summary_tokens"] > 0 and arm["tokens_per_solved"] > 1024
    none = arms["none"]
    assert none["pass_at_1"] == 0.0 and none["summaries"] == 0
    assert none["finish_reasons"] == {"finish": 2}  # the expert stops when not asked for notes
    assert none["compaction_error"] is None and none["tokens_per_solved"] is None
    assert arms["truncate"]["summaries"] == 0 and arms["truncate"]["pass_at_1"] == 0.0
    gains = document("heldout", Path("b"), Path("t"), arms)["gains"]
    assert gains["trained_vs_truncate"]["points"] == 100.0
    assert gains["trained_vs_prompted"]["points"] == 0.0


def test_bench_horizon_refuses_bad_input_in_one_line(tiny_checkpoint, tmp_path):
    model = str(tiny_checkpoint)
    shipped_long = (resolve_checkpoint("base-long") / "config.json").is_file()
    cases = {
        "no such checkpoint": ["--trained", str(tmp_path / "missing"), "--base", model],
        "not a checkpoint directory": ["--trained", str(tmp_path), "--base", model],
        "model.path base-long": [] if shipped_long else ["--trained", model],
        "tasks.suite=long": ["--trained", model, "--base", model, "--set", "tasks.suite=micro"],
        "split": ["--trained", model, "--base", model, "--split", "nosuch", "--temperature", "1"],
    }
    for message, args in cases.items():
        if not args:
            continue
        result = runner.invoke(app, ["bench", "horizon", *args, "--json"])
        assert result.exit_code == 2, (message, result.output)
        assert message in result.output and "Traceback" not in result.output, result.output
