"""A version published from 2 ranks' shards is the version one process publishes from the
same weights: the same tensors bit for bit, the same manifest entries (hashes, tied
weights, delta codecs, changed elements) and delta bytes, with each rank's data objects
in it; a follower rebuilds it from deltas as before, and a version that cannot be
published fails on every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from fleetrl.store.errors import WeightStoreError
from fleetrl.store.weights import Held, WeightStore, WeightStoreOptions
from fleetrl.trainer.parallel import Ranks, shard_model
from fleetrl.trainer.publish import owners, publish_version
from fleetrl.trainer.step import train_step
from tests.integration.trainer.ranks import at_ranks
from tests.integration.trainer.test_parallel import CONFIG, samples
from tests.unit.trainer.test_loss import tiny_model

OPTIONS = WeightStoreOptions(full_every=2, publish_dtype="bfloat16")
VERSIONS = 4


def publish_steps(ranks: Ranks, sharded: str, reference: str, out: str) -> None:
    """Publish VERSIONS versions of the tiny model from `ranks`' shards into `sharded`, an
    AdamW step between each; rank 0 publishes the same weights, gathered, into `reference`
    as one process. Each rank records which versions it could not republish."""
    torch.manual_seed(0)
    model = tiny_model()
    batch = samples(model)
    model = shard_model(model, ranks)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    weights, one = WeightStore(sharded, OPTIONS), WeightStore(reference, OPTIONS)
    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    for version in range(VERSIONS):
        if version:
            train_step(model, optimizer, batch, CONFIG, ranks=ranks)
        publish_version(weights, version, model, ranks)
        gathered = get_model_state_dict(model, options=whole)
        if ranks.leader:
            one.publish(version, gathered)
    try:
        publish_version(weights, VERSIONS - 1, model, ranks)
        refused = False
    except WeightStoreError:
        refused = True
    Path(out, f"rank{ranks.rank}.json").write_text(json.dumps({"refused": refused}))


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("publish")
    at_ranks(2, publish_steps, str(root / "sharded"), str(root / "one"), str(root))
    return root


def test_a_version_from_shards_is_the_version_one_process_publishes(stores: Path) -> None:
    sharded, one = WeightStore(str(stores / "sharded")), WeightStore(str(stores / "one"))
    assert sharded.latest() == one.latest() == VERSIONS - 1
    changed = 0
    for version in range(VERSIONS):
        ours, theirs = sharded.manifest(version), one.manifest(version)
        assert (ours.base, ours.full) == (theirs.base, theirs.full)
        assert list(ours.tensors) == list(theirs.tensors)  # state-dict order
        for name, entry in ours.tensors.items():
            other = theirs.tensors[name]
            assert (entry.dtype, entry.shape, entry.hash, entry.alias) == (
                other.dtype,
                other.shape,
                other.hash,
                other.alias,
            ), name
            assert (entry.full is None) == (other.full is None), name
            if entry.delta is not None or other.delta is not None:
                assert (entry.delta.codec, entry.delta.changed) == (
                    other.delta.codec,
                    other.delta.changed,
                ), name
                changed += entry.delta.changed
        assert ours.object_bytes("delta") == theirs.object_bytes("delta")
        assert {"-r0-", "-r1-"} <= {name[name.index("-r") :][:4] for name in ours.objects}
        fetched, expected = sharded.fetch(version).tensors, one.fetch(version).tensors
        for name, tensor in expected.items():
            assert torch.equal(fetched[name].view(torch.int16), tensor.view(torch.int16)), name
    assert changed > 0  # the steps moved weights: the deltas are not all "same"
    assert ours.tensors["lm_head.weight"].alias == "model.embed_tokens.weight"  # tied


def test_a_follower_takes_the_sharded_versions_as_deltas(stores: Path) -> None:
    weights = WeightStore(str(stores / "sharded"))
    held = weights.fetch(1)
    newest = weights.fetch(VERSIONS - 1, have=Held(1, held.tensors))
    assert newest.route == f"held 1 + {VERSIONS - 2} deltas"
    full = weights.fetch(VERSIONS - 1)
    assert all(torch.equal(full.tensors[n], t) for n, t in newest.tensors.items())


def test_a_version_that_cannot_be_published_fails_on_every_rank(stores: Path) -> None:
    for rank in (0, 1):
        assert json.loads((stores / f"rank{rank}.json").read_text()) == {"refused": True}


def test_each_tensor_has_one_owner_and_the_ranks_share_the_bytes() -> None:
    model = tiny_model()
    owner = owners(model, Ranks(0, 2))
    assert set(owner) == set(model.state_dict())
    assert owner["lm_head.weight"] == owner["model.embed_tokens.weight"]  # tied: one owner
    load = [0, 0]
    for name, tensor in model.state_dict().items():
        if name != "lm_head.weight":
            load[owner[name]] += tensor.numel()
    assert min(load) > 0.4 * sum(load)
    assert set(owners(model, Ranks(0, 1)).values()) == {0}
