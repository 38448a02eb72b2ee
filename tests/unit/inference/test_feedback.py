"""`reward_of`: a feedback's reward, or its signals weighted into one; a feedback the server
cannot turn into a reward is an InvalidFeedback naming the problem (a 400)."""

import math

import pytest

from fleetrl.inference.recording import FeedbackRequest, InvalidFeedback, reward_of

WEIGHTS = {"accepted": 1.0, "tests_passed": 0.5, "reverted": -2.0}


def feedback(**fields) -> FeedbackRequest:
    return FeedbackRequest(session_id="s", **fields)


def test_a_reward_is_taken_as_it_is() -> None:
    assert reward_of(feedback(reward=0.25), WEIGHTS) == 0.25
    assert reward_of(feedback(reward=-1.0), {}) == -1.0  # a server without signals


def test_signals_are_weighted_into_one_reward() -> None:
    signals = {"accepted": 1.0, "tests_passed": 0.5, "reverted": 1.0}
    assert reward_of(feedback(signals=signals), WEIGHTS) == pytest.approx(1.0 + 0.25 - 2.0)
    # A signal not given counts 0.
    assert reward_of(feedback(signals={"tests_passed": 1.0}), WEIGHTS) == pytest.approx(0.5)
    assert reward_of(feedback(signals={}), WEIGHTS) == 0.0


def test_an_unknown_signal_is_refused_naming_it_and_the_known_ones() -> None:
    with pytest.raises(InvalidFeedback) as err:
        reward_of(feedback(signals={"accepted": 1.0, "liked": 1.0}), WEIGHTS)
    message = str(err.value)
    assert "'liked'" in message and "accepted, reverted, tests_passed" in message
    with pytest.raises(InvalidFeedback, match="rewards only"):
        reward_of(feedback(signals={"accepted": 1.0}), {})


@pytest.mark.parametrize(
    "fields", [{"reward": 1.0, "signals": {"accepted": 1.0}}, {}], ids=["both", "neither"]
)
def test_both_or_neither_is_refused(fields) -> None:
    with pytest.raises(InvalidFeedback, match="either reward or signals"):
        reward_of(feedback(**fields), WEIGHTS)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_signal_that_is_not_finite_is_refused(value: float) -> None:
    with pytest.raises(InvalidFeedback, match="finite"):
        reward_of(feedback(signals={"accepted": value}), WEIGHTS)
    # A non-finite reward never gets this far: the request schema refuses it.
    with pytest.raises(ValueError, match="finite"):
        feedback(reward=value)
