"""One admission budget for the whole fleet: the trainer hands it out, regions spend it.

    region ── put control/regions/<name>.json {submitted, in_flight, held, …} (heartbeat)
    trainer ── reads the heartbeats, puts control/grants.json {region: samples granted}
    region ── starts a group only while submitted + (in_flight + 1) × G <= its grant
              (`may_start`)

The budget is the staleness gate's, fleet-wide: with B samples per optimizer step and
bound O, after s steps at most (s + O + 1) × B + dropped samples may be handed in or
running, whatever the number of regions: every admitted sample is due for training within
O steps of the weights that start it; in a run of N steps, never more than (N + 1) × B +
dropped (one spare batch for the last batches' skipped groups). With O = 0 and one
region it is the synchronous loop: a whole batch at version v, then nothing until v + 1
is published. Samples are counted per group at the configured group size, on both sides,
even when a group lost episodes that failed: a region hands in whole groups of the
budget. Steps, not versions: a resumed trainer publishes above the store's newest
version (`trainer.loop`), and that jump trains nothing, so it must not widen the budget.
A grant is cumulative and never shrinks while its region is alive, so a region can never
find itself over budget because the trainer's view of it lagged. What is not yet granted
is shared equally among live regions (heartbeat younger than `ttl_s`); a region whose
heartbeat expires keeps only what it handed in, so its unused grant returns to the pool,
and a region that joins gets a share at the next allocation.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from fleetrl.store.objectstore import ObjectNotFound, ObjectStore

HEARTBEATS = "control/regions/"
GRANTS_KEY = "control/grants.json"


@dataclass
class Heartbeat:
    """What a region tells the fleet, every few seconds."""

    name: str
    submitted: int  # samples handed to the trainer through the channel, ever
    in_flight: int  # groups running now
    held: int  # policy version its engine serves
    time: float  # unix time of this heartbeat
    failed_episodes: int = 0  # episodes that raised, ever


def fleet_budget(
    steps: int, max_staleness: int, batch: int, dropped: int, last_step: int | None = None
) -> int:
    """Samples the whole fleet may have handed in or running after `steps` optimizer steps,
    `dropped` of them in groups the trainer did not train: dropped as too stale, or kept
    out of a batch for lack of reward variance (group size each). With `last_step` (the
    run's), at most one batch beyond it: the spare covers the last batches' skipped
    groups, and groups no step would train are not started."""
    ahead = steps + max_staleness + 1
    if last_step is not None:
        ahead = min(ahead, last_step + 1)
    return ahead * batch + dropped


def may_start(
    submitted: int,
    in_flight: int,
    grant: int,
    *,
    group_size: int,
    max_groups: int,
    held: int,
    trainer_version: int,
    max_staleness: int,
) -> bool:
    """A region's gate: one more group may start while the region runs fewer than
    `max_groups`, the group fits its grant (`submitted` samples handed in, `in_flight`
    groups running), and its weights (`held`) are not already too stale to be trained on."""
    if in_flight >= max_groups or trainer_version - held > max_staleness:
        return False
    return submitted + (in_flight + 1) * group_size <= grant


def allocate(
    granted: dict[str, int],
    beats: dict[str, Heartbeat],
    budget: int,
    group_size: int,
    now: float,
    ttl_s: float,
) -> dict[str, int]:
    """New grants: live regions keep theirs, dead ones keep what they handed in, and the
    rest of `budget` is shared equally among live regions, in whole groups."""
    live = sorted(n for n, b in beats.items() if now - b.time <= ttl_s)
    grants = {name: granted.get(name, 0) for name in live}
    for name, beat in beats.items():
        if name not in grants:
            grants[name] = beat.submitted  # unused grant of a dead region returns
    groups = max(0, budget - sum(grants.values())) // group_size
    for i, name in enumerate(live):
        share = groups // len(live) + (1 if i < groups % len(live) else 0)
        grants[name] += share * group_size
    return grants


def write_heartbeat(store: ObjectStore, beat: Heartbeat) -> None:
    """Publish a region's heartbeat."""
    store.put(f"{HEARTBEATS}{beat.name}.json", json.dumps(asdict(beat)).encode())


def read_heartbeats(store: ObjectStore) -> dict[str, Heartbeat]:
    """Every region's last heartbeat, by name."""
    beats = {}
    for key in store.list(HEARTBEATS):
        try:
            beat = Heartbeat(**json.loads(store.get(key)))
        except (ObjectNotFound, ValueError, TypeError):
            continue  # removed meanwhile, or half a record from another version
        beats[beat.name] = beat
    return beats


def write_grants(store: ObjectStore, grants: dict[str, int]) -> None:
    """Publish the grants (the trainer only)."""
    store.put(GRANTS_KEY, json.dumps(grants, sort_keys=True).encode())


def read_grants(store: ObjectStore) -> dict[str, int]:
    """The grants as last published (empty before the first)."""
    try:
        return {str(k): int(v) for k, v in json.loads(store.get(GRANTS_KEY)).items()}
    except ObjectNotFound:
        return {}


def hand_out(
    store: ObjectStore, budget: int, group_size: int, ttl_s: float = 30.0
) -> dict[str, int]:
    """The trainer's allocation round: read heartbeats and grants, publish new grants."""
    grants = allocate(
        read_grants(store), read_heartbeats(store), budget, group_size, time.time(), ttl_s
    )
    write_grants(store, grants)
    return grants
