"""`fleetrl status --store URL`: where a run stands, read from its store alone.

Trainer: version, step, samples trained and dropped, how long it has waited for groups,
its incarnation and when it last reported. Each region: the version it holds, groups in
flight, samples handed in and granted, failed episodes, its heartbeat's age and how many
versions it lags the trainer. Real-time RL: the version served and the gate's verdicts,
rejected ones included (`fleetrl.store.serving`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from fleetrl.store.admission import read_grants, read_heartbeats
from fleetrl.store.control import INCARNATIONS, read_progress, stop_signalled
from fleetrl.store.objectstore import ObjectStore
from fleetrl.store.serving import Verdict, served_version, verdicts
from fleetrl.store.weights import WeightStore


@dataclass
class RegionStatus:
    """One region, as its last heartbeat and the trainer's grants show it."""

    name: str
    held: int  # policy version its engine serves
    staleness: int  # versions it lags the trainer
    in_flight: int  # groups running
    submitted: int  # samples handed in, ever
    granted: int  # samples the trainer allows it, ever
    failed_episodes: int
    heartbeat_age_s: float


@dataclass
class RunStatus:
    """The whole run."""

    latest_version: int | None  # newest published weights
    trainer_version: int
    step: int
    trained_samples: int
    dropped_samples: int
    waiting_s: float  # the trainer's wait for groups at its last report (0: training)
    trainer_report_age_s: float | None
    incarnation: int  # trainer starts so far
    stopped: bool  # the trainer signalled the end of the run
    regions: list[RegionStatus]
    served_version: int  # what `fleetrl serve --store` processes serve (real-time RL)
    verdicts: list[Verdict]  # the gate's, by version (none without a gate)


def run_status(store: ObjectStore) -> RunStatus:
    """Everything `fleetrl status` shows."""
    now = time.time()
    progress = read_progress(store)
    grants = read_grants(store)
    regions = [
        RegionStatus(
            name=beat.name,
            held=beat.held,
            staleness=max(0, progress.version - beat.held),
            in_flight=beat.in_flight,
            submitted=beat.submitted,
            granted=grants.get(beat.name, 0),
            failed_episodes=beat.failed_episodes,
            heartbeat_age_s=round(now - beat.time, 1),
        )
        for beat in sorted(read_heartbeats(store).values(), key=lambda b: b.name)
    ]
    return RunStatus(
        latest_version=WeightStore(store).latest(),
        trainer_version=progress.version,
        step=progress.step,
        trained_samples=progress.trained_samples,
        dropped_samples=progress.dropped_samples,
        waiting_s=round(progress.waiting_s, 1),
        trainer_report_age_s=round(now - progress.time, 1) if progress.time else None,
        incarnation=len(store.list(INCARNATIONS)),
        stopped=stop_signalled(store),
        regions=regions,
        served_version=served_version(store),
        verdicts=verdicts(store),
    )


def as_json(status: RunStatus) -> dict:
    """The `fleetrl status --json` document."""
    return asdict(status)
