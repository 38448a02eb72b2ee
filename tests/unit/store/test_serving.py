"""The served version's history and the gate's verdicts (`fleetrl.store.serving`), on a
real local-folder store."""

import time

from fleetrl.store.serving import (
    ROLLBACK_DEPTH,
    SERVING_KEY,
    Verdict,
    history,
    rollback_targets,
    serve_version,
    served_version,
    verdicts,
    write_verdict,
)


def verdict(version: int, passed: bool) -> Verdict:
    return Verdict(
        version=version,
        passed=passed,
        reason=f"version {version}",
        serving_version=0,
        pass_at_1=0.5,
        serving_pass_at_1=0.75,
        gain=-0.25,
        gain_low=-0.5,
        gain_high=0.0,
        tasks=4,
        time=time.time(),
    )


def test_the_base_is_served_before_any_change(location):
    store = location.open()
    assert served_version(store) == 0 and history(store) == []
    assert rollback_targets(store) == [0]
    assert not store.exists(SERVING_KEY)


def test_serve_version_appends_to_the_history(location):
    store = location.open()
    before = time.time()
    serve_version(store, 3, "gate")
    serve_version(store, 5, "gate")
    serve_version(store, 3, "rollback")
    assert served_version(store) == 3
    changes = history(store)
    assert [(c.version, c.by) for c in changes] == [(3, "gate"), (5, "gate"), (3, "rollback")]
    assert before <= changes[0].time <= changes[1].time <= changes[2].time <= time.time()
    assert served_version(location.open()) == 3  # read back from the store, not a cache


def test_rollback_targets_are_the_last_served_and_the_base_while_in_range(location):
    store = location.open()
    for version in range(1, ROLLBACK_DEPTH):  # the base and ROLLBACK_DEPTH - 1 more
        serve_version(store, version, "gate")
    assert rollback_targets(store) == list(range(ROLLBACK_DEPTH))
    serve_version(store, ROLLBACK_DEPTH, "gate")  # the base falls out of range
    assert rollback_targets(store) == list(range(1, ROLLBACK_DEPTH + 1))
    serve_version(store, 0, "rollback")  # unless it is served again
    assert rollback_targets(store) == [0, *range(2, ROLLBACK_DEPTH + 1)]
    assert len(rollback_targets(store)) == ROLLBACK_DEPTH


def test_verdicts_round_trip_sorted_by_version(location):
    store = location.open()
    assert verdicts(store) == []
    given = [verdict(12, True), verdict(3, False), verdict(100, False)]
    for v in given:
        write_verdict(store, v)
    assert verdicts(store) == sorted(given, key=lambda v: v.version)
    write_verdict(store, verdict(3, True))  # a version judged again: the last word stays
    assert [(v.version, v.passed) for v in verdicts(store)] == [(3, True), (12, True), (100, False)]
    assert served_version(store) == 0  # a verdict alone serves nothing
