"""Which policy version the serving fleet serves, and the gate's verdict on each candidate.

    trainer ─▶ weights/vN: every version it trains (`fleetrl.store.weights`)
    fleetrl gate ─▶ held-out pass@1 of vN against the served version ─▶ control/gate/vN.json
                    passed ─▶ control/serving.json: vN is served from now on
    fleetrl serve --store ─▶ follows control/serving.json (never LATEST)
    fleetrl rollback --to V ─▶ control/serving.json: V again (a version served before)

control/serving.json is the history of what was served, newest last:

    {"history": [{"version": 7, "time": 1764431000.5, "by": "gate"},
                 {"version": 0, "time": 1764432100.1, "by": "rollback"}]}

Before any entry the run serves version 0, its base. A rejected version stays in weights/
and its verdict in control/gate/: reported, never served. One writer at a time (the gate, or
an operator's rollback): the last write wins.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from fleetrl.store.objectstore import ObjectNotFound, ObjectStore

SERVING_KEY = "control/serving.json"
VERDICTS_PREFIX = "control/gate/"
ROLLBACK_DEPTH = 8  # the last served versions the store keeps, to roll back to


@dataclass(frozen=True)
class Served:
    """One change of the served version."""

    version: int
    time: float  # unix time of the change
    by: str  # "start", "gate" or "rollback"


@dataclass(frozen=True)
class Verdict:
    """The gate's judgement of one candidate version."""

    version: int
    passed: bool
    reason: str  # one line, for the operator
    serving_version: int  # what it was compared with
    pass_at_1: float  # the candidate's, on the gate's held-out tasks
    serving_pass_at_1: float
    gain: float  # mean over tasks of candidate - serving
    gain_low: float  # 95% paired bootstrap interval of the gain
    gain_high: float
    tasks: int
    time: float  # unix time of the verdict


def history(store: ObjectStore) -> list[Served]:
    """Every change of the served version, oldest first ([]: none yet, the base serves)."""
    try:
        raw = json.loads(store.get(SERVING_KEY))
    except ObjectNotFound:
        return []
    return [Served(**entry) for entry in raw["history"]]


def served_version(store: ObjectStore) -> int:
    """The version the serving fleet serves now (0, the base, before any change)."""
    changes = history(store)
    return changes[-1].version if changes else 0


def serve_version(store: ObjectStore, version: int, by: str) -> None:
    """Make `version` the served one (`by`: who decided: "gate", "rollback", "start")."""
    changes = [*history(store), Served(version, time.time(), by)]
    body = {"history": [asdict(change) for change in changes]}
    store.put(SERVING_KEY, json.dumps(body).encode())


def rollback_targets(store: ObjectStore) -> list[int]:
    """The versions a rollback may return to: the last ROLLBACK_DEPTH served ones, which
    the store keeps (the base, version 0, among them until then)."""
    served = [0] + [change.version for change in history(store)]
    return sorted(set(served[-ROLLBACK_DEPTH:]))


def write_verdict(store: ObjectStore, verdict: Verdict) -> None:
    """Keep the gate's verdict on a version (control/gate/vNNNNNNNN.json)."""
    store.put(f"{VERDICTS_PREFIX}v{verdict.version:08d}.json", json.dumps(asdict(verdict)).encode())


def verdicts(store: ObjectStore) -> list[Verdict]:
    """Every verdict the gate gave, by version."""
    found = []
    for key in store.list(VERDICTS_PREFIX):
        try:
            found.append(Verdict(**json.loads(store.get(key))))
        except ObjectNotFound:
            continue
    return sorted(found, key=lambda v: v.version)
