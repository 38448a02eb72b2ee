"""The two roles of a run, each a process that needs nothing but the store's URL:

    fleetrl trainer --store URL [--workdir DIR]
    fleetrl region --store URL --name NAME [--workdir DIR] [--regional-store URL
                   [--link-mbps M]] [--set rollout.KEY=VALUE …]

Each opens the run (`orchestrate.run.open_run`): the config, the base checkpoint and the
task folder are copied from the store into the process's own work folder (default
runs/NAME for the trainer, runs/NAME/regions/REGION for a region). A region may override
its own `rollout` settings (a slower environment, fewer groups): they change nothing of
the run's other processes. The trainer exits 0 when
the run's steps are done and FENCED_EXIT when a newer trainer has taken over; a region
exits 0 after the trainer's stop signal. `fleetrl train` starts them the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fleetrl.config import ConfigError, parse_config, with_overrides
from fleetrl.orchestrate.run import open_run
from fleetrl.store.control import Fenced
from fleetrl.store.objectstore import open_store
from fleetrl.store.run import read_config_text

FENCED_EXIT = 3  # not a crash: another incarnation runs the trainer now; do not restart


def default_workdir(url: str, region: str | None = None) -> Path:
    """runs/NAME (the trainer) or runs/NAME/regions/REGION, NAME being the run's name."""
    name = parse_config(read_config_text(open_store(url)), url).name
    folder = Path("runs") / name
    return folder / "regions" / region if region else folder


def trainer_role(url: str, workdir: Path | None = None) -> int:
    """Run the trainer of the run at `url` until its steps are done; the exit code."""
    from fleetrl.trainer.loop import run_trainer

    workdir = workdir or default_workdir(url)
    config = open_run(url, workdir)
    try:
        run_trainer(config, workdir)
    except Fenced as err:
        print(f"fleetrl trainer: {err}; exiting", file=sys.stderr)
        return FENCED_EXIT
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
    from fleetrl.rollout.region import run_region

    others = sorted(set(overrides or {}) - {"rollout"})
    if others:
        raise ConfigError(f"a region may override only rollout.* settings, not {others[0]}.*")
    workdir = workdir or default_workdir(url, name)
    config = with_overrides(open_run(url, workdir), overrides or {})
    run_region(config, workdir, name, regional_store, link_bytes_per_s)
    return 0
