"""The two roles of a run, each a process that needs nothing but the store's URL:

    fleetrl trainer --store URL [--workdir DIR]        (or N of them under torchrun)
    fleetrl region --store URL --name NAME [--workdir DIR] [--regional-store URL
                   [--link-mbps M]] [--set rollout.KEY=VALUE …]
    fleetrl serve --store URL [--region NAME]         (real-time RL: serves and records)
    fleetrl gate --store URL                          (real-time RL: what may be served)

Each opens the run (`orchestrate.run.open_run`): the config, the base checkpoint and the
task folder are copied from the store into the process's own work folder (default
runs/NAME for the trainer, runs/NAME/regions/REGION for a region). A region may override
its own `rollout` settings (a slower environment, fewer groups): they change nothing of
the run's other processes. The trainer exits 0 when
the run's steps are done and FENCED_EXIT when a newer trainer has taken over; a region
exits 0 after the trainer's stop signal. `fleetrl train` starts them the same way.

Each role is a start-up (`start_trainer`, `start_region`), which checks everything a
user's mistake can fail (the store URLs, the run and its config, the overrides, the work
folder) before it copies anything and raises one of START_ERRORS for it, then the run
itself (`train`, `roll_out`). The start-up opens each store once and reads and checks the
run's config once; the run gets them in a `Started`, never a URL to open again:

    start_trainer / start_region ─▶ Started(config, workdir, store, regional)
                                        ─▶ train ─▶ trainer.loop.run_trainer
                                        ─▶ roll_out ─▶ rollout.region.run_region
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetrl.config import ConfigError, RunConfig, check_trainable
from fleetrl.config_files import with_overrides
from fleetrl.files import file_in_the_way
from fleetrl.orchestrate.run import open_run, read_run_config
from fleetrl.store.control import Fenced
from fleetrl.store.errors import StoreAccessError
from fleetrl.store.follower import WeightFollower, WeightSink
from fleetrl.store.manifest import LATEST_KEY
from fleetrl.store.objectstore import BadStoreURL, ObjectStore, StoreUnreachable, open_store
from fleetrl.store.run import RunNotFound
from fleetrl.store.serving import served_version
from fleetrl.store.weights import WeightStore

FENCED_EXIT = 3  # not a crash: another incarnation runs the trainer now; do not restart


class BadWorkdir(ValueError):
    """A work folder that cannot be made: a file is in the way."""


# What a role's start-up raises for a user's mistake, each with a one-line message.
START_ERRORS = (
    BadStoreURL,
    StoreUnreachable,
    StoreAccessError,
    RunNotFound,
    ConfigError,
    BadWorkdir,
)


@dataclass(frozen=True)
class Started:
    """A role past its start-up: what it hands down to the run itself."""

    config: RunConfig  # the run's, read and checked once, pointing at the copies in workdir
    workdir: Path  # the process's own work folder, holding those copies
    store: ObjectStore  # the run's store, opened once
    regional: ObjectStore | None = None  # a region's own weight store (--regional-store)


def default_workdir(name: str, region: str | None = None) -> Path:
    """runs/NAME (the trainer) or runs/NAME/regions/REGION, NAME being the run's name."""
    folder = Path("runs") / name
    return folder / "regions" / region if region else folder


def check_workdir(workdir: Path) -> Path:
    """`workdir`, once sure that a folder can be made there; BadWorkdir otherwise."""
    blocker = file_in_the_way(workdir)
    if blocker == workdir:
        raise BadWorkdir(f"work folder {workdir} is a file, not a folder")
    if blocker is not None:
        raise BadWorkdir(f"work folder {workdir}: {blocker} is a file, not a folder")
    return workdir


def start_trainer(url: str, workdir: Path | None = None) -> Started:
    """The trainer's start-up: the checks (the run's config among them: the trainer refuses
    one it cannot train), then the run copied into its work folder (default runs/NAME)."""
    store = open_store(url)
    config = read_run_config(store)
    check_trainable(config)
    workdir = check_workdir(workdir or default_workdir(config.name))
    return Started(open_run(store, config, workdir), workdir, store)


