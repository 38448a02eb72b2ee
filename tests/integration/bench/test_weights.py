"""`fleetrl bench weights` smoke run: tiny model, two steps, tiny synthetic state dict (the
session's one run, `weights_bench_figures`, also serves the CLI's checks)."""

from __future__ import annotations

import pytest

from fleetrl.bench.weights import flat_figures


def test_weights_bench_reports_every_figure(weights_bench_figures):
    result = weights_bench_figures
    assert [run["lr"] for run in result["runs"]] == [1e-6, 1e-5]
    assert len(result["runs"][0]["steps"]) == 2
    for key in ("compression_ratio", "floor_ratio", "encode_gbps_per_core", "decode_gbps_per_core"):
        assert result[key] == result["runs"][0]["median"][key] > 0
    rows = [row for run in result["runs"] for row in run["steps"]] + [result["synthetic"]]
    for row in rows:
        assert 0 < row["unchanged_fraction"] < 1
        # Tiny tensors pay per-stream table headers; the 3.4 M model is at ~1.06.
        assert row["floor_ratio"] < 1.5 < row["plain_floor_ratio"]
        assert row["compression_ratio"] == pytest.approx(row["full_bytes"] / row["delta_bytes"])
    assert result["runs"][0]["median"]["pause_s"] > 0
    assert result["synthetic"]["parameters"] >= 300_000 * 0.5
    table = flat_figures(result)
    assert table["lr 1e-06: floor_ratio"] == result["floor_ratio"]
    assert all(isinstance(v, int | float | str) for v in table.values())
