"""Trainer checkpoints in the object store: exact round trip, atomic commit, bounded count."""

from __future__ import annotations

import random

import torch

from fleetrl.model.checkpoint import load_pretrained
from fleetrl.store.objectstore import open_store
from fleetrl.trainer.checkpoints import LATEST_KEY, load_checkpoint, save_checkpoint

torch.set_num_threads(1)


def trained_model(tiny_checkpoint, seed: int):
    model = load_pretrained(tiny_checkpoint, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(seed)
    model(torch.randint(0, 100, (1, 8))).logits.sum().backward()
    optimizer.step()
    return model, optimizer


def test_round_trip_restores_model_optimizer_rng_and_state(tmp_path, tiny_checkpoint):
    store = open_store(str(tmp_path / "store"))
    model, optimizer = trained_model(tiny_checkpoint, seed=1)
    random.seed(7)
    torch.manual_seed(7)
    save_checkpoint(store, 3, model, optimizer, {"step": 3, "version": 5}, [b"group"])
    expected_draws = (random.random(), torch.rand(3))

    fresh, fresh_optimizer = trained_model(tiny_checkpoint, seed=2)
    state, pending = load_checkpoint(store, fresh, fresh_optimizer)
    assert state == {"step": 3, "version": 5} and pending == [b"group"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name
    assert fresh_optimizer.state_dict()["state"][0]["exp_avg"].equal(
        optimizer.state_dict()["state"][0]["exp_avg"]
    )
    assert random.random() == expected_draws[0]
    assert torch.equal(torch.rand(3), expected_draws[1])


def test_uncommitted_checkpoint_is_never_used_and_old_ones_are_dropped(tmp_path, tiny_checkpoint):
    store = open_store(str(tmp_path / "store"))
    model, optimizer = trained_model(tiny_checkpoint, seed=1)
    assert load_checkpoint(store, model, optimizer) is None  # a fresh run
    for step in (1, 2, 3):
        save_checkpoint(store, step, model, optimizer, {"step": step}, [], keep=2)
    kept = {key.split("/")[1] for key in store.list("checkpoints/") if key != LATEST_KEY}
    assert kept == {"step_000002", "step_000003"}
    # A trainer killed while writing step 4: its objects are there, LATEST is not moved.
    store.put("checkpoints/step_000004/trainer_state.pt", b"half")
    state, _ = load_checkpoint(store, model, optimizer)
    assert state == {"step": 3}