def train(started: Started) -> int:
    """Run a started trainer until its steps are done; the exit code. Under torchrun (or
    the Ray launcher) this process is one of the trainer's ranks (`trainer.parallel`):
    the ranks of one machine share its work folder (the run's copies are written whole,
    once)."""
    import torch.distributed as dist

    from fleetrl.trainer.loop import run_trainer
    from fleetrl.trainer.parallel import init_ranks

    ranks = init_ranks()
    try:
        run_trainer(started.config, started.workdir, store=started.store, ranks=ranks)
    except Fenced as err:
        if ranks.leader:
            print(f"fleetrl trainer: {err}; exiting", file=sys.stderr)
        return FENCED_EXIT
    finally:
        if ranks.distributed:
            dist.destroy_process_group()
    return 0


def trainer_role(url: str, workdir: Path | None = None) -> int:
    """Run the trainer of the run at `url` until its steps are done; the exit code."""
    return train(start_trainer(url, workdir))


def start_region(
    url: str,
    name: str,
    workdir: Path | None = None,
    regional_store: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Started:
    """Region `name`'s start-up: the checks (the overrides are applied to the stored
    config before the copy, which validates them), then the run copied into its work
    folder (default runs/RUN/regions/NAME). The config it hands on has the overrides."""
    others = sorted(set(overrides or {}) - {"rollout"})
    if others:
        raise ConfigError(f"a region may override only rollout.* settings, not {others[0]}.*")
    store = open_store(url)
    config = with_overrides(read_run_config(store), overrides or {})
    workdir = check_workdir(workdir or default_workdir(config.name, name))
    regional = open_store(regional_store) if regional_store else None
    if regional is not None:
        # One cheap call: a regional store that is unreachable fails now, not after the copy.
        regional.exists(LATEST_KEY)
    return Started(open_run(store, config, workdir), workdir, store, regional)


def start_serving(url: str, name: str, workdir: Path | None = None) -> Started:
    """A serving process's start-up (`fleetrl serve --store URL`): the checks, then the run
    copied into its work folder (default runs/RUN/serve/NAME), as a region's."""
    return _start_in(url, workdir, Path("serve") / name)


def start_gate(url: str, workdir: Path | None = None) -> Started:
    """The gate's start-up (`fleetrl gate --store URL`), its work folder runs/RUN/gate."""
    return _start_in(url, workdir, Path("gate"))


def _start_in(url: str, workdir: Path | None, under: Path) -> Started:
    store = open_store(url)
    config = read_run_config(store)
    workdir = check_workdir(workdir or default_workdir(config.name) / under)
    return Started(open_run(store, config, workdir), workdir, store)


async def follow_served(
    started: Started,
    name: str,
    engine: WeightSink,
    stop: asyncio.Event,
    ready: asyncio.Event,
    poll_s: float = 1.0,
) -> None:
    """Keep `engine` on the run's served version (`fleetrl.store.serving`: what the gate
    passed, or an operator rolled back to), swapping each change in flight, until `stop`;
    `ready` once the first sync was tried."""
    store = started.store
    follower = WeightFollower(
        WeightStore(store),  # a reader: the manifests say how versions were written
        engine,
        f"serve-{name}",
        poll_s=poll_s,
        target=lambda: served_version(store),
    )
    await follower.run(stop, ready)


def roll_out(started: Started, name: str, link_bytes_per_s: float | None = None) -> int:
    """Run a started region until the trainer says stop; the exit code."""
    from fleetrl.rollout.region import run_region

    config, workdir, regional = started.config, started.workdir, started.regional
    run_region(config, workdir, name, regional, link_bytes_per_s, store=started.store)
    return 0


def region_role(
    url: str,
    name: str,
    workdir: Path | None = None,
    regional_store: str | None = None,
    overrides: dict[str, Any] | None = None,
    link_bytes_per_s: float | None = None,
) -> int:
    """Run region `name` of the run at `url` until the trainer says stop; the exit code.
    `regional_store`: the region's own weight store, fed once per version by a relay over a
    link of `link_bytes_per_s` (None: unthrottled); `overrides`: this region's own
    `rollout` settings over the run's (nested, e.g. {"rollout": {"env_latency_s": 2.0}})."""
    started = start_region(url, name, workdir, regional_store, overrides)
    return roll_out(started, name, link_bytes_per_s)
