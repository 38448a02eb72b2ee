"""TensorBoard export: the logger's records, read back from real event files, are the figures
of metrics.jsonl; an export whose package is missing is refused at start-up, naming the
extra. (W&B, which starts a service process: tests/env/observe/test_export.py.)"""

import importlib.util

import pytest
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.config import ConfigError, ObserveSection, check_trainable
from fleetrl.config_files import load_config
from fleetrl.observe.export import open_sinks
from fleetrl.observe.metrics import MetricsLogger, read_metrics, scalars
from fleetrl.observe.records import EvalRecord, SyncRecord, TrainRecord

LOOP = dict(
    reward=0.25, pass_rate=0.125, staleness_hist=[5, 2, 1], staleness_mean=0.5,
    dropped_samples=3, skipped_groups=1, wait_s=0.5, forward_backward_s=2.0, publish_s=0.25,
    samples_per_s=2.5, tokens_per_s=900.0, trainer_idle_frac=0.2, output_scale=1.5,
    tool_errors_mean=0.75, incarnation=1, group_ids=["region-0/4"], skipped_group_ids=[],
    dropped_group_ids=[], pending_group_ids=[],
)  # fmt: skip


def log_a_run(logger: MetricsLogger) -> None:
    """Two trainer steps (the second without an optimizer step), their versions, and the
    end-of-run evaluations: the base model's logged last, at step 0."""
    logger.log_record(1, TrainRecord(**LOOP, version=1, loss=-0.125, grad_norm=float("nan")))
    logger.log_record(1, SyncRecord(sync_bytes=70_123, full_bytes=900_000, unchanged_frac=0.7))
    logger.log_record(2, TrainRecord(**LOOP | {"reward": 0.75}, version=2))
    logger.log_record(2, SyncRecord(sync_bytes=1_234, full_bytes=900_000, unchanged_frac=0.9))
    evals = dict(ci_low=0.1, ci_high=0.6, episodes=8, tasks=4, duration_s=3.5, mean_tool_errors=0)
    logger.log_record(2, EvalRecord(pass_at_1=0.375, model="final", temperature=0.5, **evals))
    logger.log_record(0, EvalRecord(pass_at_1=0.125, model="base", **evals))


def test_tensorboard_scalars_are_the_figures_of_metrics_jsonl(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    sinks = open_sinks(run, ObserveSection(tensorboard=True), "run", {})
    with MetricsLogger(run / "metrics.jsonl", sinks=sinks) as logger:
        log_a_run(logger)
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in read_metrics(run / "metrics.jsonl"):
        for field, value in scalars(record).items():
            expected.setdefault(f"{record['kind']}/{field}", []).append((record["step"], value))
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    got = {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }
    assert sorted(got) == sorted(expected)
    for tag, points in expected.items():  # event files hold float32
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag
    # Each record kind's fields, on its own step axis; NaN, lists and strings left out.
    assert got["train/reward"] == [(1, 0.25), (2, 0.75)]
    assert [s for s, _ in got["eval/pass_at_1"]] == [2, 0]
    assert "train/grad_norm" not in got and "train/staleness_hist" not in got
    assert "eval/model" not in got and "eval/temperature" in got
    assert not (run / "wandb").exists()  # only what is enabled


def test_no_export_by_default(tmp_path):
    assert open_sinks(tmp_path, load_config().observe, "run", {}) == []


@pytest.fixture
def missing(monkeypatch):
    """Make `find_spec` report the given packages as not installed."""
    real = importlib.util.find_spec

    def hide(*names):
        def find_spec(name, *args, **kwargs):
            return None if name in names else real(name, *args, **kwargs)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    return hide


@pytest.mark.parametrize("knob", ["tensorboard", "wandb"])
def test_an_export_without_its_package_is_refused_naming_the_extra(knob, missing):
    config = load_config(overrides={"observe": {knob: True}})
    check_trainable(config)  # installed here (the dev extra)
    missing(knob)
    with pytest.raises(ConfigError, match=rf"observe\.{knob}.*pip install 'fleetrl\[{knob}\]'"):
        check_trainable(config)
    check_trainable(load_config())  # off by default: nothing to install


def test_train_refuses_a_missing_export_in_one_line(tmp_path, missing):
    missing("tensorboard")
    argv = ["train", "--runs-dir", str(tmp_path), "--set", "observe.tensorboard=true"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: observe.tensorboard = true needs the tensorboard package: "
        "pip install 'fleetrl[tensorboard]' (or set observe.tensorboard = false)"
    ]
    assert not any(tmp_path.iterdir())  # refused before the run folder was made
