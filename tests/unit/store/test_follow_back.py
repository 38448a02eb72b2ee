"""Following a served version that goes back (real-time RL's rollback): a WeightFollower
with a `target` over a real WeightStore and a real tiny Engine rebuilds an older version
bit for bit from a full snapshot, and the gc keeps pinned versions (those a rollback may
return to). On a local folder; tests/env/store reruns it on SeaweedFS."""

from __future__ import annotations

import asyncio

import pytest
import torch

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.store.follower import WeightFollower
from fleetrl.store.weights import MissingWeights, WeightStore, WeightStoreOptions

torch.set_num_threads(1)
CONFIG = ModelConfig(
    vocab_size=300,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
)
# Which tensor each version changes: version 1 one, versions 2 and 3 others, so a rollback
# from 3 to 1 that kept any of 3's tensors (applying only what version 1's delta touched)
# would not be version 1.
CHANGED = {
    1: "model.norm.weight",
    2: "model.layers.0.mlp.up_proj.weight",
    3: "model.layers.0.self_attn.q_proj.weight",
}


def publish_versions(store: WeightStore) -> dict[int, dict[str, torch.Tensor]]:
    """Versions 0..3 of a bf16 model, each a few small changes to one tensor."""
    state = {k: v.to(torch.bfloat16) for k, v in init_model(CONFIG, seed=0).state_dict().items()}
    g = torch.Generator().manual_seed(1)
    published = {}
    for version in range(4):
        if version:
            name = CHANGED[version]
            state = dict(state)
            tensor = state[name].clone()
            flat = tensor.view(-1)
            picked = torch.randperm(flat.numel(), generator=g)[:5]
            flat[picked] += 0.5
            state[name] = tensor
        store.publish(version, state)
        published[version] = state
    return published


def same_bits(engine: Engine, state: dict[str, torch.Tensor]) -> bool:
    own = engine.model.state_dict()
    return own.keys() == state.keys() and all(
        torch.equal(own[k].view(torch.int16), state[k].view(torch.int16)) for k in state
    )


def test_a_follower_follows_its_target_back_from_a_full_snapshot(location):
    store = WeightStore(location.open(), WeightStoreOptions(full_every=3))
    published = publish_versions(store)
    assert [store.manifest(v).full for v in range(4)] == [True, False, False, True]
    target = {"version": 3}

    async def main() -> None:
        engine = Engine(init_model(CONFIG, seed=5, dtype=torch.bfloat16), max_model_len=64)
        follower = WeightFollower(store, engine, "serve-0", target=lambda: target["version"])
        record = await follower.sync_once()
        assert record is not None and record.version == 3 and engine.version == 3
        assert same_bits(engine, published[3])
        assert await follower.sync_once() is None  # on its target
        target["version"] = 1  # rolled back: deltas only go forward
        record = await follower.sync_once()
        assert record is not None and record.route == "full 0 + 1 delta"
        assert engine.version == 1 and follower.held == 1
        assert same_bits(engine, published[1])
        assert same_bits(engine, store.fetch(1).tensors)
        assert store.followers()["serve-0"].version == 1
        target["version"] = 2  # and forward again, from what it holds
        record = await follower.sync_once()
        assert record is not None and record.route == "held 1 + 1 delta"
        assert same_bits(engine, published[2])
        await engine.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_gc_keeps_a_pinned_version_fetchable(location):
    store = WeightStore(location.open(), WeightStoreOptions(full_every=3))
    published = publish_versions(store)
    store.register_follower("serve-0", 1)  # followers aside (ttl -1): only the pin keeps 1
    assert store.gc(keep_last=1, follower_ttl_s=-1, pinned=[1]) == []
    kept = store.fetch(1).tensors
    assert all(torch.equal(kept[k], published[1][k]) for k in published[1])
    assert store.gc(keep_last=1, follower_ttl_s=-1) == [0, 1, 2]
    with pytest.raises(MissingWeights):
        store.fetch(1)
    assert all(torch.equal(store.fetch(3).tensors[k], published[3][k]) for k in published[3])
