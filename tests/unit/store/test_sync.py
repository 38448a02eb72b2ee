"""Keeping engines in sync, with real Engines: WeightFollower applies versions bit-exactly,
in flight and verified; RegionRelay carries each version across the (throttled)
cross-region link once, whatever the number of engines in the region. On a local folder;
tests/env/store reruns these on SeaweedFS."""

from __future__ import annotations

import asyncio
import re

import torch

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3
from fleetrl.store.follower import WeightFollower
from fleetrl.store.manifest import LATEST_KEY
from fleetrl.store.objectstore import ThrottledStore
from fleetrl.store.relay import RegionRelay
from fleetrl.store.weights import WeightStore
from fleetrl.store.weights import WeightStoreOptions as Options
from fleetrl.types import SamplingParams

torch.set_num_threads(1)
CONFIG = ModelConfig(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


class Trainer:
    """float32 master weights; publishes bf16 served weights after each small step."""

    def __init__(self, store: WeightStore) -> None:
        self.store = store
        self.master = init_model(CONFIG, seed=0)
        self.g = torch.Generator().manual_seed(1)
        self.version = 0

    def served(self) -> dict[str, torch.Tensor]:
        return {k: v.to(torch.bfloat16) for k, v in self.master.state_dict().items()}

    def publish(self) -> dict[str, torch.Tensor]:
        state = self.served()
        self.store.publish(self.version, state)
        return state

    def step_and_publish(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            for p in self.master.parameters():
                p.add_(torch.randn(p.shape, generator=self.g) * 1e-5)
        self.version += 1
        return self.publish()


def engine_weights_equal(model: Qwen3, state: dict[str, torch.Tensor]) -> bool:
    own = model.state_dict()
    return own.keys() == state.keys() and all(
        torch.equal(own[k].view(torch.int16), state[k].view(torch.int16)) for k in state
    )


def new_engine(seed: int = 5) -> Engine:
    return Engine(init_model(CONFIG, seed=seed, dtype=torch.bfloat16), max_model_len=1100)


def test_follower_applies_each_version_bit_exactly(location):
    store = WeightStore(location.open())
    trainer = Trainer(store)
    first = trainer.publish()

    async def main() -> None:
        engine = new_engine()
        follower = WeightFollower(store, engine, name="engine-0", poll_s=0.01)
        record = await follower.sync_once()  # weights not from the store: full snapshot
        assert record is not None and record.route == "full 0 + 0 deltas"
        assert engine.version == 0 and engine_weights_equal(engine.model, first)
        assert await follower.sync_once() is None  # up to date
        for _ in range(2):
            state = trainer.step_and_publish()
            record = await follower.sync_once()
            assert record.route == f"held {trainer.version - 1} + 1 delta"
            assert engine_weights_equal(engine.model, state)
            assert 0 < record.bytes < store.manifest(0).object_bytes("full") / 4
            assert record.pause_s == engine.stats.last_update_pause_s > 0
        assert store.followers()["engine-0"].version == 2
        await engine.close()

    asyncio.run(main())


def test_follower_swaps_weights_while_a_request_is_in_flight(location):
    store = WeightStore(location.open())
    trainer = Trainer(store)
    trainer.publish()

    async def main() -> None:
        engine = new_engine()
        follower = WeightFollower(store, engine, name="engine-0")
        await follower.sync_once()
        request = asyncio.create_task(
            engine.generate([1, 2, 3], SamplingParams(max_tokens=1000, seed=0))
        )
        while engine.stats.generated_tokens < 5:
            await asyncio.sleep(0)
        state = trainer.step_and_publish()
        record = await follower.sync_once()
        completion = await request
        assert record is not None and engine_weights_equal(engine.model, state)
        versions = completion.versions
        assert versions[0] == 0 and versions[-1] == 1 and versions == sorted(versions)
        await engine.close()

    asyncio.run(main())


def test_follower_recovers_when_its_weights_are_not_what_it_thinks(location):
    store = WeightStore(location.open())
    trainer = Trainer(store)
    trainer.publish()

    async def main() -> None:
        engine = new_engine()
        follower = WeightFollower(store, engine, name="engine-0")
        await follower.sync_once()
        with torch.no_grad():  # someone else touched the weights
            engine.model.model.embed_tokens.weight[0, 0] += 1
        state = trainer.step_and_publish()
        record = await follower.sync_once()
        assert record.route == "full 0 + 1 delta"  # the held route failed its hash check
        assert engine_weights_equal(engine.model, state)
        await engine.close()

    asyncio.run(main())


def test_follower_run_loop_catches_up_to_the_latest(location):
    store = WeightStore(location.open())
    trainer = Trainer(store)
    trainer.publish()

    async def main() -> None:
        engine = new_engine()
        follower = WeightFollower(store, engine, name="engine-0", poll_s=0.02)
        stop = asyncio.Event()
        loop = asyncio.create_task(follower.run(stop))
        for _ in range(3):
            state = await asyncio.to_thread(trainer.step_and_publish)
        while follower.held != 3:
            await asyncio.sleep(0.01)
        stop.set()
        await loop
        assert engine_weights_equal(engine.model, state)
        assert follower.stats.syncs == len(follower.records) >= 2
        assert follower.stats.errors == []
        await engine.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_one_cross_region_copy_per_version_for_any_number_of_engines(new_location):
    origin_location, region_location = new_location(), new_location()
    trainer = Trainer(WeightStore(origin_location.open(), Options(full_every=2)))
    link = ThrottledStore(origin_location.open(), bytes_per_s=50e6, latency_s=0.002)
    region = WeightStore(region_location.open(), Options(full_every=3))
    relay = RegionRelay(WeightStore(link), region, name="region-a", keep_last=2)

    async def main() -> list[WeightFollower]:
        followers = [
            WeightFollower(WeightStore(region_location.open()), new_engine(seed), f"engine-{seed}")
            for seed in range(3)
        ]
        state = trainer.publish()
        for version in range(4):
            if version:
                state = trainer.step_and_publish()
            assert relay.sync_once().version == version
            assert relay.sync_once() is None  # nothing new
            for follower in followers:
                await follower.sync_once()
                assert engine_weights_equal(follower.engine.model, state)
        # An engine joining late starts from the region's own snapshot: no extra crossing.
        before = link.stats.bytes_down
        late = WeightFollower(WeightStore(region_location.open()), new_engine(9), "engine-9")
        await late.sync_once()
        assert engine_weights_equal(late.engine.model, state)
        assert link.stats.bytes_down == before
        for follower in [*followers, late]:
            await follower.engine.close()
        return followers

    followers = asyncio.run(main())
    origin = trainer.store
    data_reads = {
        re.sub(r"-[0-9a-f]{8}-", "-", key): n
        for key, n in link.stats.reads.items()
        if key != LATEST_KEY and not key.endswith("manifest.json")
    }
    # Exactly: version 0's snapshot once, then each later version's delta once; never
    # the origin's later snapshots (versions 2), whatever the number of engines.
    expected = {"weights/v00000000/full-00000.safetensors": 1}
    expected |= {f"weights/v{v:08d}/delta-00000.bin": 1 for v in (1, 2, 3)}
    assert data_reads == expected
    reads = link.stats.reads
    sizes = {key: len(origin.store.get(key)) for key in reads}  # LATEST: always 2 bytes
    assert link.stats.bytes_down == sum(sizes[key] * n for key, n in reads.items())
    pulled = sum(sizes[key] * n for key, n in reads.items() if key != LATEST_KEY)
    assert sum(record.bytes_in for record in relay.records) == pulled
    # Engines read the region only, deltas after their first snapshot.
    for follower in followers:
        assert [r.route for r in follower.records[1:]] == [f"held {v} + 1 delta" for v in range(3)]
    # The region writes its own snapshots (3; the origin's were 0 and 2), from deltas.
    assert [region.manifest(v).full for v in region.versions()] == [True, False, False, True]


def test_a_slow_link_slows_the_relay_not_the_engines(new_location):
    origin_location, region_location = new_location(), new_location()
    trainer = Trainer(WeightStore(origin_location.open()))
    trainer.publish()
    link = ThrottledStore(origin_location.open(), bytes_per_s=1e6, latency_s=0.05)
    relay = RegionRelay(WeightStore(link), WeightStore(region_location.open()), name="region-b")

    async def main() -> None:
        stop = asyncio.Event()
        relay.poll_s = 0.01
        running = asyncio.create_task(relay.run(stop))
        while relay.region.latest() != 0:
            await asyncio.sleep(0.01)
        stop.set()
        await running

    asyncio.run(asyncio.wait_for(main(), 60))
    record = relay.records[0]
    # The first copy is a full snapshot: at least its bytes over the bandwidth.
    assert record.fetch_s >= record.bytes_in / 1e6
    assert record.route == "full 0 + 0 deltas"


def test_a_float32_engine_serves_versions_published_in_bf16(location):
    """The trainer's setup: float32 masters published as bf16 (`publish_dtype`), a float32
    engine following them. The engine holds exactly the bf16 values, and its float32
    weights are a valid `have` for the next delta (cast back losslessly, hashes checked)."""
    store = WeightStore(location.open(), Options(publish_dtype="bfloat16"))
    master = init_model(CONFIG, seed=0)
    g = torch.Generator().manual_seed(1)

    async def main() -> None:
        engine = Engine(init_model(CONFIG, seed=5), max_model_len=1100)  # float32
        follower = WeightFollower(store, engine, name="engine-0", poll_s=0.01)
        for version in range(3):
            if version:
                with torch.no_grad():
                    for p in master.parameters():
                        p.add_(torch.randn(p.shape, generator=g) * 1e-5)
            store.publish(version, master.state_dict())
            record = await follower.sync_once()
            route = "full 0 + 0 deltas" if version == 0 else f"held {version - 1} + 1 delta"
            assert record is not None and record.route == route
            served = engine.model.state_dict()
            for name, value in master.state_dict().items():
                assert served[name].dtype == torch.float32
                assert torch.equal(served[name], value.to(torch.bfloat16).float()), name
        await engine.close()

    asyncio.run(main())
