"""The outcome cache: identical submissions run the hidden tests once.

Contract: `submission_key` is what the hidden tests' outcomes depend on (the task's tests,
its grading mode and the applied files); `OutcomeCache.outcomes` returns the outcome stored
under a key, or grades it once while other threads asking for the same key wait; a grading
that timed out is not kept. `OUTCOMES` is the process's cache; `verify` looks it up here at every
grading, so assigning `fleetrl.envs.verifier.cache.OUTCOMES` replaces it (tests and
benchmarks do, to grade for real).

What is not covered: flaky tests (a cached outcome repeats the first grading's).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

from fleetrl.envs.tasks.suites import grading_for
from fleetrl.envs.verifier.judge import RunOutcome
from fleetrl.types import Task


class OutcomeCache:
    """Hidden-test outcomes by submission, shared by the threads of a process.

    A submission being graded is graded once: other threads asking for the same key wait
    for its result rather than start a second pytest.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._done: OrderedDict[str, RunOutcome] = OrderedDict()
        self._running: dict[str, threading.Event] = {}

    def outcomes(self, key: str, grade: Callable[[], RunOutcome]) -> RunOutcome:
        """The outcome stored under `key`, or the one `grade()` returns (then stored)."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return self._done[key]
                running = self._running.get(key)
                if running is None:
                    running = self._running[key] = threading.Event()
                    break
            running.wait()  # then look again; if that grading failed, grade here
        try:
            outcome = grade()
            with self._lock:
                self.misses += 1
                if "timeout" not in outcome.tests.values():
                    self._done[key] = outcome
                    while len(self._done) > self.capacity:
                        self._done.popitem(last=False)
            return outcome
        finally:
            with self._lock:
                del self._running[key]
            running.set()


OUTCOMES = OutcomeCache()


def submission_key(task: Task, applied: Mapping[str, tuple[bytes | None, bytes | None]]) -> str:
    """What the hidden tests' outcomes depend on: the task's tests, how they are run (the
    grading mode) and the applied files."""
    digest = hashlib.sha256()
    header = [task.instance_id, task.base_commit, task.test_patch, grading_for(task)]
    digest.update(json.dumps([*header, task.FAIL_TO_PASS, task.PASS_TO_PASS]).encode())
    for path in sorted(applied):
        new = applied[path][1]
        name = path.encode("utf-8", "surrogateescape")
        digest.update(b"\0" + name + f"\0{-1 if new is None else len(new)}\0".encode())
        digest.update(new or b"")
    return digest.hexdigest()
