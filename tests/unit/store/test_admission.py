"""The fleet-wide admission budget: grants shared by live regions, never over budget."""

from __future__ import annotations

import random
import time

from fleetrl.store.admission import (
    Heartbeat,
    allocate,
    fleet_budget,
    hand_out,
    may_start,
    read_grants,
    write_heartbeat,
)
from fleetrl.store.objectstore import open_store

G = 8


def beat(name: str, submitted: int = 0, in_flight: int = 0, time: float = 100.0) -> Heartbeat:
    return Heartbeat(name, submitted, in_flight, held=0, time=time)


def test_budget_is_the_gate_formula_fleet_wide():
    assert fleet_budget(steps=0, max_staleness=1, batch=96, dropped=0) == 192
    assert fleet_budget(steps=3, max_staleness=0, batch=16, dropped=8) == 72
    # Near the run's end: one spare batch beyond the last step, no more.
    assert fleet_budget(steps=9, max_staleness=2, batch=16, dropped=8, last_step=10) == 184
    assert fleet_budget(steps=9, max_staleness=2, batch=16, dropped=8) == 200
    assert fleet_budget(steps=7, max_staleness=2, batch=16, dropped=0, last_step=10) == 160


def test_free_budget_is_shared_equally_in_whole_groups():
    beats = {n: beat(n) for n in ("a", "b", "c")}
    grants = allocate({}, beats, budget=10 * G, group_size=G, now=100, ttl_s=30)
    assert grants == {"a": 4 * G, "b": 3 * G, "c": 3 * G}
    # A bigger budget later: grants only grow.
    more = allocate(grants, beats, budget=13 * G, group_size=G, now=100, ttl_s=30)
    assert more == {"a": 5 * G, "b": 4 * G, "c": 4 * G}


def test_a_dead_region_gives_back_what_it_did_not_hand_in_and_a_new_one_joins():
    grants = {"a": 5 * G, "b": 5 * G}
    beats = {"a": beat("a", submitted=2 * G), "b": beat("b", submitted=1 * G, time=0.0)}
    beats["c"] = beat("c")  # joins
    new = allocate(grants, beats, budget=10 * G, group_size=G, now=100, ttl_s=30)
    assert new["b"] == 1 * G  # dead: keeps what it handed in
    assert new["a"] >= 5 * G and new["c"] > 0
    assert sum(new.values()) <= 10 * G


def test_no_allocation_ever_exceeds_the_budget():
    # Random heartbeats, joins, deaths and budgets: new grants are only handed out of what
    # is free, so the total exceeds the budget only by what was granted before (live
    # regions) or handed in (dead ones); live grants never shrink.
    rng = random.Random(0)
    grants: dict[str, int] = {}
    budget = 0
    for round_ in range(300):
        budget += rng.choice([0, G, 3 * G])
        beats = {}
        for name in ("a", "b", "c", "d"):
            if rng.random() < 0.7:
                granted = grants.get(name, 0)
                submitted = rng.randrange(0, granted + 1, G) if granted else 0
                alive = rng.random() < 0.8
                beats[name] = beat(name, submitted, time=round_ if alive else round_ - 100)
        live = {n for n, b in beats.items() if round_ - b.time <= 30}
        kept = {n: grants.get(n, 0) if n in live else b.submitted for n, b in beats.items()}
        new = allocate(grants, beats, budget, G, now=round_, ttl_s=30)
        assert all(g % G == 0 for g in new.values())
        assert all(new[n] >= grants.get(n, 0) for n in live)
        assert sum(new.values()) <= max(budget, sum(kept.values()))
        if live and sum(kept.values()) + len(live) * G <= budget:
            assert sum(new.values()) > budget - G * len(live)  # free budget is handed out
        grants = new


def test_hand_out_reads_heartbeats_and_publishes_grants(tmp_path):
    store = open_store(str(tmp_path / "store"))
    write_heartbeat(store, Heartbeat("west", 0, 0, 0, time.time()))
    write_heartbeat(store, Heartbeat("east", 0, 0, 0, time.time()))
    grants = hand_out(store, budget=4 * G, group_size=G)
    assert grants == {"east": 2 * G, "west": 2 * G} == read_grants(store)


def one_region_starts(version: int, submitted: int, dropped: int, max_staleness: int) -> int:
    """Groups one region may start in a row at trainer `version` (batch: 2 groups of G),
    its weights current: the grant of the fleet budget, then the region's gate."""
    budget = fleet_budget(version, max_staleness, 2 * G, dropped)
    grant = allocate({}, {"r": beat("r", submitted)}, budget, G, now=100, ttl_s=30)["r"]
    gate = {"group_size": G, "max_groups": 8, "held": version, "trainer_version": version}
    started = 0
    while may_start(submitted, started, grant, max_staleness=max_staleness, **gate):
        started += 1
    return started


def test_synchronous_gate_admits_exactly_one_batch_per_version():
    # O = 0: at version 0 one batch (2 groups), nothing more until version 1.
    assert one_region_starts(version=0, submitted=0, dropped=0, max_staleness=0) == 2
    assert one_region_starts(version=0, submitted=2 * G, dropped=0, max_staleness=0) == 0
    assert one_region_starts(version=1, submitted=2 * G, dropped=0, max_staleness=0) == 2


def test_staleness_bound_adds_one_batch_per_version_of_slack():
    assert one_region_starts(version=0, submitted=0, dropped=0, max_staleness=1) == 4
    assert one_region_starts(version=0, submitted=0, dropped=0, max_staleness=2) == 6
    assert one_region_starts(version=0, submitted=3 * G, dropped=0, max_staleness=1) == 1


def test_dropped_samples_are_given_back():
    assert one_region_starts(version=0, submitted=4 * G, dropped=0, max_staleness=1) == 0
    assert one_region_starts(version=0, submitted=4 * G, dropped=2 * G, max_staleness=1) == 2


def test_gate_holds_the_concurrency_cap_and_stale_weights_back():
    gate = {"group_size": G, "max_groups": 2, "max_staleness": 1}
    assert not may_start(0, 2, 100 * G, held=5, trainer_version=5, **gate)  # cap
    assert not may_start(0, 0, 100 * G, held=3, trainer_version=5, **gate)  # held too old
    assert may_start(0, 1, 100 * G, held=4, trainer_version=5, **gate)
    assert not may_start(G, 0, G, held=5, trainer_version=5, **gate)  # grant used up
