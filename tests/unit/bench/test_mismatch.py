"""`fleetrl bench mismatch`'s measurement on segments the real engine sampled: no mismatch
and no routing difference against the engine's own weights; a perturbed router flips
experts, and replaying the engine's routing removes the logprob drift it causes."""

import torch

from fleetrl.bench.mismatch import measure_arm
from tests.unit.trainer.test_loss import engine_segment, tiny_model

torch.set_num_threads(1)


def segments(model):
    return [engine_segment(model, [1, 2, 3], [4, 5], temperature=1.0, seed=s) for s in range(6)]


def test_the_engines_own_weights_show_no_mismatch():
    model = tiny_model(moe=True)
    sampled = segments(model)
    for replay in (True, False):
        arm = measure_arm(model, "tiny", "fleetrl", "float32", sampled, replay, 2.0)
        assert (
            arm.tokens == 6 * 12 and arm.routes and arm.scoring == ("replay" if replay else "own")
        )
        assert arm.kl_k3 < 1e-9 and arm.abs_logprob_p99 < 1e-5
        assert arm.tis_truncated == arm.mis_masked == 0.0
    assert arm.routing_differs_any == 0.0 and arm.routing_differs_per_layer == [0.0, 0.0]


def test_replay_removes_the_drift_of_flipped_experts():
    engine_model = tiny_model(moe=True)
    sampled = segments(engine_model)
    trainer_model = tiny_model(moe=True)
    with torch.no_grad():  # the trainer's routers differ a little from the engine's
        for layer in trainer_model.model.layers:
            layer.mlp.gate.weight.add_(torch.randn_like(layer.mlp.gate.weight) * 0.05)
    own = measure_arm(trainer_model, "tiny", "fleetrl", "float32", sampled, False, 2.0)
    replayed = measure_arm(trainer_model, "tiny", "fleetrl", "float32", sampled, True, 2.0)
    assert own.routing_differs_any > 0 and len(own.routing_differs_per_layer) == 2
    assert replayed.routing_differs_any is None  # replayed routes are the engine's
    assert replayed.abs_logprob_mean < own.abs_logprob_mean
    assert replayed.kl_k3 < own.kl_k3
