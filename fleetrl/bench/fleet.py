"""`fleetrl bench fleet`: a trainer and three regions, one slow, over throttled links.

Two legs on the same workload, one after the other, each as real processes over a fresh
store (`fleetrl trainer` and `fleetrl region`, as on separate machines):

    trainer ── origin store (a local folder) ═══ link, --link-mbps ═══▶ relay ─▶ regional
                                                                              store ─▶ engine
    region-0: slow (every tool turn waits env_latency_s more), region-1, region-2

- "none": all regions run to the end;
- "killed": region-1 is killed (SIGKILL) once the trainer has done half its steps and the
  region has served a trained version, and is not restarted: the fleet finishes on two
  regions. Its unused admission grant returns to
  the others when its heartbeat expires (30 s), which the figure includes.

Each region keeps its own weight store (a local folder standing in for a bucket in its
region) fed by its relay over a simulated link of `link_mbps` megabits/s, so every version
crosses "regions" once per region. Figures come from the trainer's metrics.jsonl and the
regions' own metrics in the store (`fleetrl.store.region_metrics`):

- cross-region bytes per version: what each relay pulled over its link, per version after
  its first copy, against the trainer's delta size (about one delta per region is ideal);
- time from the trainer's publish of v (its manifest's creation plus the publish time)
  until each region's engine serves v or newer, and until every region does (p50/p95 over
  versions; a killed region counts only before its death, a region that stopped before
  the last versions counts for those it reached);
- trainer idle fraction, the staleness histogram (sum of the `train` records': every
  sample a step read, those dynamic sampling skipped for want of signal included),
  samples/s (those same samples) between the first and the last optimizer step, and
  samples/s killed / none. `trained_samples` counts only the samples of the batches.

Not covered: real network links or separate machines (local folders, one machine), a
region that restarts after its death (`tests/integration/orchestrate/test_fleet_faults.py`).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleetrl.config import RunConfig
from fleetrl.config_files import with_overrides
from fleetrl.observe.metrics import read_metrics
from fleetrl.orchestrate.local import RunFailed, prepare_run
from fleetrl.store.control import read_progress
from fleetrl.store.objectstore import open_store
from fleetrl.store.region_metrics import read_region_metrics
from fleetrl.store.weights import WeightStore

KILLED = "region-1"  # the region the "killed" leg loses: a fast one, the costlier loss
LEG_TIMEOUT_S = 1800.0


@dataclass
class FleetWorkload:
    """What both legs run."""

    steps: int = 8  # optimizer steps per leg
    groups_per_step: int = 4  # P
    group_size: int = 4  # G
    max_staleness: int = 2  # the trainer's bound
    regions: int = 3  # region-0 is the slow one
    link_mbps: float = 32.0  # each region's link from the origin store, megabits/s
    slow_latency_s: float = 2.0  # region-0's mean extra environment wait per tool turn


def _percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _region_argv(url: str, run_dir: Path, name: str, w: FleetWorkload) -> list[str]:
    argv = [sys.executable, "-m", "fleetrl.cli", "region", "--store", url, "--name", name]
    argv += ["--workdir", str(run_dir / "regions" / name)]
    argv += ["--regional-store", str(run_dir / "regional" / name)]
    argv += ["--link-mbps", str(w.link_mbps)]
    if name == "region-0":
        argv += ["--set", f"rollout.env_latency_s={w.slow_latency_s}"]
    return argv


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _trained_steps(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    train = [r for r in read_metrics(metrics) if r["kind"] == "train"] if metrics.exists() else []
    return train[-1]["step"] if train else 0


def _served_a_trained_version(url: str, name: str) -> bool:
    """Whether region `name` has recorded serving a version newer than 0."""
    records = read_region_metrics(open_store(url)).get(name, [])
    return any(r["kind"] == "applied" and r["version"] > 0 for r in records)


def _run_leg(
    config: RunConfig, run_dir: Path, w: FleetWorkload, kill: str | None, echo: bool
) -> dict[str, float]:
    """Run the trainer and the regions to the end; kill `kill` halfway, once it has served a
    trained version (so that it has figures of its own). Returns the unix times of deaths by
    region."""
    url = prepare_run(config, run_dir)
    logs = run_dir / "logs"
    names = [f"region-{i}" for i in range(w.regions)]
    trainer_argv = [sys.executable, "-m", "fleetrl.cli", "trainer", "--store", url]
    argvs = {"trainer": [*trainer_argv, "--workdir", str(run_dir)]}
    argvs |= {name: _region_argv(url, run_dir, name, w) for name in names}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    for name, argv in argvs.items():
        with open(logs / f"{name}.log", "ab") as log:
            processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    deaths: dict[str, float] = {}
    deadline = time.monotonic() + LEG_TIMEOUT_S
    try:
        while processes["trainer"].poll() is None:
            for name, process in processes.items():
                code = process.poll()
                if code not in (None, 0) and name not in deaths:
                    raise RunFailed(f"{name} exited with {code}:\n{_tail(logs / f'{name}.log')}")
            if (
                kill
                and kill not in deaths
                and _trained_steps(run_dir) >= w.steps // 2
                and _served_a_trained_version(url, kill)
            ):
                os.kill(processes[kill].pid, signal.SIGKILL)
                processes[kill].wait()
                deaths[kill] = time.time()
                if echo:
                    print(f"  killed {kill} (SIGKILL) after step {_trained_steps(run_dir)}")
            if time.monotonic() > deadline:
                raise RunFailed(f"the leg did not finish within {LEG_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        if processes["trainer"].returncode != 0:
            raise RunFailed(f"trainer failed:\n{_tail(logs / 'trainer.log')}")
        for name in names:  # regions stop on the trainer's stop signal
            processes[name].wait(60)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return deaths


def _publish_times(store_url: str, train: list[dict[str, Any]]) -> dict[int, float]:
    """Unix time each trained version was committed: its manifest's creation (the start of
    the publish) plus the trainer's publish time."""
    weights = WeightStore(store_url)
    return {r["version"]: weights.manifest(r["version"]).created + r["publish_s"] for r in train}


