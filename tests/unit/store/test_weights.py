"""WeightStore on a local folder (tests/env/store reruns these on SeaweedFS): bit-exact
versions, verified hashes, crash safety, and garbage collection that keeps what followers
need."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from fleetrl.store.errors import CorruptWeights, MissingWeights, WeightStoreError
from fleetrl.store.manifest import LATEST_KEY, manifest_key, version_prefix
from fleetrl.store.weights import Held, WeightStore, WeightStoreOptions
from tests.unit.store.failing_store import FailingStore


class Policy:
    """float32 master weights, bf16 served ones, and small steps: the RL pattern."""

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.g = g
        self.master = {
            "embed.weight": torch.randn(96, 40, generator=g) * 0.02,
            "layers.0.proj.weight": torch.randn(33, 17, generator=g) * 0.02,
            "layers.0.norm.weight": torch.ones(40),
            "scalar": torch.tensor(0.5),
        }

    def step(self, lr: float = 3e-5) -> None:
        for name, value in self.master.items():
            if name != "layers.0.norm.weight":
                value.add_(torch.randn(value.shape, generator=self.g) * lr)

    def served(self) -> dict[str, torch.Tensor]:
        out = {k: v.to(torch.bfloat16) for k, v in self.master.items()}
        out["lm_head.weight"] = out["embed.weight"]  # tied, like Qwen3's small models
        out["fp32.bias"] = self.master["layers.0.proj.weight"][0].clone()
        out["steps"] = torch.tensor([len(self.master)], dtype=torch.int64)
        out["mask"] = self.master["embed.weight"][:5, :3] > 0
        out["empty"] = torch.zeros(0, 3, dtype=torch.float16)
        return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Bit-exact equality of two state dicts (dtype, shape and every byte)."""
    if a.keys() != b.keys():
        return False
    for name in a:
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return False
    return True


def clone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in state.items()}


def publish_steps(ws: WeightStore, n: int, policy: Policy | None = None, first: int = 0):
    policy = policy or Policy()
    states = []
    for version in range(first, first + n):
        if version > first:
            policy.step()
        states.append(clone(policy.served()))
        ws.publish(version, states[-1])
    return states


def test_every_version_round_trips_bit_exactly(location):
    ws = WeightStore(location.open(), WeightStoreOptions(full_every=3))
    assert ws.latest() is None
    states = publish_steps(ws, 7)
    assert ws.latest() == 6 and ws.versions() == list(range(7))
    reader = WeightStore(location.open())
    for version, state in enumerate(states):
        result = reader.fetch(version)
        assert same(result.tensors, state), version
        assert result.route.startswith(f"full {version - version % 3} ")
    # From a held version: deltas only, and the held tensors are not modified.
    held = clone(states[2])
    result = reader.fetch(5, have=Held(2, held))
    assert result.route == "held 2 + 3 deltas"
    assert same(result.tensors, states[5]) and same(held, states[2])
    assert result.bytes_read < reader.manifest(3).object_bytes("full")
    manifests = [reader.manifest(v) for v in range(7)]
    assert [m.full for m in manifests] == [True, False, False, True, False, False, True]
    assert all(m.base == v - 1 for v, m in enumerate(manifests) if v)
    assert manifests[4].tensors["lm_head.weight"].alias == "embed.weight"  # stored once
    assert manifests[4].tensors["layers.0.norm.weight"].delta.codec == "same"
    assert manifests[4].tensors["embed.weight"].delta.codec == "sparse"
    assert result.tensors["lm_head.weight"] is result.tensors["embed.weight"]


def test_changed_only_and_a_held_copy_in_another_dtype(location):
    ws = WeightStore(location.open())
    states = publish_steps(ws, 3)
    held = {k: v.float() if v.dtype == torch.bfloat16 else v.clone() for k, v in states[1].items()}
    before = clone(held)
    result = ws.fetch(2, have=Held(1, held), changed_only=True)
    changed = {n for n, e in ws.manifest(2).tensors.items() if e.alias or e.delta.codec != "same"}
    # bf16 tensors held as float32 are cast back (lossless) and come back bf16.
    cast = {k for k, v in states[1].items() if v.dtype == torch.bfloat16}
    assert set(result.tensors) == changed | cast
    assert same(result.tensors, {k: states[2][k] for k in result.tensors})
    assert same(held, before)


def test_new_removed_and_reshaped_tensors(location):
    ws = WeightStore(location.open())
    states = publish_steps(ws, 2)
    third = clone(states[1])
    del third["scalar"]
    third["added"] = torch.arange(10, dtype=torch.int32)
    third["layers.0.proj.weight"] = third["layers.0.proj.weight"].reshape(17, 33).clone()
    third["steps"] = third["steps"].to(torch.int32)
    ws.publish(2, third)
    codecs = {n: e.delta.codec for n, e in ws.manifest(2).tensors.items() if e.delta}
    assert codecs["added"] == codecs["layers.0.proj.weight"] == codecs["steps"] == "raw"
    assert same(ws.fetch(2, have=Held(1, states[1])).tensors, third)
    assert same(WeightStore(location.open()).fetch(2).tensors, third)


