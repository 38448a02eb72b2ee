"""A region in this process, with the tiny model, real sandboxes and the real verifier: an
episode that fails leaves its group to the others and travels in the report, the loop
that drives decoding never calls the store itself, and each weight swap is taken once
into the region's metrics and its next report."""

import asyncio
import threading
from dataclasses import asdict
from types import SimpleNamespace

from fleetrl.config_files import load_config
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.rollout import worker
from fleetrl.rollout.region import Region
from fleetrl.rollout.worker import GroupResult
from fleetrl.store.admission import write_grants
from fleetrl.store.control import signal_stop
from fleetrl.store.region_metrics import VersionApplied, read_region_metrics
from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.store.weights import WeightStore
from fleetrl.types import Trajectory


class LoopWatch:
    """An object store that notes each call made on the thread of the event loop."""

    def __init__(self, store, loop_thread: threading.Thread) -> None:
        self._store = store
        self._loop_thread = loop_thread
        self.on_loop: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if threading.current_thread() is self._loop_thread:
                self.on_loop.append(name)
            return attr(*args, **kwargs)

        return call


def test_a_failed_episode_leaves_its_group_and_is_reported(tmp_path, tiny_checkpoint, monkeypatch):
    config = load_config(
        overrides={
            "name": "r",
            "model": {"path": str(tiny_checkpoint)},
            # One group of 3 at version 0, then the gate closes until version 1.
            "rollout": {"group_size": 3, "max_concurrent_groups": 1},
            "trainer": {"groups_per_step": 1, "max_staleness": 0},
            "harness": {"max_turns": 2, "max_reply_tokens": 16},
        }
    )
    weights = WeightStore(str(tmp_path / "store"))
    weights.publish(0, load_pretrained(tiny_checkpoint).state_dict())
    write_grants(weights.store, {"region-0": 3})  # the trainer's grant: one group of 3
    starts = []

    def first_start_fails(*args, **kwargs):
        starts.append(1)
        if len(starts) == 1:
            raise OSError("no sandbox for you")
        return real_open(*args, **kwargs)

    real_open = worker.open_sandbox
    monkeypatch.setattr(worker, "open_sandbox", first_start_fails)
    region = Region(config, tmp_path, "region-0")
    watch = LoopWatch(region.weights.store, threading.main_thread())
    region.weights.store = region.channel.store = watch
    channel = TrajectoryChannel(str(tmp_path / "store"))

    async def scenario():
        running = asyncio.create_task(region.run())
        async with asyncio.timeout(300):
            while not await asyncio.to_thread(channel.count, "region-0"):
                assert not running.done(), running.exception()
                await asyncio.sleep(0.2)
            await asyncio.to_thread(signal_stop, channel.store)
            await running

    asyncio.run(scenario())
    (record,) = channel.read_new({})
    assert len(record.trajectories) == 2
    assert {t.group_id for t in record.trajectories} == {"region-0-0"}
    assert record.report.failed_episodes == {"OSError: no sandbox for you": 1}
    assert record.report.swaps == []  # the engine's first load is not a swap in flight
    assert watch.on_loop == []  # every store call of the loop went through a thread


def test_failures_of_a_dropped_group_travel_in_the_next_report(tmp_path, tiny_checkpoint):
    config = load_config(overrides={"model": {"path": str(tiny_checkpoint)}})
    region = Region(config, tmp_path, "region-0")
    sample = Trajectory("t", [], 1.0, "finish", turns=1, tool_calls=1, tool_errors=0, duration_s=2)

    async def send_two():
        await region._send(GroupResult([], {"OSError: no sandbox": 2}, dropped=True), 0)
        await region._send(GroupResult([sample, sample], {"ValueError: x": 1}), 0)

    asyncio.run(send_two())
    (record,) = TrajectoryChannel(str(tmp_path / "store")).read_new({})
    assert record.report.failed_episodes == {"OSError: no sandbox": 2, "ValueError: x": 1}
    assert record.report.episode_s == [2, 2]
    assert region.submitted == config.rollout.group_size  # a dropped group hands in nothing


def test_each_swap_goes_once_to_the_metrics_and_once_to_a_report(tmp_path, tiny_checkpoint):
    config = load_config(overrides={"model": {"path": str(tiny_checkpoint)}})
    region = Region(config, tmp_path, "region-0")
    swaps = [
        VersionApplied(version=v, time=float(v), pause_s=0.001 * v, fetch_s=0.1, bytes=10 * v,
                       route=f"held {v - 1} + 1 delta")
        for v in (1, 2, 3)
    ]  # fmt: skip
    follower = SimpleNamespace(records=swaps[:2])  # what the region reads of a follower
    sample = Trajectory("t", [], 1.0, "finish", turns=1, tool_calls=1, tool_errors=0, duration_s=2)

    async def two_groups():
        region.note_weights(follower, None)
        region.note_weights(follower, None)  # nothing new since
        await region._send(GroupResult([sample, sample], {}), 2)
        follower.records.append(swaps[2])
        region.note_weights(follower, None)
        await region._send(GroupResult([sample, sample], {}), 3)

    asyncio.run(two_groups())
    first, second = TrajectoryChannel(str(tmp_path / "store")).read_new({})
    assert first.report.swaps == swaps[:2] and second.report.swaps == swaps[2:]
    region.metrics.flush()
    # The region's metrics keep the follower's records whole, under their file keys.
    kept = read_region_metrics(region.weights.store)["region-0"]
    assert kept == [{"kind": "applied", **asdict(s)} for s in swaps]
    assert set(kept[0]) == {"kind", "version", "time", "pause_s", "fetch_s", "bytes", "route"}
