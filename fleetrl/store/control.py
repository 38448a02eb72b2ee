"""The run's control protocol: the small objects under `control/` that trainer and regions
read and write to steer each other through the store alone.

    trainer ── put control/trainer.json {version, trained_samples, dropped_samples} ──▶ regions
            ── put control/stop when the last step is done ────────────────────────────▶ regions

Regions read the progress for their admission gate and stop when the stop object exists.
Not covered: leases (who may write) and several trainers; a single trainer is assumed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fleetrl.store.objectstore import ObjectNotFound, ObjectStore

PROGRESS_KEY = "control/trainer.json"
STOP_KEY = "control/stop"


@dataclass
class Progress:
    """What the trainer tells regions after each step (and while it waits for groups)."""

    version: int = 0  # policy version of the trainer's current weights
    trained_samples: int = 0  # samples trained on so far
    dropped_samples: int = 0  # samples of groups dropped as too stale so far


def store_url(configured: str, run_dir: Path) -> str:
    """The run's object store: the configured URL, or a folder in the run directory."""
    return configured or str(run_dir / "store")


def write_progress(store: ObjectStore, progress: Progress) -> None:
    """Publish the trainer's progress for the regions' admission gates."""
    store.put(PROGRESS_KEY, json.dumps(asdict(progress)).encode())


def read_progress(store: ObjectStore) -> Progress:
    """The trainer's last progress (all zeros before its first write)."""
    try:
        return Progress(**json.loads(store.get(PROGRESS_KEY)))
    except ObjectNotFound:
        return Progress()


def signal_stop(store: ObjectStore) -> None:
    """Tell every region the run is over."""
    store.put(STOP_KEY, b"stop")


def stop_signalled(store: ObjectStore) -> bool:
    """Whether the trainer has said the run is over."""
    return store.exists(STOP_KEY)
