"""The Ray launcher behind `fleetrl train --launcher ray`: the run's roles as Ray actors.

    launcher (this process, run_dir) ─┬─ Role "trainer"      pinned to this node, workdir run_dir
                                      ├─ Role "region-west"  {"region-west": 1}, where declared
                                      └─ Role "region-east"  {"region-east": 1}
    each actor calls `trainer_role` / `region_role`; they share only the object store

A trainer at N ranks (`--trainer-ranks N`) is N actors instead of "trainer", one process
group (`trainer.parallel`) that meets at rank 0's node, on a port rank 0's actor picked:

    launcher ─┬─ TrainerRank "trainer-0"      pinned to this node, workdir run_dir
              ├─ TrainerRank "trainer-1"      wherever Ray places it, workdir run_dir
              └─ …  "trainer-{N-1}"           each RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT

Contract: the run already exists in its store (`orchestrate.run.create_run`, the caller's
job) at `config.store.url` (or run_dir/store). The trainer actor (rank 0's at N ranks) runs
on the launcher's own node with `run_dir` as its work folder, so metrics.jsonl (the progress
shown here) and final/ land in `run_dir` exactly as with the local launcher; the other ranks
copy the run into the same path on their own nodes (ranks on one node share it: the run's
copies are written whole, once); a region works in run_dir/regions/NAME on whichever node
holds it. Rank 0's node must accept the other ranks' connections on the picked port.

Placement: a cluster declares where each region runs with a custom resource per node whose
name starts with "region-" (`ray start --resources='{"region-west": 1}'`); the regions take
those names and one unit each, so every region gets its own node. A cluster that declares
none (a single machine) places regions by CPU, named region-0, region-1, …

Failures: Ray restarts a role's actor whose process dies and retries the role in it, also
when the role raises, MAX_RESTARTS times over the actor's life (the local launcher counts
crashes within a window instead). Not so the ranks of a trainer at N ranks: a rank started
again alone could not rejoin the others' process group. A rank whose process dies or whose
role raises ends its incarnation: the launcher kills every rank's actor and starts a fresh
set (a new port), which resumes from the store's last checkpoint, resharded; MAX_RESTARTS
such restarts over the launch. A trainer fenced off by a newer one returns FENCED_EXIT (at
N ranks, rank 0's exit code is the trainer's): a result, not a crash, so it is not retried
and fails the launch. After the trainer's last step, regions (and the other ranks) get
REGION_STOP_S to see the stop signal and exit, then they are killed.

Credentials: the launcher's AWS_* variables travel to every actor (its runtime_env), so the
roles reach the store as the launcher does; a node's own AWS_* settings are overridden.

Not covered: GPUs (roles request CPUs only, and Ray hides GPUs from an actor that requests
none), installing fleetrl on the nodes, evaluation and the report (the caller's step, as
after the local launcher).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

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
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

REGION_RESOURCE_PREFIX = "region-"
# Lifetime bounds per actor (per launch for the ranks of a trainer at N ranks): ample for
# the odd node hiccup or bad episode over a long run, while a role that dies right after
# each start (about a minute to load) fails the launch within minutes instead of looping
# forever.
MAX_RESTARTS = 10
REGION_STOP_S = 30.0  # how long regions get to exit on their own after the trainer is done
KILL_WAIT_S = 30.0  # how long killed trainer actors get to be gone before new ones start


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


class TrainerRank:
    """One rank of a trainer at N ranks inside a Ray actor's process."""

    def __init__(self, url: str, workdir: str) -> None:
        self.url = url
        self.workdir = Path(workdir)

    def pid(self) -> int:
        """The actor's process id (the actor answers while `run` works)."""
        return os.getpid()

    def meeting_point(self) -> tuple[str, int]:
        """This node's IP address and a TCP port free on it now: rank 0's are where the
        ranks' process group meets (MASTER_ADDR, MASTER_PORT)."""
        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def run(self, rank: int, world: int, address: str, port: int) -> int:
        """Run rank `rank` of `world` to its end, the group meeting at `address`:`port`;
        its exit code (0, or FENCED_EXIT). The environment is torchrun's, which the
        trainer reads (`trainer.parallel.init_ranks`); LOCAL_RANK is 0, as nothing picks a
        device by it (roles request CPUs only)."""
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK="0",
            MASTER_ADDR=address,
            MASTER_PORT=str(port),
        )
        return trainer_role(self.url, self.workdir)


