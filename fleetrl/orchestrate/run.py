"""A run that lives in its object store: created once, joined by any process from its URL.

    fleetrl run create CONFIG --store URL ─▶ run/config.toml, run/base/, run/tasks.tar,
                                             run/skip_solved.json,
                                             weights/v00000000 (the base weights)
    fleetrl trainer --store URL           ─▶ open_run: config + base checkpoint + tasks,
    fleetrl region --store URL --name N      materialised in the process's own work folder

The processes share nothing but the store: no run folder, no local checkpoint, no shared
disk. S3 credentials and endpoint come from the usual AWS_* variables.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.config_files import dump_config, parse_config, with_overrides
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint
from fleetrl.store.objectstore import ObjectStore, open_store
from fleetrl.store.run import (
    BASE_PREFIX,
    CONFIG_KEY,
    SKIP_SOLVED_KEY,
    TASKS_KEY,
    download_file,
    download_folder,
    pack_folder,
    read_config_text,
    unpack_folder,
    upload_folder,
)
from fleetrl.store.weights import WeightStore, WeightStoreOptions


class RunExists(ValueError):
    """The store already holds a run."""


def create_run(config: RunConfig, store: ObjectStore | str) -> None:
    """Write everything a run needs into `store` (opened, or its URL): the base checkpoint,
    the task folder and the `tasks.skip_solved` evaluation (if any), the base weights as
    version 0, then the resolved config (last: the run exists once it is there). Refuses a
    store that already holds a run."""
    store = open_store(store) if isinstance(store, str) else store
    url = store.url
    if store.exists(CONFIG_KEY):
        raise RunExists(f"{url} already holds a run ({CONFIG_KEY})")
    base = resolve_checkpoint(config.model.path)
    upload_folder(store, base, BASE_PREFIX)
    if config.tasks.tasks_dir:
        store.put(TASKS_KEY, pack_folder(Path(config.tasks.tasks_dir)))
    if config.tasks.skip_solved:
        store.put(SKIP_SOLVED_KEY, Path(config.tasks.skip_solved).read_bytes())
    options = WeightStoreOptions(
        full_every=config.store.full_every, publish_dtype=config.store.publish_dtype
    )
    weights = WeightStore(store, options)
    if weights.highest() is None:
        weights.publish(0, load_pretrained(base, dtype=torch.float32).state_dict())
    store.put(CONFIG_KEY, dump_config(with_overrides(config, {"store": {"url": url}})).encode())


def read_run_config(store: ObjectStore) -> RunConfig:
    """The configuration stored in the run, parsed: a role's first contact with its store,
    so that an unreachable store, a missing run or an invalid config fails here, before
    anything is copied."""
    return parse_config(read_config_text(store), f"{store.url}/{CONFIG_KEY}")


def open_run(store: ObjectStore, config: RunConfig, workdir: Path) -> RunConfig:
    """The run's base checkpoint, task folder and `tasks.skip_solved` evaluation copied
    under `workdir`; returns `config` (as `read_run_config` read it) pointing at those
    copies, and at the store by its URL."""
    overrides: dict = {"store": {"url": store.url}}
    overrides["model"] = {"path": str(download_folder(store, BASE_PREFIX, workdir / "base"))}
    if store.exists(TASKS_KEY):
        tasks = unpack_folder(store.get(TASKS_KEY), workdir / "tasks")
        overrides["tasks"] = {"tasks_dir": str(tasks)}
    if store.exists(SKIP_SOLVED_KEY):
        solved = download_file(store, SKIP_SOLVED_KEY, workdir / "skip_solved.json")
        overrides.setdefault("tasks", {})["skip_solved"] = str(solved)
    return with_overrides(config, overrides)
