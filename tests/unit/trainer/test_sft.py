"""SFT: the schedule, the batches and the loss (a real run on real demonstrations, and the
base model the repository ships: tests/env/trainer)."""

import json

import pytest
import torch

from fleetrl.config import SftSection
from fleetrl.model.checkpoint import init_model
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.trainer.sft import (
    STATE_FILE,
    _batches,
    backward_in_micro_batches,
    collate,
    lr_at,
    model_config,
    sft_loss,
    train_sft,
    validation_loss,
)
from fleetrl.types import Demo

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()


def test_lr_warms_up_then_decays_by_cosine():
    config = SftSection(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, config) == pytest.approx(1e-4)
    assert lr_at(9, config) == pytest.approx(1e-3)
    assert lr_at(99, config) == pytest.approx(1e-4)
    middle = lr_at(10 + 89 // 2, config)
    assert 4e-4 < middle < 7e-4
    assert all(lr_at(s, config) >= lr_at(s + 1, config) for s in range(9, 99))
    short = SftSection(steps=4, lr=1e-3, warmup_steps=50)  # warmup capped at steps - 1
    assert [lr_at(s, short) for s in range(3)] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3])
    assert lr_at(0, SftSection(steps=1, lr=1e-3)) == pytest.approx(1e-3)


def test_collate_shifts_and_masks():
    short = Demo("a", "fix", [1, 2, 3], [0, 1, 1])
    long = Demo("b", "fix", [4, 5, 6, 7, 8], [0, 0, 1, 0, 1])
    batch = collate([short, long], pad_id=0)
    assert batch.inputs.tolist() == [[1, 2, 0, 0], [4, 5, 6, 7]]
    assert batch.targets.tolist() == [[2, 3, 0, 0], [5, 6, 7, 8]]
    assert batch.mask.tolist() == [[1, 1, 0, 0], [0, 1, 0, 1]]


