"""W&B export for real, offline (no network): the logger's records become the history of an
offline W&B run in the run folder, read back here from its `.wandb` file; a second process
of the run logs into the same W&B run; WANDB_MODE, when set, decides the mode."""

import json
import struct
import time
from pathlib import Path

import pytest

from fleetrl.config import ObserveSection
from fleetrl.observe.export import RUN_ID_FILE, open_sinks
from fleetrl.observe.metrics import MetricsLogger, read_metrics, scalars
from fleetrl.observe.records import EvalRecord, SyncRecord

EVAL = dict(ci_low=0.1, ci_high=0.6, episodes=8, tasks=4, duration_s=3.5, mean_tool_errors=0)


@pytest.fixture(autouse=True)
def wandb_home(tmp_path, monkeypatch):
    """W&B's own folders inside the test's, and no mode or key of the user's."""
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def wandb_records(path: Path) -> list:
    """The protobuf records of a `.wandb` file: a LevelDB-style log (7-byte file header,
    32 KiB blocks of chunks, each with a crc32/length/type header; FULL=1, LAST=4)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def finished_records(path: Path, timeout_s: float = 20.0) -> list:
    """The records of a `.wandb` file once its run's exit record is in it: W&B's service
    process writes the file on its own time, and `finish()` may return before it has."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{path}: no exit record after {timeout_s} s"
        time.sleep(0.05)


def history(records: list) -> list[dict]:
    """The rows logged, with W&B's own keys (`_step`, `_runtime`, …) left out."""
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            row = {
                item.key or "/".join(item.nested_key): item.value_json
                for item in record.history.item
            }
            rows.append({k: json.loads(v) for k, v in row.items() if not k.startswith("_")})
    return rows


def offline_runs(run: Path) -> list[Path]:
    return sorted((run / "wandb").glob("offline-run-*"))


def test_records_become_the_history_of_an_offline_run(tmp_path):
    run = tmp_path / "run"
    config = {"name": "run", "trainer": {"lr": 1e-5}}
    settings = ObserveSection(wandb=True, wandb_project="fleetrl-tests")
    with MetricsLogger(
        run / "metrics.jsonl", sinks=open_sinks(run, settings, "run", config)
    ) as log:
        log.log_record(3, SyncRecord(sync_bytes=70_123, full_bytes=900_000, unchanged_frac=0.7))
        log.log("train", 3, {"reward": 0.25, "loss": float("nan"), "staleness_hist": [1, 2]})
        log.log_record(3, EvalRecord(pass_at_1=0.375, model="final", temperature=0.5, **EVAL))
        log.log_record(0, EvalRecord(pass_at_1=0.125, model="base", **EVAL))  # after, at 0
    (folder,) = offline_runs(run)
    run_id = (run / "wandb" / RUN_ID_FILE).read_text().strip()
    (file,) = folder.glob("*.wandb")
    assert file.name == f"run-{run_id}.wandb"
    records = finished_records(file)
    (meta,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (meta.run_id, meta.project, meta.display_name) == (run_id, "fleetrl-tests", "run")
    stored = {item.key: json.loads(item.value_json) for item in meta.config.update}
    assert stored["trainer"] == {"lr": 1e-5}
    # One row per record: its kind's step axis and its scalars, as metrics.jsonl has them.
    expected = [
        {f"{r['kind']}/step": r["step"]} | {f"{r['kind']}/{k}": v for k, v in scalars(r).items()}
        for r in read_metrics(run / "metrics.jsonl")
    ]
    assert history(records) == expected
    assert expected[1] == {"train/step": 3, "train/reward": 0.25}
    # Each kind is plotted against its own step, so the base model's eval at 0 is in place.
    axes = {
        r.metric.glob_name: r.metric.step_metric
        for r in records
        if r.WhichOneof("record_type") == "metric" and r.metric.glob_name
    }
    assert axes == {"sync/*": "sync/step", "train/*": "train/step", "eval/*": "eval/step"}


def test_a_second_process_logs_into_the_same_wandb_run(tmp_path):
    # The trainer restarted, or the launcher's evaluation after it: one W&B run per folder.
    run = tmp_path / "run"
    for step in (1, 2):
        sinks = open_sinks(run, ObserveSection(wandb=True), "run", {})
        with MetricsLogger(run / "metrics.jsonl", sinks=sinks) as log:
            log.log("train", step, {"reward": 0.5})
    files = [next(folder.glob("*.wandb")) for folder in offline_runs(run)]
    run_id = (run / "wandb" / RUN_ID_FILE).read_text().strip()
    assert [f.name for f in files] == [f"run-{run_id}.wandb"] * 2  # one W&B run
    assert [history(finished_records(f)) for f in files] == [
        [{"train/step": 1, "train/reward": 0.5}],
        [{"train/step": 2, "train/reward": 0.5}],
    ]


def test_wandb_mode_of_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run = tmp_path / "run"
    with MetricsLogger(
        run / "metrics.jsonl", sinks=open_sinks(run, ObserveSection(wandb=True), "run", {})
    ) as log:
        log.log("train", 1, {"reward": 0.5})
    assert offline_runs(run) == []
    assert read_metrics(run / "metrics.jsonl")[0]["reward"] == 0.5


def test_wandb_that_cannot_start_is_left_out_with_one_warning(tmp_path, monkeypatch, caplog):
    # Online with no API key: W&B refuses to start. The run keeps its metrics.jsonl.
    monkeypatch.setenv("WANDB_MODE", "online")
    run = tmp_path / "run"
    sinks = open_sinks(run, ObserveSection(wandb=True), "run", {})
    assert sinks == []
    assert [r.message for r in caplog.records if "observe.wandb" in r.message] == [
        "observe.wandb: left out, it could not start (No API key configured. Use `wandb login` "
        "to log in.); metrics.jsonl has every figure"
    ]
    with MetricsLogger(run / "metrics.jsonl", sinks=sinks) as log:
        log.log("train", 1, {"reward": 0.5})
    assert read_metrics(run / "metrics.jsonl")[0]["reward"] == 0.5
