"""The verifier's outcome cache: a timed-out grading is not kept, the capacity evicts, and a
grading that raises lets a waiting thread grade the submission itself. Grading for real
(gold patches, the cheat suite) is tested in tests/env/envs/test_verifier.py."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fleetrl.envs.verifier import OutcomeCache


def test_outcome_cache_keeps_no_timeout_and_survives_a_failed_grading():
    cache = OutcomeCache(capacity=2)
    calls = []

    def grade(outcome):
        def run():
            calls.append(outcome)
            return {"t": outcome}

        return run

    assert cache.outcomes("slow", grade("timeout")) == {"t": "timeout"}
    assert cache.outcomes("slow", grade("passed")) == {"t": "passed"}  # graded again
    assert cache.outcomes("slow", grade("failed")) == {"t": "passed"}  # now kept
    for key in ("b", "c"):
        cache.outcomes(key, grade("failed"))
    assert cache.outcomes("slow", grade("failed")) == {"t": "failed"}  # evicted (capacity 2)
    assert calls == ["timeout", "passed", "failed", "failed", "failed"]  # gradings that ran

    # A grading that raises lets a waiting thread grade the submission itself.
    started, release = threading.Event(), threading.Event()

    def broken():
        started.set()
        release.wait()
        raise RuntimeError("sandbox failed")

    def first():
        with pytest.raises(RuntimeError):
            cache.outcomes("k", broken)

    thread = threading.Thread(target=first)
    thread.start()
    started.wait()
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(cache.outcomes, "k", grade("passed"))
        release.set()
        thread.join()
        assert waiter.result(timeout=10) == {"t": "passed"}
