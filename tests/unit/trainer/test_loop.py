"""The trainer's optimizer: the output norm may have its own learning rate. The trainer loop
itself (store, resume, staleness) runs in tests/integration/trainer."""

import pytest
import torch

from fleetrl.config_files import load_config
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.trainer.loop import make_optimizer

torch.set_num_threads(1)


def test_output_norm_learns_at_its_own_rate(tiny_checkpoint):
    model = load_pretrained(tiny_checkpoint)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = make_optimizer(model, lr=1e-4, output_norm_lr=1e-2, weight_decay=0.0)
    model(torch.tensor([[5, 6, 7, 8]])).logits.logsumexp(-1).sum().backward()
    optimizer.step()  # Adam's first step moves each parameter by about its lr
    moved = {name: (p - before[name]).abs().max().item() for name, p in model.named_parameters()}
    assert moved.pop("model.norm.weight") == pytest.approx(1e-2, rel=0.01)
    assert max(moved.values()) == pytest.approx(1e-4, rel=0.01)


def test_output_norm_learns_like_the_rest_by_default(tiny_checkpoint):
    model = load_pretrained(tiny_checkpoint)
    before = model.model.norm.weight.detach().clone()
    output_norm_lr = load_config().trainer.output_norm_lr
    optimizer = make_optimizer(model, lr=1e-4, output_norm_lr=output_norm_lr, weight_decay=0.0)
    model(torch.tensor([[5, 6, 7, 8]])).logits.logsumexp(-1).sum().backward()
    optimizer.step()
    moved = (model.model.norm.weight - before).abs().max().item()
    assert moved == pytest.approx(1e-4, rel=0.01)
