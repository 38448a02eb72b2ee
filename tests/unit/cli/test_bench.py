"""`fleetrl bench …` in this process: the engine's figures, and refusals before any work."""

import json

import pytest
import torch
from typer.testing import CliRunner

from fleetrl.bench import sandbox as sandbox_bench
from fleetrl.cli import app
from fleetrl.store.weights import WeightStore

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
    assert figures["engine_latency_p99_ms"] >= figures["engine_latency_p50_ms"] > 0
    assert "vllm_s" not in figures  # only with --vllm
    bad = runner.invoke(app, ["bench", "engine", "--min-tokens", "9", "--max-tokens", "3"])
    assert bad.exit_code == 2


def test_bench_weights_refuses_bad_learning_rates():
    bad = runner.invoke(app, ["bench", "weights", "--lrs", "fast"])
    assert bad.exit_code == 2 and "--lrs" in bad.output


def test_bench_alone_shows_its_help():
    result = runner.invoke(app, ["bench"])
    assert "weights" in result.output and "Missing command" not in result.output
    assert result.exit_code == runner.invoke(app, ["model"]).exit_code


# Keeps the benchmark cheap (one step, no synthetic state dict) should a check be missing.
CHEAP = ["--steps", "1", "--synthetic-params", "0", "--lrs", "1e-6"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["weights", "--steps", "1", "--synthetic-params", "0", "--lrs=-1"], "--lrs"),
        (["weights", *CHEAP, "--zstd-level", "99"], "--zstd-level"),
        (["weights", *CHEAP, "--decode-batch", "0"], "--decode-batch"),
        (["weights", *CHEAP, "--from-run", "{tmp}/nope"], "--from-run"),
        (["weights", *CHEAP, "--from-run", "{tmp}/afile"], "--from-run"),
        (["weights", *CHEAP, "--from-run", "{tmp}"], "--from-run"),
        (["sandbox", "--base-dir", "{tmp}/afile"], "--base-dir"),
        (["fleet", "--max-staleness", "-1"], "--max-staleness"),
        (["learning", "--name", "../escape"], "--name"),
        (["record", "--rewrite-share", "1.5"], "--rewrite-share"),
        (["record", "--rewrite-share", "0.1", "--turns", "1"], "--rewrite-share"),
        (["record", "--sessions", "0"], "--sessions"),
        (["record", "--model", "{tmp}/nope"], "--model"),
        (["record", "--harness", "mini-swe-agent", "--model", "{tmp}/nope"], "--model"),
        (["record", "--harness", "swe-agent"], "--harness"),
        (["record", "--set", "harness.max_turns=3"], "--set"),
        (["trainer", "--layouts", "2"], "--layouts"),
        (["trainer", "--layouts", "1x1,0x2"], "--layouts"),
        (["trainer", "--steps", "0"], "--steps"),
        (["trainer", "--prompt-tokens", "2000"], "harness.max_context"),
        (["trainer", "--set", "model.path={tmp}/nope"], "nope"),
    ],
)
def test_bench_refuses_bad_options_up_front_naming_them(tmp_path, options, named):
    (tmp_path / "afile").write_text("")
    arguments = [option.format(tmp=tmp_path) for option in options]
    result = runner.invoke(app, ["bench", *arguments])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output


def test_bench_weights_from_run_accepts_a_run_that_published_two_versions(tmp_path):
    from fleetrl.cli.bench import check_published_run

    store = WeightStore(str(tmp_path / "run" / "store"))
    store.publish(0, {"w": torch.zeros(4)})
    one = runner.invoke(app, ["bench", "weights", *CHEAP, "--from-run", str(tmp_path / "run")])
    assert one.exit_code == 2 and "one published version (v0)" in one.output, one.output
    store.publish(1, {"w": torch.ones(4)})
    check_published_run(str(tmp_path / "run"))  # a run directory
    check_published_run(str(tmp_path / "run" / "store"))  # its store itself


def test_bench_sandbox_reports_unmeasurable_memory_as_such(monkeypatch):
    # One sandbox weighs less than what other processes free or take meanwhile: the drop in
    # the host's available memory can come out negative, which measures nothing.
    measured = {"peak_concurrent": 1, **sandbox_bench.memory_figures(-6.86, 0.8, 1)}
    assert measured["memory_per_sandbox_mb"] is None and "noise" in measured["memory_note"]
    assert measured["cgroup_memory_per_sandbox_mb"] == 0.8
    assert sandbox_bench.memory_figures(12.0, 8.0, 4)["memory_per_sandbox_mb"] == 3.0
    monkeypatch.setattr(sandbox_bench, "run_sandbox_bench", lambda **options: dict(measured))
    result = runner.invoke(app, ["bench", "sandbox", "--max-concurrent", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["memory_per_sandbox_mb"] is None
    table = runner.invoke(app, ["bench", "sandbox", "--max-concurrent", "1"])
    assert "n/a" in table.output and "-6.86" not in table.output
