"""The harness's pure parts; the agent loop in a real sandbox is in tests/env/envs."""

import random

import pytest

from fleetrl.envs.harness.loop import environment_latency


def test_simulated_environment_latency_is_long_tailed_with_the_given_mean():
    random.seed(0)
    waits = sorted(environment_latency(0.5) for _ in range(20000))
    assert sum(waits) / len(waits) == pytest.approx(0.5, rel=0.05)
    assert 7 < waits[int(0.99 * len(waits))] / waits[len(waits) // 2] < 14  # p99 / p50
