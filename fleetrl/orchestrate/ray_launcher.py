"""The Ray launcher behind `fleetrl train --launcher ray`: the run's roles as Ray actors.

    launcher (this process, run_dir) ─┬─ Role "trainer"      pinned to this node, workdir run_dir
                                      ├─ Role "region-west"  {"region-west": 1}, where declared
                                      └─ Role "region-east"  {"region-east": 1}
    each actor calls `trainer_role` / `region_role`; they share only the object store

Contract: the run already exists in its store (`orchestrate.run.create_run`, the caller's
job) at `config.store.url` (or run_dir/store). The trainer actor runs on the launcher's own
node with `run_dir` as its work folder, so metrics.jsonl (the progress shown here) and final/
land in `run_dir` exactly as with the local launcher; a region works in
run_dir/regions/NAME on whichever node holds it.

Placement: a cluster declares where each region runs with a custom resource per node whose
name starts with "region-" (`ray start --resources='{"region-west": 1}'`); the regions take
those names and one unit each, so every region gets its own node. A cluster that declares
none (a single machine) places regions by CPU, named region-0, region-1, …

Failures: Ray restarts a role's actor whose process dies and retries the role in it, also
when the role raises, MAX_RESTARTS times over the actor's life (the local launcher counts
crashes within a window instead). A trainer fenced off by a newer one returns FENCED_EXIT:
a result, not a crash, so it is not retried and fails the launch. After the trainer's last
step, regions get REGION_STOP_S to see the stop signal and exit, then they are killed.

Credentials: the launcher's AWS_* variables travel to every actor (its runtime_env), so the
roles reach the store as the launcher does; a node's own AWS_* settings are overridden.

Not covered: GPUs (roles request CPUs only, and Ray hides GPUs from an actor that requests
none), installing fleetrl on the nodes, evaluation and the report (the caller's step, as
after the local launcher).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig
from fleetrl.observe.metrics import read_metrics
from fleetrl.orchestrate.local import RunFailed
from fleetrl.orchestrate.roles import FENCED_EXIT, region_role, trainer_role
from fleetrl.store.control import store_url
from fleetrl.store.objectstore import open_store
from fleetrl.store.run import RunNotFound, read_config_text

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

REGION_RESOURCE_PREFIX = "region-"
# Lifetime bounds per actor: ample for the odd node hiccup or bad episode over a long run,
# while a role that dies right after each start (about a minute to load) fails the launch
# within minutes instead of looping forever.
MAX_RESTARTS = 10
REGION_STOP_S = 30.0  # how long regions get to exit on their own after the trainer is done


class RayMissing(ImportError):
    """Ray is not installed; the message says how to install it."""


def namespace(run_name: str) -> str:
    """The Ray namespace of a run's actors: `ray.get_actor(role, namespace=...)` finds them,
    and a second launch of the same run on the same cluster is refused by name."""
    return f"fleetrl-{run_name}"


def region_placements(
    regions: int, cluster: Mapping[str, float]
) -> list[tuple[str, dict[str, float]]]:
    """Each region's name and the custom resources its actor asks for, given the cluster's
    resources (`ray.cluster_resources()`): the first `regions` declared region resources in
    name order, one unit each, or (none declared) region-0…N-1 placed by CPU alone."""
    declared = sorted(key for key in cluster if key.startswith(REGION_RESOURCE_PREFIX))
    if not declared:
        return [(f"region-{i}", {}) for i in range(regions)]
    if regions > len(declared):
        raise ValueError(
            f"{regions} regions asked for, but the Ray cluster declares only {len(declared)} "
            f"region resources ({', '.join(declared)}): lower --regions or declare more"
        )
    return [(key, {key: 1.0}) for key in declared[:regions]]


class Role:
    """One role of the run inside a Ray actor's process: the trainer, or region `region`."""

    def __init__(self, url: str, workdir: str, region: str | None = None) -> None:
        self.url = url
        self.workdir = Path(workdir)
        self.region = region

    def pid(self) -> int:
        """The actor's process id (the actor answers while `run` works)."""
        return os.getpid()

    def run(self) -> int:
        """Run the role to its end; its exit code (0, or FENCED_EXIT for the trainer)."""
        if self.region is None:
            return trainer_role(self.url, self.workdir)
        return region_role(self.url, self.region, self.workdir)