class TrainerActors:
    """The launcher's side of the trainer. At one rank: actor "trainer" (a Role), which Ray
    restarts itself. At N ranks: actors "trainer-0".."trainer-{N-1}" (TrainerRank), started
    together; when one fails, all of them are killed and a fresh set starts."""

    def __init__(
        self,
        ray: ModuleType,
        world: int,
        url: str,
        run_dir: Path,
        threads: int,
        common: dict[str, Any],
    ) -> None:
        self.ray = ray
        self.world = world
        self.url = url
        self.run_dir = run_dir
        self.threads = threads  # each actor's CPUs
        self.common = common  # what every actor of the run is created with
        self.names = ["trainer"] if world == 1 else [f"trainer-{i}" for i in range(world)]
        self.leader = self.names[0]  # its exit code is the trainer's
        self.actors: list[ActorHandle] = []
        self.runs: dict[ObjectRef, str] = {}  # each actor's run, and the actor's name
        self.restarts = 0  # of the whole set, at N ranks

    def start(self) -> None:
        """Create the actors, the leader pinned to this node, and start their runs;
        RunFailed when this run's trainer actors exist already (a second launch)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.ray.get_runtime_context().get_node_id()
        here = NodeAffinitySchedulingStrategy(node, soft=False)
        try:
            if self.world == 1:
                self._start_one(here)
            else:
                self._start_ranks(here)
        except ValueError as err:
            raise RunFailed(str(err)) from None

    def _start_one(self, here: NodeAffinitySchedulingStrategy) -> None:
        role = self.ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(Role)
        options = {"num_cpus": self.threads, "scheduling_strategy": here, **self.common}
        actor = role.options(name=self.leader, **options).remote(self.url, str(self.run_dir))
        self.actors = [actor]
        # A role that raises is retried like one whose process died (max_task_retries).
        self.runs = {actor.run.options(retry_exceptions=True).remote(): self.leader}

    def _start_ranks(self, here: NodeAffinitySchedulingStrategy) -> None:
        rank_actor = self.ray.remote(max_restarts=0)(TrainerRank)  # the set restarts, not one
        self.actors = []
        for rank, name in enumerate(self.names):
            placement = {"scheduling_strategy": here} if rank == 0 else {}
            options = {"num_cpus": self.threads, **placement, **self.common}
            self.actors.append(
                rank_actor.options(name=name, **options).remote(self.url, str(self.run_dir))
            )
        address, port = self.ray.get(self.actors[0].meeting_point.remote())
        self.runs = {
            actor.run.remote(rank, self.world, address, port): name
            for rank, (actor, name) in enumerate(zip(self.actors, self.names, strict=True))
        }

    def failed(self, name: str, err: Exception) -> None:
        """Actor `name`'s run failed with `err`. At N ranks: kill every rank and start a
        fresh set, a new incarnation that resumes from the store's last checkpoint, or
        RunFailed once MAX_RESTARTS are spent. At one rank Ray has retried it already:
        RunFailed."""
        if self.world == 1:
            raise RunFailed(f"{name} failed and Ray gave up restarting it:\n{err}") from None
        if self.restarts == MAX_RESTARTS:
            raise RunFailed(
                f"{name} failed after {self.restarts} restarts of the trainer's "
                f"{self.world} ranks:\n{err}"
            ) from None
        self.kill()
        self.restarts += 1
        self.start()

    def kill(self) -> None:
        """Kill the actors and wait (up to KILL_WAIT_S) for their runs to end, so that no
        rank of this set still works once the next set starts."""
        for actor in self.actors:
            self.ray.kill(actor)
        runs = list(self.runs)
        self.ray.wait(runs, num_returns=len(runs), timeout=KILL_WAIT_S)


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
    trainer_ranks: int = 1,
) -> None:
    """Run the created run's trainer (at `trainer_ranks` ranks) and `regions` regions as Ray
    actors until the trainer's steps are done. Joins the Ray session this process already
    has, or connects to the cluster at `address` (or RAY_ADDRESS; "auto": the one
    `ray start` runs on this machine), or starts a private local Ray sized for the roles;
    stops only what it started.

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
        cpus = trainer_ranks * config.trainer.threads + regions * config.rollout.threads
        ray.init(address="local", num_cpus=cpus, include_dashboard=False)
    try:
        common = _common_options(config)
        region_actors = _start_regions(ray, config, url, run_dir, regions, common)
        trainer = TrainerActors(ray, trainer_ranks, url, run_dir, config.trainer.threads, common)
        try:
            trainer.start()
            # A region that raises is retried like one whose process died (max_task_retries).
            region_runs = {
                handle.run.options(retry_exceptions=True).remote(): name
                for name, handle in region_actors.items()
            }
            metrics = run_dir / "metrics.jsonl"
            code = _watch(ray, trainer, region_runs, metrics, config.trainer.steps, progress)
            if code == FENCED_EXIT:
                raise RunFailed("the trainer was fenced off: a newer trainer of this run runs")
            # The trainer has written the stop object: regions finish their loop and exit;
            # the other ranks have little left to do.
            others = region_runs | trainer.runs
            left = [ref for ref, name in others.items() if name != trainer.leader]
            ray.wait(left, num_returns=len(left), timeout=REGION_STOP_S)
        finally:
            trainer.kill()
            for handle in region_actors.values():
                ray.kill(handle)
    finally:
        if started:
            ray.shutdown()


def _common_options(config: RunConfig) -> dict[str, Any]:
    """What every actor of the run is created with: the run's namespace, a second
    concurrent call (so that `pid` answers while `run` works), the store's credentials."""
    common: dict[str, Any] = {"namespace": namespace(config.name), "max_concurrency": 2}
    if credentials := store_credentials(os.environ):
        common["runtime_env"] = {"env_vars": credentials}
    return common


def _start_regions(
    ray: ModuleType,
    config: RunConfig,
    url: str,
    run_dir: Path,
    regions: int,
    common: dict[str, Any],
) -> dict[str, ActorHandle]:
    """Create each region's actor where the cluster places it (its role not started yet);
    RunFailed when that cannot be done."""
    role = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(Role)
    actors: dict[str, ActorHandle] = {}
    try:
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
    ray: ModuleType,
    trainer: TrainerActors,
    regions: dict[ObjectRef, str],
    metrics: Path,
    steps: int,
    progress: bool,
) -> int:
    """Wait for the trainer's exit code, showing its progress from metrics.jsonl and
    restarting a trainer at N ranks whose rank failed; RunFailed when a role cannot go on."""
    watched = regions | trainer.runs
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
                    if name not in trainer.names:
                        raise RunFailed(
                            f"{name} failed and Ray gave up restarting it:\n{err}"
                        ) from None
                    trainer.failed(name, err)
                    watched = {r: n for r, n in watched.items() if n not in trainer.names}
                    watched |= trainer.runs
                    break  # the rest of `done` may be the old set's runs
                if name == trainer.leader:
                    return code
