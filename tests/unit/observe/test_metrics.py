"""MetricsLogger and read_metrics: round trip, crash tolerance, resume, and the sinks it
hands each record to (the real TensorBoard and W&B sinks: test_export.py)."""

import json

import numpy as np
import pytest

from fleetrl.observe.metrics import MetricsLogger, read_metrics, scalars
from fleetrl.observe.records import EvalRecord, SyncRecord, TrainRecord


def test_records_round_trip(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        logger.log("train", 1, {"reward": 0.5, "tokens": 12, "note": "ok", "hist": [3.0, 1.0]})
        # numpy scalars and arrays are converted, not rejected.
        logger.log("sync", 2, {"sync_bytes": np.int64(1000), "hist": np.array([1, 2])})
    records = read_metrics(path)
    assert [r["kind"] for r in records] == ["train", "sync"]
    first, second = records
    assert first["step"] == 1 and first["reward"] == 0.5 and first["tokens"] == 12
    assert first["note"] == "ok" and first["hist"] == [3.0, 1.0]
    assert second["sync_bytes"] == 1000 and second["hist"] == [1, 2]
    assert 0 <= first["time"] <= second["time"]
    assert first["wall"] > 1.6e9
    # One JSON object per line, each line complete as soon as log() returns.
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_reserved_keys_rejected(tmp_path):
    with (
        MetricsLogger(tmp_path / "metrics.jsonl") as logger,
        pytest.raises(ValueError, match="reserved"),
    ):
        logger.log("train", 0, {"step": 3})


def test_truncated_last_line_tolerated(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        logger.log("train", 0, {"reward": 1.0})
        logger.log("train", 1, {"reward": 0.0})
    with open(path, "a") as f:
        f.write('{"kind": "train", "step": 2, "rew')  # a crash mid-write
    assert [r["step"] for r in read_metrics(path)] == [0, 1]


def test_corrupt_middle_line_raises(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 0}\nnot json\n{"kind": "train", "step": 1}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_metrics(path)


def test_resume_continues_time_and_cuts_partial_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        logger.log("train", 0, {"reward": 1.0})
    # Pretend the first process ran for an hour, then crashed mid-line.
    record = json.loads(path.read_text())
    record["time"] = 3600.0
    path.write_text(json.dumps(record) + "\n" + '{"kind": "train", "st')
    with MetricsLogger(path) as logger:
        logger.log("train", 1, {"reward": 0.5})
    lines = path.read_text().splitlines()
    assert len(lines) == 2  # the partial line was cut, not merged with the new record
    records = read_metrics(path)
    assert records[1]["step"] == 1
    assert 3600.0 <= records[1]["time"] < 3660.0


def test_resume_of_empty_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.touch()
    with MetricsLogger(path) as logger:
        logger.log("eval", 0, {"pass_at_1": 0.25})
    assert read_metrics(path)[0]["time"] < 60


class Recording:
    """A sink that keeps what it is handed (the `Sink` protocol, in memory)."""

    def __init__(self, fail_on: str | None = None):
        self.writes, self.closed, self.fail_on = [], 0, fail_on

    def write(self, kind, step, wall, values):
        if kind == self.fail_on:
            raise OSError("disk full")
        self.writes.append((kind, step, wall, values))

    def close(self):
        self.closed += 1


def test_sinks_get_the_scalars_of_each_line(tmp_path):
    sink = Recording()
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path, sinks=[sink]) as logger:
        values = {"reward": np.float32(0.5), "n": 3, "hist": [1, 2], "note": "x", "ok": True}
        logger.log("train", 3, values | {"loss": float("nan"), "top": float("inf")})
        logger.log_record(7, SyncRecord(sync_bytes=1000, full_bytes=5000, unchanged_frac=0.75))
    train, sync = read_metrics(path)
    # Finite numbers only, as the file has them; strings, lists, bools, NaN stay in the file.
    assert sink.writes == [
        ("train", 3, train["wall"], {"reward": 0.5, "n": 3}),
        ("sync", 7, sync["wall"], {"sync_bytes": 1000, "full_bytes": 5000, "unchanged_frac": 0.75}),
    ]
    assert scalars(train) == {"reward": 0.5, "n": 3}
    assert sink.closed == 1


def test_a_failing_sink_is_dropped_and_the_file_goes_on(tmp_path, capsys):
    broken, healthy = Recording(fail_on="train"), Recording()
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path, sinks=[broken, healthy]) as logger:
        logger.log("train", 1, {"reward": 1.0})
        logger.log("eval", 1, {"pass_at_1": 0.5})
    assert [r["kind"] for r in read_metrics(path)] == ["train", "eval"]
    assert [w[0] for w in healthy.writes] == ["train", "eval"]
    assert broken.writes == [] and broken.closed == 0  # dropped at its failure, not closed
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1 and "Recording failed writing (disk full)" in warning


def logged_lines(path, write):
    """The records `write(logger)` logs to `path`, without the clock fields."""
    with MetricsLogger(path) as logger:
        write(logger)
    return [
        [(k, v) for k, v in record.items() if k not in ("time", "wall")]
        for record in read_metrics(path)
    ]


def test_log_record_writes_what_a_dict_log_writes(tmp_path):
    loop = {
        "version": 8,
        "reward": 0.25,
        "pass_rate": 0.125,
        "staleness_hist": [5, 2, 1],
        "staleness_mean": 0.5,
        "dropped_samples": 3,
        "skipped_groups": 1,
        "wait_s": 0.5,
        "forward_backward_s": 2.0,
        "publish_s": 0.25,
        "samples_per_s": 2.5,
        "tokens_per_s": 900.0,
        "trainer_idle_frac": 0.2,
        "output_scale": 1.5,
        "tool_errors_mean": 0.75,
        "incarnation": 2,
        "group_ids": ["region-0/4", "region-1/2"],
        "skipped_group_ids": ["region-0/3"],
        "dropped_group_ids": [],
        "pending_group_ids": ["region-1/3"],
        "guided_samples": 2,
        "guided_recoveries": 1,
    }
    step = {"mismatch_kl_k3": 1e-3, "clip_frac": 0.01, "loss": -0.1, "step_s": 2.0}
    sync = {"sync_bytes": 1000, "full_bytes": 50_000, "unchanged_frac": 0.7}
    evals = {
        "pass_at_1": 0.5,
        "ci_low": 0.4,
        "ci_high": 0.6,
        "episodes": 64,
        "tasks": 16,
        "duration_s": 30.0,
        "mean_tool_errors": 0.1,
        "model": "final",
    }

    def as_dicts(logger):
        logger.log("train", 8, step | loop)
        logger.log("train", 9, loop)  # a batch without an informative group: no step metrics
        logger.log("sync", 8, sync)  # the regions reported no weight swap: no pause or fetch
        logger.log("eval", 8, evals)

    def as_records(logger):
        logger.log_record(8, TrainRecord(**step, **loop))
        logger.log_record(9, TrainRecord(**loop))
        logger.log_record(8, SyncRecord(**sync))
        logger.log_record(8, EvalRecord(**evals))

    # Same keys in the same order with the same values: None fields are absent, not null.
    records = logged_lines(tmp_path / "records.jsonl", as_records)
    assert records == logged_lines(tmp_path / "dicts.jsonl", as_dicts)
    assert [dict(r)["kind"] for r in records] == ["train", "train", "sync", "eval"]
