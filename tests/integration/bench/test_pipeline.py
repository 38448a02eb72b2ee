"""`fleetrl bench pipeline`: the synchronous and the asynchronous loop on one tiny workload,
as real trainer and region processes."""

import json
import subprocess
import sys

import pytest


# The longest test of the suite (four trainer and region processes). Without it, `-m "not
# slow"` still runs those processes (`fleetrl train`, tests/integration/orchestrate/
# test_local.py), the synchronous gate (tests/unit/rollout/test_admission.py) and the
# trainer at max_staleness 0 (tests/integration/trainer/test_loop.py).
@pytest.mark.slow
def test_bench_pipeline_runs_sync_and_async(tiny_checkpoint):
    argv = [sys.executable, "-m", "fleetrl.cli", "bench", "pipeline", "--json", "--model"]
    argv += [str(tiny_checkpoint), "--steps", "2", "--groups-per-step", "2", "--group-size", "2"]
    # The tiny random model fails every task: without dynamic sampling each step trains its
    # two groups instead of waiting for groups with signal that never come.
    argv += ["--env-latency", "0.2", "--set", "trainer.dynamic_sampling=false"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout)
    assert figures["sync"]["staleness_mean"] == 0  # the synchronous loop is never stale
    assert figures["sync"]["samples"] == figures["async"]["samples"] == 8
    assert figures["speedup"] > 0 and 0 <= figures["async"]["trainer_idle_frac"] <= 1
    assert figures["config"]["env_latency_s"] == 0.2