def test_corrupt_or_missing_objects_are_clear_errors_with_nothing_applied(location):
    ws = WeightStore(location.open(), WeightStoreOptions(full_every=10))
    states = publish_steps(ws, 3)
    store = ws.store
    held = clone(states[1])
    (delta_key,) = [k for k in store.list(version_prefix(2)) if "/delta-" in k]
    good = store.get(delta_key)
    for offset in (0, len(good) // 2, len(good) - 1):
        bad = bytearray(good)
        bad[offset] ^= 0x5A
        store.put(delta_key, bytes(bad))
        reader = WeightStore(location.open())
        with pytest.raises(CorruptWeights, match="version 2"):
            reader.fetch(2, have=Held(1, held))
        assert same(held, states[1])  # the caller's weights were never touched
    store.put(delta_key, good[:-3])  # truncated
    with pytest.raises(CorruptWeights, match="bytes"):
        WeightStore(location.open()).fetch(2)
    store.delete([delta_key])
    with pytest.raises(MissingWeights, match=re.escape(delta_key.rsplit("/", 1)[1])):
        WeightStore(location.open()).fetch(2)
    store.put(delta_key, good)
    (full_key,) = [k for k in store.list(version_prefix(0)) if "/full-" in k]
    snapshot = bytearray(store.get(full_key))
    snapshot[-1] ^= 1
    store.put(full_key, bytes(snapshot))
    with pytest.raises(CorruptWeights, match="does not match its hash"):
        WeightStore(location.open()).fetch(1)
    store.put(manifest_key(1), b"{not json")
    with pytest.raises(CorruptWeights, match="manifest"):
        WeightStore(location.open()).fetch(1)
    with pytest.raises(MissingWeights, match="version 9"):
        ws.fetch(9)
    # Held weights that are not the version claimed fail the hash check too.
    with pytest.raises(CorruptWeights, match="held weights"):
        WeightStore(location.open()).fetch(2, have=Held(1, states[0]))


@pytest.mark.parametrize("dies_at", ["manifest.json", "LATEST"])
def test_interrupted_publish_keeps_the_previous_version(location, dies_at):
    store = location.open()
    ws = WeightStore(store)
    policy = Policy()
    states = publish_steps(ws, 2, policy)
    policy.step()
    crashing = WeightStore(FailingStore(store, dies_at))  # loads its base from the store
    with pytest.raises(OSError, match="simulated crash"):
        crashing.publish(2, policy.served())
    assert ws.latest() == 1
    assert same(WeightStore(store).fetch().tensors, states[1])
    # The restarted publisher goes above the highest version any publisher reached (a
    # manifest without LATEST is one) and writes a delta against the committed one.
    restarted = WeightStore(store)
    assert restarted.highest() == (2 if dies_at == "LATEST" else 1)
    if dies_at == "LATEST":
        with pytest.raises(WeightStoreError, match="version 2 exists"):
            restarted.publish(2, policy.served())
    version = restarted.highest() + 1
    third = clone(policy.served())
    result = restarted.publish(version, third)
    assert result.base == 1 and not result.full
    assert same(WeightStore(store).fetch(version).tensors, third)
    assert restarted.latest() == version


def test_versions_are_immutable(location):
    ws = WeightStore(location.open())
    publish_steps(ws, 2)
    with pytest.raises(WeightStoreError, match="latest is 1"):
        ws.publish(1, Policy().served())


def test_restarted_publisher_continues_the_delta_chain_and_full_schedule(location):
    options = WeightStoreOptions(full_every=4)
    ws = WeightStore(location.open(), options)
    policy = Policy()
    publish_steps(ws, 3, policy)
    restarted = WeightStore(location.open(), options)
    for version in (3, 4):
        policy.step()
        result = restarted.publish(version, policy.served())
        assert result.base == version - 1
        assert result.full == (version == 4)
        assert result.delta_bytes < ws.manifest(0).object_bytes("full") / 2


def test_gc_keeps_the_last_versions_and_what_followers_need(location):
    ws = WeightStore(location.open(), WeightStoreOptions(full_every=4))
    states = publish_steps(ws, 12)  # full snapshots at 0, 4, 8
    store = ws.store
    ws.register_follower("engine-a", 5)
    assert ws.gc(keep_last=2) == [0, 1, 2, 3]  # engine-a needs 6..11, from held 5
    assert ws.versions() == list(range(4, 12))
    result = ws.fetch(11, have=Held(5, states[5]))
    assert result.route == "held 5 + 6 deltas" and same(result.tensors, states[11])
    for version in range(4, 12):
        assert same(WeightStore(store).fetch(version).tensors, states[version])
    with pytest.raises(MissingWeights):
        WeightStore(store).fetch(2)
    # A follower silent for longer than the TTL pins nothing; 8 anchors 10 and 11.
    assert ws.gc(keep_last=2, follower_ttl_s=-1) == [4, 5, 6, 7]
    assert same(WeightStore(store).fetch(10).tensors, states[10])
    # A publish that died before committing (12), then the trainer moved on (13):
    # gc removes the leftovers.
    store.put(version_prefix(12) + "delta-00000.bin", b"half")
    Policy().step()
    ws.publish(13, states[11])
    assert ws.gc(keep_last=3, follower_ttl_s=-1) == [12]  # 10, 11, 13 from 8
    assert not store.list(version_prefix(12))
    assert store.get(LATEST_KEY) == b"13\n"
    assert json.loads(store.get("weights/followers/engine-a.json"))["version"] == 5


def test_two_publishers_racing_for_one_version_one_wins_intact(location):
    # A zombie trainer and its successor publishing the same version at once: exactly one
    # manifest is created, and the winner's bytes are not overwritten by the loser's.
    store = location.open()
    publish_steps(WeightStore(store), 1)
    first, second = Policy(seed=1), Policy(seed=2)
    states = [first.served(), second.served()]
    barrier = threading.Barrier(2)

    def publish(state):
        publisher = WeightStore(location.open())
        publisher.latest()
        barrier.wait()
        try:
            publisher.publish(1, state)
            return True
        except WeightStoreError:
            return False

    with ThreadPoolExecutor(2) as pool:
        won = list(pool.map(publish, states))
    assert sorted(won) == [False, True]
    winner = states[won.index(True)]
    assert same(WeightStore(store).fetch(1).tensors, winner)
    assert WeightStore(store).latest() == 1


def test_publish_dtype_rounds_the_masters_once_per_version(location):
    """Versions are the float32 masters rounded to bf16 at each publish: steps too small to
    move a bf16 element accumulate in the masters and show once they cross a rounding
    boundary; non-floating tensors pass unchanged; the result reports the served size."""
    ws = WeightStore(location.open(), WeightStoreOptions(publish_dtype="bfloat16"))
    policy = Policy()
    masters = {**policy.master, "steps": torch.tensor([3]), "mask": torch.ones(2, dtype=torch.bool)}
    results = []
    for version in range(6):
        if version:
            policy.step(lr=1e-5)  # about a tenth of a bf16 unit at 0.02
        results.append(ws.publish(version, masters))
        fetched = WeightStore(location.open()).fetch(version).tensors
        expected = {
            k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in masters.items()
        }
        assert same(fetched, expected), version
    assert all(
        e.dtype == "bfloat16" for n, e in ws.manifest(5).tensors.items() if n in policy.master
    )
    # One full version in bf16, aliases once ("layers.0.norm.weight" and "scalar" differ).
    floats = sum(v.numel() for v in policy.master.values())
    assert results[0].nbytes == 2 * floats + 8 + 2
    assert results[0].unchanged_frac == 0  # no base: everything is new
    assert results[0].shipped_bytes == results[0].full_bytes + results[0].manifest_bytes
    assert all(0.5 < r.unchanged_frac < 1 for r in results[1:])  # most did not move
    for r in results[1:]:
        assert r.unchanged_frac == 1 - r.changed / r.elements
        assert r.shipped_bytes == r.delta_bytes + r.manifest_bytes < r.nbytes / 2


def test_float32_versions_change_every_element(new_location):
    """The same steps published as float32 leave almost no element unchanged, so the delta
    ships most bytes: why versions are served in bf16."""
    policy = Policy()
    as_bf16 = WeightStore(new_location().open(), WeightStoreOptions(publish_dtype="bfloat16"))
    as_f32 = WeightStore(new_location().open(), WeightStoreOptions(publish_dtype="float32"))
    steps = []
    for version in range(3):
        if version:
            policy.step(lr=1e-5)
        state = {k: v.clone() for k, v in policy.master.items() if k != "layers.0.norm.weight"}
        steps.append((as_bf16.publish(version, state), as_f32.publish(version, state)))
    for bf16, f32 in steps[1:]:
        assert f32.unchanged_frac < 0.01 < 0.5 < bf16.unchanged_frac
        assert f32.nbytes == 2 * bf16.nbytes
        assert f32.delta_bytes > 4 * bf16.delta_bytes


def test_publish_dtype_must_be_a_floating_dtype(location):
    with pytest.raises(ValueError, match="not a floating-point dtype"):
        WeightStore(location.open(), WeightStoreOptions(publish_dtype="int64"))
    with pytest.raises(ValueError, match="unknown dtype"):
        WeightStore(location.open(), WeightStoreOptions(publish_dtype="bf16"))


def test_steps_below_a_bf16_unit_add_up_in_the_masters(location):
    """A quarter of a bf16 unit per step: a bf16 copy updated in place would never move;
    rounded from the float32 masters at each publish, the third step shows."""
    ws = WeightStore(location.open(), WeightStoreOptions(publish_dtype="bfloat16"))
    master = {"w": torch.ones(64)}  # bf16 has 7 fraction bits: one unit at 1.0 is 2**-7
    unchanged = []
    for version in range(4):
        unchanged.append(ws.publish(version, master).unchanged_frac)
        master["w"] += 2**-9
    assert unchanged == [0.0, 1.0, 1.0, 0.0]  # 1 + 2**-8 is a tie: rounds to even, 1.0
    assert torch.equal(ws.fetch(3).tensors["w"], torch.full((64,), 1 + 2**-7, dtype=torch.bfloat16))
