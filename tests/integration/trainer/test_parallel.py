"""The trainer at 2 ranks (FSDP2 over gloo, two real processes) takes the step it takes at
1: the same loss, gradient norm and updated weights, within float tolerance, with the
batch split by samples, micro-batches accumulated (one rank idles through one) and the
Dr. GRPO normaliser counted over the whole batch. A checkpoint saved at 2 ranks resumes
at 1 and one saved at 1 resumes at 2: the next AdamW step (which depends on the moments)
is the same as the saving side's own."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from fleetrl.config import TrainerSection
from fleetrl.store.objectstore import open_store
from fleetrl.trainer.checkpoints import load_checkpoint, save_checkpoint
from fleetrl.trainer.parallel import ONE_RANK, Ranks, shard_model, share
from fleetrl.trainer.step import TrainSample, train_step
from tests.integration.trainer.ranks import at_ranks
from tests.unit.trainer.test_loss import make_segment, sgd, tiny_model

# SGD at lr 1, unclipped: the update is the gradient itself, so a gradient averaged
# instead of summed over ranks shows (AdamW's first step would hide it). Two minibatches:
# two optimizer steps, the second from weights the first updated in shards.
CONFIG = TrainerSection(bf16=False, minibatches=2, micro_batch_size=1, max_grad_norm=1e9)
ADVANTAGES = [0.75, -0.25, 0.5, -0.5, -0.5]
SHARES = [0.5, 0.5, 1.0, 1.0, 1.0]  # the first trajectory took two contexts


def samples(model: torch.nn.Module) -> list[TrainSample]:
    """Five segments of different lengths (every rank builds the same ones)."""
    completions = [[3, 4], [5, 6, 7, 8], [9], [10, 11, 12], [13, 14, 15, 16, 17, 18]]
    return [
        TrainSample(make_segment(model, [1, 2], completion), advantage, part)
        for completion, advantage, part in zip(completions, ADVANTAGES, SHARES, strict=True)
    ]


def one_step(ranks: Ranks) -> tuple[dict, dict[str, torch.Tensor]]:
    """The stats of one train_step of the tiny model at `ranks`, and its full weights."""
    torch.manual_seed(0)
    model = tiny_model()
    batch = samples(model)
    model = shard_model(model, ranks)
    stats = train_step(model, sgd(model), batch, CONFIG, ranks=ranks)
    if not ranks.distributed:
        return asdict(stats), model.state_dict()
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return asdict(stats), get_model_state_dict(model, options=full)


def _one_step_saved(ranks: Ranks, out: str) -> None:
    stats, state = one_step(ranks)
    if ranks.leader:
        torch.save({"stats": stats, "state": state}, out)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ranks") / "two.pt"
    at_ranks(2, _one_step_saved, str(out))
    return torch.load(out)


def test_two_ranks_take_the_step_one_rank_takes(two_ranks: dict) -> None:
    torch.set_num_threads(1)
    stats, state = one_step(ONE_RANK)
    for name in ("loss", "grad_norm", "entropy", "mismatch_abs_logprob", "loss_tokens"):
        assert two_ranks["stats"][name] == pytest.approx(stats[name], rel=1e-5, abs=1e-7), name
    assert two_ranks["stats"]["train_sequences"] == stats["train_sequences"] == 5
    assert set(two_ranks["state"]) == set(state)
    moved = 0
    for name, weight in state.items():
        before = tiny_model().state_dict()[name]
        assert torch.allclose(two_ranks["state"][name], weight, rtol=1e-5, atol=1e-6), name
        moved += not torch.equal(weight, before)
    assert moved > len(state) // 2  # the step changed the weights (the test can fail)


def test_each_rank_takes_every_nth_sample() -> None:
    items = list(range(5))
    assert share(items, Ranks(0, 2)) == [0, 2, 4]
    assert share(items, Ranks(1, 2)) == [1, 3]
    assert share(items, ONE_RANK) == items


def adam_steps(ranks: Ranks, store: str, save_after_first: bool) -> dict[str, torch.Tensor]:
    """Two AdamW steps of the tiny model at `ranks`, the first one from the checkpoint in
    `store` or, with `save_after_first`, saved there; the full weights after the second."""
    torch.manual_seed(0)
    model = tiny_model()
    batch = samples(model)
    model = shard_model(model, ranks)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = open_store(store)
    if save_after_first:
        train_step(model, optimizer, batch, CONFIG, ranks=ranks)
        save_checkpoint(run, 1, model, optimizer, {"step": 1}, [b"g"], ranks=ranks)
    else:
        assert load_checkpoint(run, model, optimizer, ranks) == ({"step": 1}, [b"g"])
    train_step(model, optimizer, batch[::-1], CONFIG, ranks=ranks)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=full)


def _adam_steps_saved(ranks: Ranks, store: str, save: bool, out: str) -> None:
    state = adam_steps(ranks, store, save)
    if ranks.leader:
        torch.save(state, out)


def at_two_ranks(store: Path, save: bool, out: Path) -> dict[str, torch.Tensor]:
    at_ranks(2, _adam_steps_saved, str(store), save, str(out))
    return torch.load(out)


@pytest.mark.parametrize("saved_at", [2, 1])
def test_a_checkpoint_resumes_at_another_number_of_ranks(saved_at: int, tmp_path: Path):
    torch.set_num_threads(1)
    store = tmp_path / "store"
    if saved_at == 2:
        saver = at_two_ranks(store, True, tmp_path / "saver.pt")
        resumer = adam_steps(ONE_RANK, str(store), save_after_first=False)
    else:
        saver = adam_steps(ONE_RANK, str(store), save_after_first=True)
        resumer = at_two_ranks(store, False, tmp_path / "resumer.pt")
    assert set(saver) == set(resumer)
    for name, weight in saver.items():
        assert torch.allclose(resumer[name], weight, rtol=1e-5, atol=1e-6), name
    assert {
        key.split("/")[3] for key in open_store(str(store)).list("checkpoints/step_000001/dcp/")
    } >= {
        ".metadata",
        *(f"__{rank}_0.distcp" for rank in range(saved_at)),
    }
