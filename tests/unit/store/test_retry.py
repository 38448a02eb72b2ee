"""Retries through a store outage: backoff, give-up time, and what is never retried."""

from __future__ import annotations

import errno
import logging

import pytest

from fleetrl.store.objectstore import ObjectNotFound, is_transient, retry_transient


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def flaky(failures: list[BaseException], result: str = "done"):
    """A call that raises each of `failures` in turn, then returns `result`."""
    calls = iter(failures)

    def call() -> str:
        for failure in calls:
            raise failure
        return result

    return call


def test_transient_failures_are_retried_with_doubling_waits(caplog):
    time = FakeTime()
    failures = [ConnectionRefusedError(111, "refused"), TimeoutError(), OSError(errno.EIO, "503")]
    with caplog.at_level(logging.WARNING, logger="fleetrl.store.objectstore"):
        result = retry_transient("get k", flaky(failures), 120, time.sleep, time.clock)
    assert result == "done"
    assert time.sleeps == [0.5, 1.0, 2.0]
    assert [r.levelname for r in caplog.records] == ["WARNING"] * 3  # one line per retry
    assert "get k failed (ConnectionRefusedError" in caplog.records[0].getMessage()


def test_an_outage_longer_than_the_budget_raises_its_failure():
    time = FakeTime()
    with pytest.raises(ConnectionResetError):
        retry_transient("put k", flaky([ConnectionResetError()] * 100), 60, time.sleep, time.clock)
    assert time.sleeps == [0.5, 1, 2, 4, 8, 8, 8, 8, 8, 8]  # capped at 8 s
    assert sum(time.sleeps) <= 60 < sum(time.sleeps) + 8


@pytest.mark.parametrize(
    "answer",
    [
        ObjectNotFound("no such key"),
        FileNotFoundError("no such key"),
        FileExistsError("exists"),
        PermissionError("403"),
        OSError(errno.EINVAL, "412 Precondition Failed"),
        ValueError("a bug"),
    ],
)
def test_answers_are_raised_at_once(answer):
    time = FakeTime()
    with pytest.raises(type(answer)):
        retry_transient("get k", flaky([answer]), 120, time.sleep, time.clock)
    assert time.sleeps == [] and not is_transient(answer)


def test_botocore_connection_errors_are_transient():
    exceptions = pytest.importorskip("botocore.exceptions")
    assert is_transient(exceptions.EndpointConnectionError(endpoint_url="http://s3"))
    assert is_transient(exceptions.ConnectionClosedError(endpoint_url="http://s3"))
    assert is_transient(exceptions.ReadTimeoutError(endpoint_url="http://s3"))
    assert not is_transient(exceptions.NoCredentialsError())
