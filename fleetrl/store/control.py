"""The run's control protocol: the small objects under `control/` that trainer and regions
read and write to steer each other through the store alone.

    trainer ── create control/incarnations/NNNNNN at start (conditional write) ─▶ fences
            ── put control/trainer.json {version, trained_samples, dropped_samples} ──▶ regions
            ── put control/stop when the last step is done ────────────────────────────▶ regions

Regions read the progress for their admission gate and stop when the stop object exists.
A trainer that starts claims the next incarnation number; an older incarnation still
running (a zombie: a process thought dead, a partitioned machine) finds a newer one before
its next publish and stops (`Fenced`). Version manifests are created exclusively too
(`fleetrl.store.weights`), so even a zombie that slips past the check cannot overwrite a
version.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fleetrl.store.objectstore import ObjectNotFound, ObjectStore

PROGRESS_KEY = "control/trainer.json"
STOP_KEY = "control/stop"
INCARNATIONS = "control/incarnations/"


class Fenced(RuntimeError):
    """A newer trainer incarnation has started: this one must not write anymore."""


@dataclass
class Progress:
    """What the trainer tells regions after each step (and while it waits for groups)."""

    version: int = 0  # policy version of the trainer's current weights
    trained_samples: int = 0  # samples trained on so far
    dropped_samples: int = 0  # samples of groups dropped as too stale so far
    step: int = 0  # optimizer steps done
    waiting_s: float = 0.0  # how long the trainer has been waiting for groups (0: training)
    time: float = 0.0  # unix time of this report


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


def _incarnations(store: ObjectStore) -> list[int]:
    names = (key[len(INCARNATIONS) :] for key in store.list(INCARNATIONS))
    return sorted(int(name) for name in names if name.isdigit())


def claim_incarnation(store: ObjectStore) -> int:
    """Start a new trainer incarnation: the next number (1, 2, …), claimed with a
    conditional write, so two trainers starting at once get different numbers."""
    owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()})
    while True:
        number = max(_incarnations(store), default=0) + 1
        if store.create(f"{INCARNATIONS}{number:06d}", owner.encode()):
            return number


def check_fence(store: ObjectStore, incarnation: int) -> None:
    """Raise Fenced when a newer incarnation than `incarnation` has started."""
    newest = max(_incarnations(store), default=incarnation)
    if newest > incarnation:
        raise Fenced(f"trainer incarnation {incarnation} fenced off by incarnation {newest}")
