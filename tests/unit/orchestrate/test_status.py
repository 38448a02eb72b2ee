"""`fleetrl status`: the run as its store shows it."""

from __future__ import annotations

import time

from fleetrl.orchestrate.status import run_status
from fleetrl.store.admission import Heartbeat, write_grants, write_heartbeat
from fleetrl.store.control import Progress, claim_incarnation, signal_stop, write_progress
from fleetrl.store.objectstore import open_store


def test_status_reads_trainer_progress_heartbeats_and_grants(tmp_path):
    store = open_store(str(tmp_path / "store"))
    claim_incarnation(store)
    claim_incarnation(store)
    write_progress(store, Progress(7, 96, 16, step=6, waiting_s=2.5, time=time.time()))
    write_heartbeat(store, Heartbeat("west", 48, 2, held=6, time=time.time() - 3))
    write_heartbeat(store, Heartbeat("east", 64, 1, held=7, time=time.time(), failed_episodes=1))
    write_grants(store, {"west": 80, "east": 96})
    status = run_status(store)
    assert (status.trainer_version, status.step, status.incarnation) == (7, 6, 2)
    assert status.waiting_s == 2.5 and not status.stopped and status.latest_version is None
    east, west = status.regions
    assert (west.name, west.held, west.staleness, west.in_flight) == ("west", 6, 1, 2)
    assert (west.submitted, west.granted, west.heartbeat_age_s >= 3) == (48, 80, True)
    assert (east.staleness, east.failed_episodes, east.granted) == (0, 1, 96)
    signal_stop(store)
    assert run_status(store).stopped