def _held_from(applied: list[dict[str, Any]], version: int) -> float | None:
    """When a region first served `version` or newer (None: never)."""
    return min((r["time"] for r in applied if r["version"] >= version), default=None)


def _measure(run_dir: Path, deaths: dict[str, float]) -> dict[str, Any]:
    """The leg's figures from metrics.jsonl and the regions' records in the store."""
    url = str(run_dir / "store")
    train = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "train"]
    syncs = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "sync"]
    steady = train[1:] or train
    span = train[-1]["time"] - train[0]["time"]
    hist: list[int] = []
    for record in train:
        for age, count in enumerate(record["staleness_hist"]):
            hist += [0] * (age + 1 - len(hist))
            hist[age] += count
    published = _publish_times(url, train)
    regions = read_region_metrics(open_store(url))
    per_region: dict[str, Any] = {}
    reach: dict[str, dict[int, float]] = {}  # region -> version -> seconds to serve it
    for name in sorted(regions):
        records = regions[name]
        applied = [r for r in records if r["kind"] == "applied"]
        relayed = [r for r in records if r["kind"] == "relayed"]
        groups = [r for r in records if r["kind"] == "group"]
        reach[name] = {
            v: held - t
            for v, t in published.items()
            if (held := _held_from(applied, v)) is not None
        }
        # After the first copy (a full snapshot or a catch-up), each copy carries the deltas
        # since the previous one: bytes over the versions they cover.
        steady_copies, covered = relayed[1:], 0
        if steady_copies:
            covered = steady_copies[-1]["version"] - relayed[0]["version"]
        latencies = list(reach[name].values())
        per_region[name] = {
            "killed": name in deaths,
            "last_version_served": max((r["version"] for r in applied), default=None),
            "versions_reached": len(reach[name]),
            "hold_s_p50": _percentile(latencies, 0.5),
            "hold_s_p95": _percentile(latencies, 0.95),
            "first_copy_bytes": relayed[0]["bytes"] if relayed else 0,
            "cross_region_bytes_per_version": (
                sum(r["bytes"] for r in steady_copies) / covered if covered else None
            ),
            "groups_sent": sum(not g["dropped"] for g in groups),
            "episode_s_mean": statistics.mean([s for g in groups for s in g["episode_s"]] or [0.0]),
        }
    live = [n for n in reach if n not in deaths]
    everyone = [
        max(reach[n][v] for n in live) for v in published if all(v in reach[n] for n in live)
    ]
    per_version = [r["cross_region_bytes_per_version"] for r in per_region.values()]
    delta = statistics.mean(r["sync_bytes"] for r in syncs)
    total = sum(b for b in per_version if b is not None)
    return {
        "samples_per_s": sum(sum(r["staleness_hist"]) for r in steady) / span if span else 0.0,
        "samples": sum(hist),
        "trained_samples": read_progress(open_store(url)).trained_samples,
        "staleness_hist": hist,
        "trainer_idle_frac": statistics.mean(r["trainer_idle_frac"] for r in steady),
        "dropped_samples": train[-1]["dropped_samples"],
        "versions": len(published),
        "all_hold_s_p50": _percentile(everyone, 0.5),
        "all_hold_s_p95": _percentile(everyone, 0.95),
        "versions_all_reached": len(everyone),
        "delta_bytes_per_version": delta,
        "cross_region_bytes_per_version_total": total,
        "deltas_per_version": total / delta if delta else None,
        "regions": per_region,
    }


def run_fleet_bench(base: RunConfig, w: FleetWorkload, echo: bool = True) -> dict[str, Any]:
    """Run the "none" then the "killed" leg from the `base` configuration; return both legs'
    figures and `killed_vs_none` (samples/s of the killed leg / of the other)."""
    overrides = {
        "trainer": {
            "steps": w.steps,
            "groups_per_step": w.groups_per_step,
            "max_staleness": w.max_staleness,
        },
        "rollout": {"group_size": w.group_size, "max_concurrent_groups": w.groups_per_step},
        "eval": {"enabled": False},
        "store": {"url": "", "collect_garbage": False},  # publish times come from manifests
    }
    result: dict[str, Any] = {}
    for leg, kill in (("none", None), ("killed", KILLED)):
        config = with_overrides(base, overrides | {"name": f"bench-fleet-{leg}"})
        with tempfile.TemporaryDirectory(prefix=f"fleetrl-fleet-{leg}-") as tmp:
            run_dir = Path(tmp) / config.name
            if echo:
                print(f"leg {leg!r}: trainer + {w.regions} regions, {w.steps} steps ...")
            started = time.monotonic()
            deaths = _run_leg(config, run_dir, w, kill, echo)
            result[leg] = _measure(run_dir, deaths) | {"wall_s": time.monotonic() - started}
    result["killed_vs_none"] = result["killed"]["samples_per_s"] / result["none"]["samples_per_s"]
    result["config"] = asdict(w) | {
        "model": base.model.path,
        "killed_region": KILLED,
        "stores": "local folders on one machine: the origin and one per region",
    }
    return result
