"""`fleetrl bench weights --json`: the command trains a tiny model and reports its figures
(the session's one run, `weights_bench_figures`, also serves
tests/integration/orchestrate/test_weights_bench.py)."""


def test_bench_weights_smoke_json(weights_bench_figures):
    figures = weights_bench_figures
    for key in ("compression_ratio", "floor_ratio", "encode_gbps_per_core", "decode_gbps_per_core"):
        assert figures[key] > 0, key
