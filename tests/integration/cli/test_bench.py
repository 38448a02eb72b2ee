"""`fleetrl bench weights --json` on a tiny model: the figures of the session's one run."""


def test_bench_weights_smoke_json(weights_bench_figures):
    figures = weights_bench_figures
    for key in ("compression_ratio", "floor_ratio", "encode_gbps_per_core", "decode_gbps_per_core"):
        assert figures[key] > 0, key
