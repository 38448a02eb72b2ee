"""The command line: its surface, its outputs, and clean errors for user mistakes (in this
process; the commands that start processes or sandboxes are in tests/env, the benchmark
that trains in tests/integration)."""

import json

import torch
import transformers
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import bundled_tokenizer

runner = CliRunner()


def command_names(typer_app) -> set[str]:
    import typer.main

    group = typer.main.get_command(typer_app)
    return set(group.commands)


def test_cli_surface_is_frozen():
    # Adding a command is a deliberate act: update this list and the README together.
    assert command_names(app) == {
        "model",
        "serve",
        "bench",
        "report",
        "tasks",
        "verify",
        "eval",
        "train",
        "sft",
        "run",
        "trainer",
        "region",
        "status",
    }
    result = runner.invoke(app, ["model", "--help"])
    assert result.exit_code == 0 and "init" in result.output
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "engine" in result.output


def test_model_init_writes_a_checkpoint_transformers_loads(tmp_path):
    out = tmp_path / "tiny"
    result = runner.invoke(app, ["model", "init", str(out), "--layers", "2", "--hidden", "64"])
    assert result.exit_code == 0, result.output
    ours = load_pretrained(out)
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = "def f(x):\n    return x + 1\n"
    ids = bundled_tokenizer().encode(text)
    assert hf_tokenizer(text)["input_ids"] == ids
    with torch.no_grad():
        diff = (ours(torch.tensor([ids])).logits - ref(torch.tensor([ids])).logits).abs().max()
    assert diff < 1e-4
    assert ours.config.eos_token_id == bundled_tokenizer().eos_id


def test_model_init_moe_and_refusals(tmp_path):
    out = tmp_path / "moe"
    result = runner.invoke(
        app, ["model", "init", str(out), "--moe", "--layers", "1", "--hidden", "64"]
    )
    assert result.exit_code == 0, result.output
    assert load_pretrained(out).config.is_moe
    again = runner.invoke(app, ["model", "init", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output
    assert "Traceback" not in again.output
    bad = runner.invoke(app, ["model", "init", str(tmp_path / "x"), "--hidden", "65"])
    assert bad.exit_code == 2 and "divisible" in bad.output


def test_report_writes_html_and_refuses_missing_dirs(tmp_path):
    from fleetrl.observe import MetricsLogger

    with MetricsLogger(tmp_path / "metrics.jsonl") as log:
        log.log("train", 1, {"reward": 0.5, "pass_rate": 0.5})
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a directory" in missing.output


def test_serve_rejects_a_directory_that_is_not_a_checkpoint(tmp_path):
    result = runner.invoke(app, ["serve", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a checkpoint directory" in result.output
    assert "Traceback" not in result.output


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


def test_run_commands_read_one_config_tree(tmp_path):
    # train, eval, sft and bench pipeline take the same --config file and --set overrides,
    # and name the key of a bad value in a one-line error before doing any work.
    config = tmp_path / "run.toml"
    config.write_text("[trainer]\nlr = -1.0\n")
    for command in (["train"], ["eval"], ["sft", str(tmp_path / "out")], ["bench", "pipeline"]):
        options = [str(config)] if command == ["train"] else ["--config", str(config)]
        from_file = runner.invoke(app, [*command, *options])
        assert from_file.exit_code == 2, (command, from_file.output)
        assert "trainer.lr" in from_file.output and "Traceback" not in from_file.output
        unknown = runner.invoke(app, [*command, "--set", "harness.max_turnz=3"])
        assert unknown.exit_code == 2, (command, unknown.output)
        assert "harness.max_turnz: unknown key" in unknown.output


def test_bench_weights_refuses_bad_learning_rates():
    bad = runner.invoke(app, ["bench", "weights", "--lrs", "fast"])
    assert bad.exit_code == 2 and "--lrs" in bad.output


def test_train_refuses_an_unknown_launcher():
    result = runner.invoke(app, ["train", "--launcher", "slurm"])
    assert result.exit_code == 2 and "--launcher must be local or ray" in result.output
