"""`fleetrl bench fleet`: a trainer and three regions (one slow, throttled links to their own
weight stores), with none killed and with one killed mid-run, as real processes."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fleetrl.cli import app


# About a minute of four processes per leg on two cores; the region's own flags are checked
# without it below, and the region metrics in tests/unit/store/test_region_metrics.py.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_fleet_measures_both_legs(tiny_checkpoint):
    steps = 4
    argv = [sys.executable, "-m", "fleetrl.cli", "bench", "fleet", "--json", "--model"]
    argv += [str(tiny_checkpoint), "--steps", str(steps), "--groups-per-step", "2"]
    argv += ["--group-size", "2", "--link-mbps", "8", "--slow-latency", "0.5"]
    argv += ["--set", "trainer.dynamic_sampling=false"]  # the tiny model never succeeds
    done = subprocess.run(argv, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout)
    for leg in ("none", "killed"):
        got = figures[leg]
        # The histogram covers every group a step read (dynamic sampling skips those
        # without signal); the progress object counts only those of the batches.
        assert sum(got["staleness_hist"]) == got["samples"] >= got["trained_samples"]
        assert got["samples"] >= steps * 2
        assert len(got["staleness_hist"]) <= 2 + 1  # max_staleness 2 holds
        assert got["versions"] == steps and 0 <= got["trainer_idle_frac"] <= 1
        assert got["samples_per_s"] > 0
        regions = got["regions"]
        assert sorted(regions) == ["region-0", "region-1", "region-2"]
        for name, region in regions.items():
            # Each relay copied version 0 (or later) in full, then only what changed.
            assert region["first_copy_bytes"] > region["cross_region_bytes_per_version"] > 0
            assert region["hold_s_p50"] is not None and region["hold_s_p50"] >= 0
            assert region["killed"] == (leg == "killed" and name == "region-1")
        live = [r for n, r in regions.items() if not r["killed"]]
        # Every live region follows the trainer within the staleness bound: the trainer stops
        # right after its last publish, so a region busy in an episode may stop that far back.
        assert all(r["last_version_served"] >= steps - 2 for r in live), regions
        assert got["versions_all_reached"] >= steps - 2, got
        assert got["all_hold_s_p95"] >= got["all_hold_s_p50"] >= 0
        assert got["cross_region_bytes_per_version_total"] > 0
    killed = figures["killed"]["regions"]["region-1"]
    assert killed["last_version_served"] < steps  # it died before the end
    assert figures["killed_vs_none"] > 0
    assert figures["config"]["killed_region"] == "region-1"


def test_region_flags_are_checked_before_anything_starts(tmp_path):
    runner = CliRunner()
    store = ["region", "--store", str(tmp_path), "--name", "west"]
    no_link = runner.invoke(app, [*store, "--link-mbps", "5"])
    assert no_link.exit_code == 2 and "--regional-store" in no_link.output
    bad_set = runner.invoke(app, [*store, "--set", "rollout.env_latency_s"])
    assert bad_set.exit_code == 2 and "KEY=VALUE" in bad_set.output
    not_its_own = runner.invoke(app, [*store, "--set", "trainer.steps=3"])
    assert not_its_own.exit_code == 2 and "only rollout.*" in not_its_own.output
