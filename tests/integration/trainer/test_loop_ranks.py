"""The trainer loop at 2 ranks (two real processes over gloo): it trains each group once,
its checkpoint resumes at 1 rank to the weights a 1-rank trainer reaches, and a zombie is
fenced off on every rank before it publishes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.store.control import Fenced
from fleetrl.store.weights import WeightStore
from fleetrl.trainer.loop import run_trainer
from fleetrl.trainer.parallel import Ranks
from tests.integration.trainer.ranks import at_ranks
from tests.integration.trainer.test_loop import feed, succeed_a_zombie


def _train(ranks: Ranks, config: RunConfig, run: str, out: str) -> None:
    try:
        state = run_trainer(config, Path(run), poll_s=0.05, ranks=ranks)
        outcome = {"step": state.step, "trained_samples": state.trained_samples}
    except Fenced:
        outcome = {"fenced": True}
    Path(out, f"rank{ranks.rank}.json").write_text(json.dumps(outcome))


def outcomes(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_ranks_train_each_group_once_and_resume_at_one(tmp_path, config_for):
    # float32 matmuls: under bf16 autocast, other summation orders (other micro-batches)
    # round differently, by more than a tolerance that would still catch a bug.
    feed(tmp_path, "one", range(8))
    straight = run_trainer(config_for("one", 4, bf16=False), tmp_path / "one")
    feed(tmp_path, "two", range(4))
    at_ranks(2, _train, config_for("two", 2, bf16=False), str(tmp_path / "two"), str(tmp_path))
    assert outcomes(tmp_path) == [{"step": 2, "trained_samples": 8}] * 2
    feed(tmp_path, "two", range(4, 8))
    resumed = run_trainer(config_for("two", 4, bf16=False), tmp_path / "two")
    assert straight.trained_samples == resumed.trained_samples == 16
    assert resumed.cursor == {"r": 7} and resumed.version == 4
    records = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").open()]
    trained = [g for r in records if r["kind"] == "train" for g in r["group_ids"]]
    assert sorted(trained) == sorted(f"r/{seq}" for seq in range(8))  # each group once
    one = load_pretrained(tmp_path / "one" / "final").state_dict()
    two = load_pretrained(tmp_path / "two" / "final").state_dict()
    for name, weight in one.items():
        assert torch.allclose(two[name], weight, rtol=1e-4, atol=1e-5), name
    versions = WeightStore(str(tmp_path / "two" / "store")).versions()
    assert versions[-1] == 4  # the 2-rank trainer published 1 and 2, the 1-rank one 3 and 4


def test_a_zombie_at_two_ranks_is_fenced_on_every_rank_before_it_publishes(tmp_path, config_for):
    run = tmp_path / "zombie"
    config = config_for("zombie", 2)
    zombie = threading.Thread(target=at_ranks, args=(2, _train, config, str(run), str(tmp_path)))
    weights = succeed_a_zombie(tmp_path, zombie)
    assert outcomes(tmp_path) == [{"fenced": True}] * 2
    assert weights.latest() == 0  # the zombie published nothing after the successor came
