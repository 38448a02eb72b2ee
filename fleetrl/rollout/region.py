"""A rollout region: an engine that follows the weight store and runs groups without pause.

    WeightFollower ── new version ─▶ Engine.update_weights (between decode steps)
                                           ▲ generate
    admission gate ─ start group ─▶ Rollouts.run_group (sandboxes, harness, verifier)
          ▲                                 │ finished group
          └── grant (store) ◀── trainer ◀───┴─▶ TrajectoryChannel.append (store)
    heartbeat every HEARTBEAT_S ─▶ control/regions/NAME.json (store)
    and at each new version      ─▶ metrics/regions/NAME/… (store: versions applied and
                                    relayed, groups; `fleetrl.store.region_metrics`)
    optional: RegionRelay origin weights/ ─▶ the region's own bucket ─▶ WeightFollower
              (over a throttled link when `link_bytes_per_s` simulates a cross-region one)

The gate starts a group only within this region's grant of the fleet's one admission
budget (`fleetrl.store.admission`), so every admitted sample is due for training within
`trainer.max_staleness` versions whatever the number of regions; regions may join and
leave mid-run. A region shares only the object store with the trainer; it stops when the
trainer writes the stop object (`store.control`).

The loop that starts groups also drives the engine's decoding, so it never waits on the
store itself: every store call runs in a thread. An episode that fails does not end the
region: the group goes on without it or is dropped (`rollout.worker.settle_group`), and
the failures travel in the next report (`RegionReport.failed_episodes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.envs.tasks.suites import training_tasks
from fleetrl.model.checkpoint import resolve_checkpoint
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.worker import GroupResult, Rollouts, open_rollout_engine
from fleetrl.store.admission import Heartbeat, may_start, read_grants, write_heartbeat
from fleetrl.store.control import read_progress, stop_signalled, store_url
from fleetrl.store.follower import WeightFollower
from fleetrl.store.objectstore import ObjectStore
from fleetrl.store.region_metrics import (
    GroupDone,
    RegionMetricsWriter,
    VersionApplied,
    VersionRelayed,
)
from fleetrl.store.relay import RegionRelay
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.store.weights import WeightStore

HEARTBEAT_S = 2.0  # seconds between heartbeats; the trainer forgets a region after 30 s


class Region:
    """One region's loop: admission, groups in flight, results to the channel."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        name: str,
        regional_store: ObjectStore | str | None = None,
        link_bytes_per_s: float | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        """`regional_store`: the region's own weight store (a bucket in its region); a
        relay copies each version into it once and the engine follows it there, the copy
        limited to `link_bytes_per_s` when given (a simulated cross-region link). `store`:
        the run's store as the region's start-up opened it (None: opened from
        `config.store.url`)."""
        self.config = config
        self.name = name
        self.weights = WeightStore(store or store_url(config.store.url, run_dir))
        self.channel = TrajectoryChannel(self.weights.store)
        self.metrics = RegionMetricsWriter(self.weights.store, name)
        self.regional = WeightStore(regional_store) if regional_store else None
        self.link_bytes_per_s = link_bytes_per_s
        self.tasks = training_tasks(config.tasks)
        self.rng = random.Random(f"{config.trainer.seed}-{name}")
        self.started = self.channel.count(name)  # groups started (numbers their ids)
        # Samples handed to the trainer, group_size per group sent even when failures made
        # it smaller: the trainer takes a batch by groups.
        self.submitted = self.started * config.rollout.group_size
        self.swaps_since_report: list[VersionApplied] = []  # for the next report
        self.failures_since_report: Counter[str] = Counter()
        self.failed = 0  # episodes that raised, since this process started
        self.noted = (0, 0)  # follower and relay records already taken (note_weights)

    def may_admit(self, held: int, in_flight: int, grant: int, trainer_version: int) -> bool:
        """Whether one more group may start now: within this region's grant of the fleet's
        admission budget (`fleetrl.store.admission`)."""
        tc, rc = self.config.trainer, self.config.rollout
        return may_start(
            self.submitted,
            in_flight,
            grant,
            group_size=rc.group_size,
            max_groups=rc.max_concurrent_groups,
            held=held,
            trainer_version=trainer_version,
            max_staleness=tc.max_staleness,
        )

    def heartbeat(self, held: int, in_flight: int) -> None:
        """Tell the trainer (and `fleetrl status`) how this region stands, and write the
        metrics measured since the last heartbeat."""
        beat = Heartbeat(self.name, self.submitted, in_flight, held, time.time(), self.failed)
        write_heartbeat(self.weights.store, beat)
        self.metrics.flush()

    def note_weights(self, follower: WeightFollower, relay: RegionRelay | None) -> None:
        """Take the versions applied or relayed since the last call: queue their metrics
        records, and the versions applied for the next report too."""
        applied, relayed = self.noted
        swaps = follower.records[applied:]
        copies = relay.records[relayed:] if relay else []
        for s in swaps:
            self.metrics.append(s)
        self.swaps_since_report += swaps
        for r in copies:
            self.metrics.append(
                VersionRelayed(
                    version=r.version,
                    time=r.time,
                    bytes=r.bytes_in,
                    fetch_s=r.fetch_s,
                    publish_s=r.publish_s,
                    route=r.route,
                )
            )
        self.noted = (applied + len(swaps), relayed + len(copies))

    async def run(self) -> None:
        """Run groups until the trainer says stop."""
        rc = self.config.rollout
        torch.set_num_threads(rc.threads)
        while await asyncio.to_thread(self.weights.latest) is None:  # version 0 comes first
            await asyncio.sleep(0.2)
        checkpoint = resolve_checkpoint(self.config.model.path)
        tokenizer = Tokenizer.from_pretrained(checkpoint)
        harness = self.config.harness
        episodes = rc.group_size * rc.max_concurrent_groups
        engine = open_rollout_engine(checkpoint, harness, rc, episodes, self.config.trainer.seed)
        stop = asyncio.Event()
        relay, relaying = None, None
        if self.regional is not None:
            relay = RegionRelay(
                self.weights,
                self.regional,
                f"relay-{self.name}",
                poll_s=0.2,
                link_bytes_per_s=self.link_bytes_per_s,
            )
            await asyncio.to_thread(relay.sync_once)
            relaying = asyncio.create_task(relay.run(stop))
        follower = WeightFollower(self.regional or self.weights, engine, self.name, poll_s=0.2)
        await follower.sync_once()
        self.note_weights(follower, relay)
        # The first load is no swap in flight: the trainer's sync figures leave it out.
        self.swaps_since_report.clear()
        rollouts = Rollouts(engine, tokenizer, harness, rc, episodes, rc.max_concurrent_verify)
        following = asyncio.create_task(follower.run(stop))
        in_flight: set[asyncio.Task[GroupResult]] = set()
        group_ids: dict[asyncio.Task[GroupResult], str] = {}
        # The region announces itself once ready, even if the run ended while it loaded.
        await asyncio.to_thread(self.heartbeat, follower.held or 0, 0)
        last_beat, beat_held = time.monotonic(), follower.held or 0
        try:
            while not await asyncio.to_thread(stop_signalled, self.weights.store):
                held = follower.held or 0
                # A new version is told at once: the trainer and `fleetrl status` see it
                # without waiting out the heartbeat (one extra write per version).
                if held != beat_held or time.monotonic() - last_beat >= HEARTBEAT_S:
                    self.note_weights(follower, relay)
                    await asyncio.to_thread(self.heartbeat, held, len(in_flight))
                    last_beat, beat_held = time.monotonic(), held
                progress = await asyncio.to_thread(read_progress, self.weights.store)
                grant = (await asyncio.to_thread(read_grants, self.weights.store)).get(self.name, 0)
                while self.may_admit(held, len(in_flight), grant, progress.version):
                    task = self.rng.choice(self.tasks)
                    group_id = f"{self.name}-{self.started}"
                    self.started += 1
                    started = asyncio.create_task(rollouts.run_group(task, rc.group_size, group_id))
                    in_flight.add(started)
                    group_ids[started] = group_id
                if not in_flight:
                    await asyncio.sleep(0.2)
                    continue
                done, in_flight = await asyncio.wait(
                    in_flight, timeout=0.5, return_when=asyncio.FIRST_COMPLETED
                )
                self.note_weights(follower, relay)  # the swaps go with the groups done
                for finished in done:
                    result = finished.result()
                    self.note_group(group_ids.pop(finished), result)
                    await self._send(result, follower.held or 0)
        finally:
            stop.set()
            for pending in in_flight:
                pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                background = [following, *([relaying] if relaying else [])]
                await asyncio.gather(*in_flight, *background, return_exceptions=True)
            await rollouts.close()
            await engine.close()
            self.note_weights(follower, relay)
            await asyncio.to_thread(self.metrics.flush)

    def note_group(self, group_id: str, result: GroupResult) -> None:
        """Queue the metrics record of a finished (or dropped) group."""
        versions = {
            v for t in result.trajectories for seg in t.segments for v in seg.versions if v >= 0
        }
        self.metrics.append(
            GroupDone(
                group_id=group_id,
                time=time.time(),
                versions=sorted(versions),
                episode_s=[t.duration_s for t in result.trajectories],
                failures=dict(result.failures),
                dropped=result.dropped,
                rewards=[t.reward for t in result.trajectories],
                draws=result.draws,
                guided=result.guided,
            )
        )

    async def _send(self, result: GroupResult, held: int) -> None:
        """Append a finished group with its report; a dropped group sends nothing, its
        failures wait for the next report."""
        self.failures_since_report.update(result.failures)
        self.failed += sum(result.failures.values())
        if result.dropped:
            return
        report = RegionReport(
            self.name,
            held,
            [t.duration_s for t in result.trajectories],
            list(self.swaps_since_report),
            dict(self.failures_since_report),
        )
        await asyncio.to_thread(self.channel.append, self.name, result.trajectories, report)
        self.swaps_since_report.clear()
        self.failures_since_report.clear()
        self.submitted += self.config.rollout.group_size


def run_region(
    config: RunConfig,
    run_dir: Path,
    name: str = "region-0",
    regional_store: ObjectStore | str | None = None,
    link_bytes_per_s: float | None = None,
    store: ObjectStore | None = None,
) -> None:
    """Entry point of a region process (the stores as `Region` takes them)."""
    region = Region(config, run_dir, name, regional_store, link_bytes_per_s, store)
    asyncio.run(region.run())
