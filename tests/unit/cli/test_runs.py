"""`fleetrl report` and `fleetrl run create`: what they write, and clean refusals."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_report_writes_html_and_refuses_missing_dirs(tmp_path):
    from fleetrl.observe import MetricsLogger

    with MetricsLogger(tmp_path / "metrics.jsonl") as log:
        log.log("train", 1, {"reward": 0.5, "pass_rate": 0.5})
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a directory" in missing.output
    (tmp_path / "other").mkdir()
    other = runner.invoke(app, ["report", str(tmp_path / "other")])
    assert other.exit_code == 2 and "not a run directory" in other.output
    assert not (tmp_path / "other" / "report.html").exists()


def test_status_of_a_missing_store_creates_nothing(tmp_path):
    store = tmp_path / "no-store"
    result = runner.invoke(app, ["status", "--store", str(store)])
    assert result.exit_code == 2 and "holds no run" in result.output
    assert not store.exists()


def test_run_create_refuses_a_skip_solved_file_it_cannot_read(tmp_path):
    missing = tmp_path / "eval.json"
    store = tmp_path / "store"
    args = ["run", "create", "--store", str(store), "--set", f"tasks.skip_solved={missing}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and f"tasks.skip_solved: cannot read {missing}" in result.output
    assert not (store / "run" / "config.toml").exists()


def test_run_create_refuses_a_skip_solved_file_of_another_model(tmp_path):
    other = tmp_path / "eval.json"
    passes = {"micro-train-0000": 4}
    doc = {"split": "train", "samples_per_task": 4, "task_passes": passes, "weights": "0" * 64}
    other.write_text(json.dumps(doc))
    store = tmp_path / "store"
    args = ["run", "create", "--store", str(store), "--set", f"tasks.skip_solved={other}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "evaluated other weights" in result.output
    assert not (store / "run" / "config.toml").exists()
