"""Evaluation statistics; evaluating a policy with the real verifier is in tests/env/rollout."""

from fleetrl.rollout.evaluate import wilson_interval


def test_wilson_interval():
    low, high = wilson_interval(20, 100)
    assert (round(low, 3), round(high, 3)) == (0.133, 0.289)
    assert wilson_interval(0, 200)[0] == 0.0 and wilson_interval(200, 200)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