def test_batches_cover_an_epoch_once_and_group_similar_lengths():
    demos = [Demo(str(i), "fix", [1] * (5 + (i * 37) % 50), [1]) for i in range(203)]
    batches = _batches(demos, batch_size=8, seed=0)
    epoch = [next(batches) for _ in range(203 // 8)]
    ids = [d.task_id for batch in epoch for d in batch]
    assert len(ids) == len(set(ids)) == 200  # the 3 left over sit out this epoch
    spread = [max(len(d.token_ids) for d in b) - min(len(d.token_ids) for d in b) for b in epoch]
    assert sum(spread) / len(spread) < 10  # vs ~40 for random batches of these lengths
    again = _batches(demos, batch_size=8, seed=0)
    assert [d.task_id for d in next(again)] == [d.task_id for d in epoch[0]]


def test_loss_ignores_padding_and_context_tokens():
    model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    demo = Demo("a", "fix", [5, 6, 7, 8, 9], [0, 0, 1, 1, 1])
    longer = Demo("b", "fix", [5, 6, 7, 8, 9, 10, 11, 12], [0, 0, 0, 0, 0, 0, 0, 1])
    alone = sft_loss(model, collate([demo], TOKENIZER.pad_id))
    with torch.no_grad():
        batch = collate([demo, longer], TOKENIZER.pad_id)
        logits = model(batch.inputs).logits
        logprobs = torch.log_softmax(logits, -1).gather(-1, batch.targets[..., None])[..., 0]
    padded_row = -(logprobs[0] * batch.mask[0]).sum() / 3
    assert padded_row.item() == pytest.approx(alone.item(), abs=1e-5)


def test_micro_batches_give_the_whole_batchs_loss_and_gradient():
    lengths = [4 + i % 5 for i in range(7)]  # micro-batches of unequal target tokens
    demos = [
        Demo(str(i), "fix", [5 + (i * 7 + j) % 40 for j in range(n)], [0, 0] + [1] * (n - 2))
        for i, n in enumerate(lengths)
    ]
    results = []
    for micro_batch_size in (7, 3, 1):
        model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
        loss, tokens = backward_in_micro_batches(model, demos, TOKENIZER.pad_id, micro_batch_size)
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((loss, tokens, grads))
    whole = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    expected = sft_loss(whole, collate(demos, TOKENIZER.pad_id))
    assert results[0][0] == pytest.approx(expected.item(), rel=1e-6)
    assert results[0][1] == sum(sum(d.loss_mask[1:]) for d in demos)
    for loss, tokens, grads in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-6) and tokens == results[0][1]
        assert torch.allclose(grads, results[0][2], atol=1e-6)


def test_bf16_loss_is_close_to_float32_and_has_float32_gradients():
    model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    batch = collate([Demo("a", "fix", [5, 6, 7, 8, 9], [0, 0, 1, 1, 1])], TOKENIZER.pad_id)
    fp32 = sft_loss(model, batch)
    bf16 = sft_loss(model, batch, bf16=True)
    assert bf16.dtype == torch.float32
    assert bf16.item() == pytest.approx(fp32.item(), rel=2e-2)
    bf16.backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def _tiny_run(tmp_path, demos, val_demos, **settings):
    model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    config = SftSection(
        **({"batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "log_every": 1} | settings)
    )
    result = train_sft(
        model,
        demos,
        TOKENIZER,
        tmp_path / "out",
        config,
        progress=False,
        echo=lambda _: None,
        val_demos=val_demos,
    )
    return model, start, result


def test_sft_stops_at_a_validation_plateau_and_keeps_the_best_weights(tmp_path):
    # Validation wants other tokens after the same context: learning the training demos
    # makes the validation loss worse from the first step, so step 0 stays the best.
    demos = [Demo(str(i), "fix", [5, 6, 7, 8], [0, 0, 1, 1]) for i in range(4)]
    conflicting = [Demo("v", "fix", [5, 6, 9, 9], [0, 0, 1, 1])]
    model, start, result = _tiny_run(
        tmp_path, demos, conflicting, steps=50, val_every=1, patience=3
    )
    assert result.stopped == "plateau" and result.steps == 3 and result.best_step == 0
    assert [step for step, _ in result.val_losses] == [0, 1, 2, 3]
    assert result.val_losses[-1][1] > result.val_losses[0][1]
    assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())["result"]
    assert state["best_step"] == state["kept_step"] == 0 and state["stopped"] == "plateau"


def test_sft_without_patience_keeps_its_last_weights_and_says_so(tmp_path):
    demos = [Demo(str(i), "fix", [5, 6, 7, 8], [0, 0, 1, 1]) for i in range(4)]
    conflicting = [Demo("v", "fix", [5, 6, 9, 9], [0, 0, 1, 1])]
    model, start, result = _tiny_run(
        tmp_path, demos, conflicting, steps=3, val_every=1, save_every=2
    )
    assert result.best_step == 0 and result.kept_step == 3
    assert not all(torch.equal(start[k], v) for k, v in model.state_dict().items())
    midway = json.loads((tmp_path / "out" / "step-000002" / STATE_FILE).read_text())
    assert midway["result"]["kept_step"] == 2  # a checkpoint on the way keeps its own step


def test_sft_tracks_an_improving_validation_loss_and_stops_on_wall_time(tmp_path):
    demos = [Demo(str(i), "fix", [5, 6, 7, 8], [0, 0, 1, 1]) for i in range(4)]
    _, _, result = _tiny_run(tmp_path, demos, demos[:1], steps=6, val_every=2)
    assert [step for step, _ in result.val_losses] == [0, 2, 4, 6]
    assert result.val_losses[-1][1] < result.val_losses[0][1] and result.best_step == 6
    _, _, timed = _tiny_run(tmp_path, demos, None, steps=10_000, max_seconds=0.5)
    assert timed.stopped == "time" and 0 < timed.steps < 10_000 and not timed.val_losses
    assert validation_loss(init_model(model_config(TOKENIZER, 32, 1)), demos, 0, 3) > 0


def test_progress_below_min_delta_runs_out_of_patience_but_keeps_the_lowest_loss(tmp_path):
    demos = [Demo(str(i), "fix", [5, 6, 7, 8], [0, 0, 1, 1]) for i in range(4)]
    settings = {"steps": 50, "val_every": 1, "patience": 2, "min_delta": 0.9, "lr": 1e-3}
    _, _, result = _tiny_run(tmp_path, demos, demos[:1], **settings)
    losses = [loss for _, loss in result.val_losses]
    assert losses == sorted(losses, reverse=True)  # it kept improving, by less than 90 %
    assert result.stopped == "plateau" and result.steps == 2 and result.best_step == 2
