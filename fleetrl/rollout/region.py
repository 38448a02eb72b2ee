"""A rollout region: an engine that follows the weight store and runs groups without pause.

    WeightFollower ── new version ─▶ Engine.update_weights (between decode steps)
                                           ▲ generate
    admission gate ─ start group ─▶ Rollouts.run_group (sandboxes, harness, verifier)
          ▲                                 │ finished group
          └── trainer progress (store) ◀────┴─▶ TrajectoryChannel.append (store)

Admission bounds staleness before the work is done (Fireworks' gate): with B samples per
optimizer step, staleness bound O and group size G, a group may start only while

    (held_version + O + 1) * B - (submitted - dropped) - in_flight * G >= G

so every admitted sample is due for training within O versions of the weights that start
it. With O = 0 it degenerates into the synchronous loop: a whole batch at version v, then
nothing until v + 1 is published. A region shares only the object store with the trainer;
it stops when the trainer writes the stop object.

Not covered: several regions sharing one admission budget (each region gates on its own
submissions; the trainer's staleness filter stays the hard bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from dataclasses import asdict, replace
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.envs.tasks import load_tasks
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.evaluate import resolve_checkpoint
from fleetrl.rollout.worker import RolloutConfig, Rollouts, rollout_engine
from fleetrl.store.follower import WeightFollower
from fleetrl.store.objectstore import ObjectNotFound
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.store.weights import WeightStore
from fleetrl.trainer.loop import PROGRESS_KEY, STOP_KEY, store_url
from fleetrl.types import SamplingParams, Trajectory


def rollout_config(config: RunConfig) -> RolloutConfig:
    """The RolloutConfig a region runs with."""
    rc = config.rollout
    base = RolloutConfig()
    harness = replace(
        base.harness,
        sampling=SamplingParams(temperature=rc.temperature),
        env_latency_s=rc.env_latency_s,
    )
    return replace(
        base,
        harness=harness,
        sandbox_backend=rc.sandbox_backend,
        max_concurrent=rc.group_size * rc.max_concurrent_groups,
        max_concurrent_verify=rc.max_concurrent_verify,
    )


class Region:
    """One region's loop: admission, groups in flight, results to the channel."""

    def __init__(self, config: RunConfig, run_dir: Path, name: str) -> None:
        self.config = config
        self.name = name
        self.weights = WeightStore(store_url(config, run_dir))
        self.channel = TrajectoryChannel(self.weights.store)
        tasks = config.tasks
        self.tasks = load_tasks(
            suite=None if tasks.tasks_dir else tasks.suite,
            tasks_dir=Path(tasks.tasks_dir) if tasks.tasks_dir else None,
            split=tasks.split,
        )
        self.rng = random.Random(f"{config.trainer.seed}-{name}")
        self.submitted = self.channel.count(name) * config.rollout.group_size
        self.syncs_since_report: list[dict[str, float]] = []

    def _store_json(self, key: str) -> dict | None:
        try:
            return json.loads(self.weights.store.get(key))
        except ObjectNotFound:
            return None

    def may_admit(self, held: int, in_flight: int) -> bool:
        """The admission gate (module docstring)."""
        tc, group = self.config.trainer, self.config.rollout.group_size
        if in_flight >= self.config.rollout.max_concurrent_groups:
            return False
        progress = self._store_json(PROGRESS_KEY) or {}
        batch = tc.groups_per_step * group
        counted = self.submitted - progress.get("dropped_samples", 0)
        return (held + tc.max_staleness + 1) * batch - counted - in_flight * group >= group

    async def run(self) -> None:
        """Run groups until the trainer says stop."""
        rc = self.config.rollout
        torch.set_num_threads(rc.threads)
        while self.weights.latest() is None:  # the trainer publishes version 0 first
            await asyncio.sleep(0.2)
        checkpoint = resolve_checkpoint(self.config.model.path)
        tokenizer = Tokenizer.from_pretrained(checkpoint)
        config = rollout_config(self.config)
        model = load_pretrained(checkpoint, dtype=torch.float32)
        engine = rollout_engine(model, config, self.config.trainer.seed)
        follower = WeightFollower(self.weights, engine, self.name, poll_s=0.2)
        await follower.sync_once()
        rollouts = Rollouts(engine, tokenizer, config)
        stop = asyncio.Event()
        following = asyncio.create_task(follower.run(stop))
        in_flight: set[asyncio.Task[list[Trajectory]]] = set()
        seen_syncs = len(follower.records)
        try:
            while not await asyncio.to_thread(self.weights.store.exists, STOP_KEY):
                held = follower.held or 0
                while self.may_admit(held, len(in_flight)):
                    task = self.rng.choice(self.tasks)
                    group_id = f"{self.name}-{self.submitted + len(in_flight) * rc.group_size}"
                    in_flight.add(
                        asyncio.create_task(rollouts.run_group(task, rc.group_size, group_id))
                    )
                if not in_flight:
                    await asyncio.sleep(0.2)
                    continue
                done, in_flight = await asyncio.wait(
                    in_flight, timeout=0.5, return_when=asyncio.FIRST_COMPLETED
                )
                new_syncs = follower.records[seen_syncs:]
                seen_syncs = len(follower.records)
                self.syncs_since_report += [asdict(r) for r in new_syncs]
                for finished in done:
                    group = finished.result()
                    report = RegionReport(
                        self.name,
                        follower.held or 0,
                        [t.duration_s for t in group],
                        [
                            {
                                "pause_s": s["pause_s"],
                                "fetch_s": s["fetch_s"],
                                "bytes": s["bytes_read"],
                            }
                            for s in self.syncs_since_report
                        ],
                    )
                    self.syncs_since_report = []
                    await asyncio.to_thread(self.channel.append, self.name, group, report)
                    self.submitted += rc.group_size
        finally:
            stop.set()
            for pending in in_flight:
                pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*in_flight, following, return_exceptions=True)
            await engine.close()


def run_region(config: RunConfig, run_dir: Path, name: str = "region-0") -> None:
    """Entry point of a region process."""
    asyncio.run(Region(config, run_dir, name).run())
