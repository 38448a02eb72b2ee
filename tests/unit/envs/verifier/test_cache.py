"""The outcome cache: a timed-out grading is not kept, the capacity evicts, a grading that
raises lets a waiting thread grade the submission itself. That identical submissions run
the hidden tests once is tested for real in tests/env/envs/verifier/test_cache.py."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fleetrl.envs.verifier.cache import OutcomeCache
from fleetrl.envs.verifier.judge import RunOutcome


def test_outcome_cache_keeps_no_timeout_and_survives_a_failed_grading():
    cache = OutcomeCache(capacity=2)
    calls = []

    def grade(outcome):
        def run():
            calls.append(outcome)
            return RunOutcome({"t": outcome})

        return run

    assert cache.outcomes("slow", grade("timeout")).tests == {"t": "timeout"}
    assert cache.outcomes("slow", grade("passed")).tests == {"t": "passed"}  # graded again
    assert cache.outcomes("slow", grade("failed")).tests == {"t": "passed"}  # now kept
    for key in ("b", "c"):
        cache.outcomes(key, grade("failed"))
    assert cache.outcomes("slow", grade("failed")).tests == {"t": "failed"}  # evicted (capacity 2)
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
        assert waiter.result(timeout=10).tests == {"t": "passed"}