def store_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's AWS_* variables (keys, region, endpoint), which each role needs to
    reach an S3 store from whichever node it lands on."""
    return {key: value for key, value in environ.items() if key.startswith("AWS_")}


def import_ray() -> ModuleType:
    """The `ray` module, or RayMissing when the optional extra is not installed."""
    try:
        import ray
    except ImportError as err:
        raise RayMissing("Ray is not installed: pip install 'fleetrl[ray]'") from err
    return ray


def run_ray(
    config: RunConfig,
    run_dir: Path,
    regions: int = 1,
    progress: bool = True,
    address: str | None = None,
) -> None:
    """Run the created run's trainer and `regions` regions as Ray actors until the trainer's
    steps are done. Joins the Ray session this process already has, or connects to the
    cluster at `address` (or RAY_ADDRESS; "auto": the one `ray start` runs on this machine),
    or starts a private local Ray sized for the roles; stops only what it started.

    Raises RunFailed when the store holds no run, a role keeps failing, the trainer is
    fenced off or the cluster cannot place the regions; RayMissing without Ray."""
    ray = import_ray()
    # Actors resolve paths against their own working folder, not this process's.
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    url = store_url(config.store.url, run_dir)
    if "://" not in url:  # a local folder
        url = str(Path(url).resolve())
    try:
        read_config_text(open_store(url))  # the run exists: fail here, not in every actor
    except RunNotFound as err:
        raise RunFailed(str(err)) from None
    started = not ray.is_initialized()
    if started and (address or os.environ.get("RAY_ADDRESS")):
        ray.init(address=address)
    elif started:
        # A private instance even where `ray start` runs here (RAY_ADDRESS=auto joins that).
        # Logical CPUs, one per thread a role asks for, whatever the machine has: the local
        # launcher runs the same roles on the same cores.
        cpus = config.trainer.threads + regions * config.rollout.threads
        ray.init(address="local", num_cpus=cpus, include_dashboard=False)
    try:
        actors = _start_roles(ray, config, url, run_dir, regions)
        try:
            # A role that raises is retried like one whose process died (max_task_retries).
            retried = {"retry_exceptions": True}
            runs = {name: h.run.options(**retried).remote() for name, h in actors.items()}
            code = _watch(ray, runs, run_dir / "metrics.jsonl", config.trainer.steps, progress)
            if code == FENCED_EXIT:
                raise RunFailed("the trainer was fenced off: a newer trainer of this run runs")
            # The trainer has written the stop object: regions finish their loop and exit.
            regions_left = [ref for name, ref in runs.items() if name != "trainer"]
            ray.wait(regions_left, num_returns=len(regions_left), timeout=REGION_STOP_S)
        finally:
            for handle in actors.values():
                ray.kill(handle)
    finally:
        if started:
            ray.shutdown()


def _start_roles(
    ray: ModuleType, config: RunConfig, url: str, run_dir: Path, regions: int
) -> dict[str, ActorHandle]:
    """Create the trainer's actor on this node and each region's where the cluster places
    it (their roles not started yet); RunFailed when that cannot be done."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    role = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(Role)
    # A second concurrent call, so that `pid` answers while `run` works.
    common = {"namespace": namespace(config.name), "max_concurrency": 2}
    if credentials := store_credentials(os.environ):
        common["runtime_env"] = {"env_vars": credentials}
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actors: dict[str, ActorHandle] = {}
    try:
        options = {"num_cpus": config.trainer.threads, "scheduling_strategy": here}
        actors["trainer"] = role.options(name="trainer", **options, **common).remote(
            url, str(run_dir)
        )
        for name, resources in region_placements(regions, ray.cluster_resources()):
            options = {"num_cpus": config.rollout.threads, "resources": resources}
            workdir = str(run_dir / "regions" / name)
            actors[name] = role.options(name=name, **options, **common).remote(url, workdir, name)
    except ValueError as err:  # too few region resources, or this run's actors exist already
        for handle in actors.values():
            ray.kill(handle)
        raise RunFailed(str(err)) from None
    return actors


def _watch(
    ray: ModuleType, runs: dict[str, ObjectRef], metrics: Path, steps: int, progress: bool
) -> int:
    """Wait for the trainer's exit code, showing its progress from metrics.jsonl;
    RunFailed when Ray has given up on a role."""
    watched = {ref: name for name, ref in runs.items()}
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}")]
    with Progress(*columns, TimeElapsedColumn(), disable=not progress) as bar:
        task = bar.add_task("training", total=steps, info="waiting for the first group")
        while True:
            # Waiting for all of them returns those done within the timeout: the poll period.
            done, _ = ray.wait(list(watched), num_returns=len(watched), timeout=0.5)
            # Read after the wait, so that a finished trainer's last step shows.
            records = read_metrics(metrics) if metrics.exists() else []
            train = [r for r in records if r["kind"] == "train"]
            if train:
                last = train[-1]
                info = f"reward {last['reward']:.2f}  staleness {last['staleness_mean']:.1f}"
                bar.update(task, completed=last["step"], info=info)
            for ref in done:
                name = watched.pop(ref)
                try:
                    code = ray.get(ref)
                except ray.exceptions.RayError as err:
                    raise RunFailed(
                        f"{name} failed and Ray gave up restarting it:\n{err}"
                    ) from None
                if name == "trainer":
                    return code
