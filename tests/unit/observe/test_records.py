"""Records: the file format they pin and the report's panels they back (what importing them
loads is checked in a fresh interpreter, tests/env/observe)."""

from dataclasses import fields

import pytest

from fleetrl.observe.panels import series
from fleetrl.observe.records import RECORDS, EvalRecord, SyncRecord, TrainRecord
from fleetrl.observe.report import SECTIONS

# The keys of metrics.jsonl as the trainer and the orchestrator wrote them before these
# types existed, in their order: the format the records must keep.
STEP_KEYS = [
    "mismatch_abs_logprob",
    "mismatch_kl_k3",
    "correction_truncated_frac",
    "correction_masked_frac",
    "clip_frac",
    "ratio_mean",
    "loss_tokens",
    "loss",
    "grad_norm",
    "entropy",
    "advantage_mean",
    "advantage_abs_mean",
    "advantage_std",
    "train_tokens",
    "train_sequences",
    "step_s",
]
LOOP_KEYS = [
    "version",
    "reward",
    "pass_rate",
    "staleness_hist",
    "staleness_mean",
    "dropped_samples",
    "skipped_groups",
    "wait_s",
    "forward_backward_s",
    "publish_s",
    "samples_per_s",
    "tokens_per_s",
    "trainer_idle_frac",
    "output_scale",
    "tool_errors_mean",
    "incarnation",
    "group_ids",
    "skipped_group_ids",
    "dropped_group_ids",
    "pending_group_ids",
    "feedback_age_s",
    "guided_samples",
    "guided_recoveries",
]
SYNC_KEYS = ["sync_bytes", "full_bytes", "unchanged_frac", "sync_pause_ms", "sync_fetch_ms"]
EVAL_KEYS = [
    "pass_at_1",
    "ci_low",
    "ci_high",
    "episodes",
    "tasks",
    "duration_s",
    "mean_tool_errors",
    "model",
    "temperature",
]


def names(record):
    return [f.name for f in fields(record)]


def test_records_keep_the_file_format():
    assert names(TrainRecord) == STEP_KEYS + LOOP_KEYS
    assert names(SyncRecord) == SYNC_KEYS
    assert names(EvalRecord) == EVAL_KEYS
    assert {"train": TrainRecord, "sync": SyncRecord, "eval": EvalRecord} == RECORDS


def test_absent_today_means_optional():
    """Step metrics (no informative group) and region sync times (none reported) may be
    missing; everything else the loop always computes."""
    optional = {f.name for f in fields(TrainRecord) if f.default is None}
    assert optional == {*STEP_KEYS, "feedback_age_s"}  # only groups of served sessions say
    optional = {f.name for f in fields(SyncRecord) if f.default is None}
    assert optional == {"sync_pause_ms", "sync_fetch_ms"}


def test_no_panel_plots_a_key_that_nothing_logs():
    plotted = [name for s in SECTIONS for panel in s.panels for name in panel.series]
    assert plotted
    for name in plotted:
        kind, key = name.split(".", 1)
        assert kind in RECORDS, f"{name}: no record of kind {kind!r} is logged"
        assert key in names(RECORDS[kind]), f"{name}: not a field of {RECORDS[kind].__name__}"


def test_series_rejects_unknown_fields():
    assert series(TrainRecord, "reward") == "train.reward"
    assert series(SyncRecord, "sync_pause_ms") == "sync.sync_pause_ms"
    with pytest.raises(ValueError, match="sandbox_p50_ms"):
        series(SyncRecord, "sandbox_p50_ms")
