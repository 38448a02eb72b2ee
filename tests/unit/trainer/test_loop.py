"""The trainer's optimizer (the loop itself runs in tests/integration/test_train.py)."""

from fleetrl.config import load_config
from fleetrl.model import ModelConfig, init_model
from fleetrl.trainer.loop import rl_optimizer


def test_norm_gains_may_learn_at_their_own_rate():
    model = init_model(ModelConfig.small(64, 32, 1), seed=0)
    config = load_config(overrides={"trainer": {"lr": 1e-5, "gain_lr": 1e-2}})
    matrices, gains = rl_optimizer(model, config).param_groups
    assert matrices["lr"] == 1e-5 and gains["lr"] == 1e-2 and gains["weight_decay"] == 0
    assert all(p.dim() == 1 for p in gains["params"])
    assert all(p.dim() > 1 for p in matrices["params"])
    counted = [id(p) for p in [*matrices["params"], *gains["params"]]]
    assert sorted(counted) == sorted(id(p) for p in model.parameters())  # each weight once
    plain = rl_optimizer(model, load_config(overrides={"trainer": {"lr": 3e-5}})).param_groups
    assert plain[0]["lr"] == plain[1]["lr"] == 3e-5
