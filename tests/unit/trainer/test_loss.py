"""Advantages, the corrected policy loss, and a real train step that learns."""

import asyncio
import math

import pytest
import torch

from fleetrl.config import TrainerSection
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.trainer.advantages import group_advantages
from fleetrl.trainer.loss import loss_normalizer, policy_loss
from fleetrl.trainer.step import (
    StepStats,
    TrainSample,
    collate,
    minibatches,
    samples_from_groups,
    token_logprobs,
    train_step,
)
from fleetrl.types import Completion, SamplingParams, Segment, Trajectory

torch.set_num_threads(1)


def test_group_advantages():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, informative = group_advantages(rewards, "drgrpo")
    assert informative and adv.tolist() == [0.5, -0.5, -0.5, 0.5]
    adv, _ = group_advantages(rewards, "rloo")
    # Leave-one-out: 1 - mean(0, 0, 1) = 2/3.
    assert adv[0].item() == pytest.approx(2 / 3)
    adv, _ = group_advantages(rewards, "grpo")
    assert adv[0].item() == pytest.approx(0.5 / rewards.std().item(), rel=1e-4)
    adv, informative = group_advantages(torch.ones(4), "drgrpo")
    assert not informative and adv.abs().sum() == 0
    with pytest.raises(ValueError, match="estimator"):
        group_advantages(rewards, "ppo")


def loss_of(logprobs, proximal, behaviour, advantages, config=None, mask=None):
    mask = torch.ones_like(logprobs) if mask is None else mask
    config = config or TrainerSection(aggregation="token_mean")
    normalizer = loss_normalizer(config, logprobs.shape[0], int(mask.sum()))
    return policy_loss(logprobs, proximal, behaviour, advantages, mask, config, normalizer)


def test_on_policy_loss_is_the_policy_gradient():
    logprobs = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_()
    out = loss_of(logprobs, logprobs.detach(), logprobs.detach(), torch.tensor([2.0]))
    out.loss.backward()
    # d/dlogp of -(A * exp(logp - prox)) at ratio 1 is -A, averaged over 2 tokens.
    assert logprobs.grad.tolist() == [[-1.0, -1.0]]
    assert out.metrics["mismatch_abs_logprob"] == 0
    assert out.metrics["mismatch_kl_k3"] == 0
    assert out.metrics["clip_frac"] == 0


def test_staleness_weight_is_truncated_or_masked():
    proximal = torch.log(torch.tensor([[0.5, 0.5]]))
    behaviour = torch.log(torch.tensor([[0.1, 0.5]]))  # first token: π_prox/μ = 5 > C = 2
    logprobs = proximal.clone().requires_grad_()
    tis = loss_of(logprobs, proximal, behaviour, torch.tensor([1.0]))
    tis.loss.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([-1.0, -0.5])  # w = min(5, 2) = 2, then 1
    assert tis.metrics["correction_truncated_frac"] == 0.5
    assert tis.metrics["mismatch_kl_k3"] == pytest.approx((5 - 1 - math.log(5)) / 2)

    logprobs.grad = None
    config = TrainerSection(aggregation="token_mean", correction="mis")
    mis = loss_of(logprobs, proximal, behaviour, torch.tensor([1.0]), config)
    mis.loss.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, -0.5])  # first token masked out
    assert mis.metrics["correction_masked_frac"] == 0.5


def test_ratio_is_clipped_asymmetrically():
    proximal = torch.zeros(1, 2)
    logprobs = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    config = TrainerSection(aggregation="token_mean", clip_low=0.2, clip_high=0.28)
    out = loss_of(logprobs, proximal, proximal, torch.tensor([1.0]), config)
    out.loss.backward()
    # A > 0: ratio 1.5 is above 1.28, clipped (no gradient); ratio 0.5 keeps its gradient.
    assert logprobs.grad[0, 0] == 0 and logprobs.grad[0, 1] < 0
    assert out.metrics["clip_frac"] == 1.0


def test_kl_to_reference_pulls_back():
    logprobs = torch.tensor([[-0.1]], requires_grad=True)
    config = TrainerSection(aggregation="token_mean", kl_coef=1.0)
    with pytest.raises(ValueError, match="reference"):
        loss_of(logprobs, logprobs.detach(), logprobs.detach(), torch.tensor([0.0]), config)
    mask = torch.ones(1, 1)
    out = policy_loss(logprobs, logprobs.detach(), logprobs.detach(), torch.tensor([0.0]),
                      mask, config, 1.0, reference=torch.tensor([[-2.0]]))  # fmt: skip
    out.loss.backward()
    assert logprobs.grad.item() > 0  # gradient descent lowers logp toward the reference


def tiny_model(moe=False):
    config = ModelConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=4 if moe else 0,
        moe_intermediate_size=16,
        initializer_range=0.1,
    )
    return init_model(config, seed=0)


def make_segment(model, prompt, completion):
    """A segment whose behaviour logprobs and routing come from `model` itself."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        out = model(ids, return_routed_experts=model.config.is_moe)
    logprobs = torch.log_softmax(out.logits[0], -1)
    n = len(prompt)
    behaviour = [0.0] * n + [logprobs[i - 1, t].item() for i, t in enumerate(completion, start=n)]
    routed = out.routed_experts[0].tolist() if out.routed_experts is not None else None
    return Segment(
        token_ids=prompt + completion,
        loss_mask=[0] * n + [1] * len(completion),
        logprobs=behaviour,
        versions=[-1] * n + [0] * len(completion),
        routed_experts=routed,
    )


def trajectory(segment, reward):
    return Trajectory("t", [segment], reward, "finish", 1, 0, 0, 0.0)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_train_step_raises_the_rewarded_answer(moe):
    model = tiny_model(moe)
    good, bad = [5, 6, 7], [9, 9, 9]
    group = [trajectory(make_segment(model, [1, 2], good), 1.0),
             trajectory(make_segment(model, [1, 2], bad), 0.0)]  # fmt: skip
    samples, skipped = samples_from_groups([group, [group[0], group[0]]], "drgrpo")
    assert skipped == [1] and len(samples) == 2

    batch = collate(samples)
    with torch.no_grad():
        before, _ = token_logprobs(model, batch)
    # The recomputed logprobs equal the behaviour ones: no mismatch at the same weights.
    assert ((before - batch.behaviour) * batch.mask).abs().max() < 1e-5

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = TrainerSection(micro_batch_size=1, bf16=False)
    metrics = train_step(model, optimizer, samples, config)
    assert metrics.mismatch_abs_logprob < 1e-5
    assert metrics.train_tokens == 6 and metrics.grad_norm > 0
    with torch.no_grad():
        after, _ = token_logprobs(model, batch)
    gain = ((after - before) * batch.mask).sum(dim=1)
    assert gain[0] > 0 > gain[1]  # the rewarded answer got likelier, the other less likely


def test_train_step_with_kl_needs_and_uses_a_reference():
    model, reference = tiny_model(), tiny_model()
    group = [trajectory(make_segment(model, [1, 2], [5, 6]), 1.0),
             trajectory(make_segment(model, [1, 2], [7, 8]), 0.0)]  # fmt: skip
    samples, _ = samples_from_groups([group], "drgrpo")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = TrainerSection(kl_coef=0.1, bf16=False)
    with pytest.raises(ValueError, match="reference"):
        train_step(model, optimizer, samples, config)
    metrics = train_step(model, optimizer, samples, config, reference)
    assert metrics.advantage_abs_mean == 0.5 and metrics.grad_norm > 0


def test_bf16_train_step_measures_its_mismatch_and_still_learns():
    model = tiny_model()
    group = [trajectory(make_segment(model, [1, 2], [5, 6, 7]), 1.0),
             trajectory(make_segment(model, [1, 2], [9, 9, 9]), 0.0)]  # fmt: skip
    samples, _ = samples_from_groups([group], "drgrpo")
    batch = collate(samples)
    with torch.no_grad():
        before, _ = token_logprobs(model, batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    metrics = train_step(model, optimizer, samples, TrainerSection(bf16=True))
    # bfloat16 matmuls against a float32 engine: a mismatch that is measured, not hidden.
    assert 1e-5 < metrics.mismatch_abs_logprob < 0.1
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        after, _ = token_logprobs(model, batch)
    gain = ((after - before) * batch.mask).sum(dim=1)
    assert gain[0] > 0 > gain[1]


def step_with_expert_answer(guided: bool) -> tuple[StepStats, list[torch.Tensor]]:
    """A train step on a group whose rewarded answer an expert wrote (behaviour logprob
    0: it was certain), marked guided or not; its metrics and the weights after it."""
    model = tiny_model()
    expert = make_segment(model, [1, 2], [5, 6, 7])
    expert.logprobs = [0.0] * len(expert.logprobs)
    expert.guided = guided
    group = [trajectory(expert, 1.0), trajectory(make_segment(model, [1, 2], [9, 9, 9]), 0.0)]
    samples, _ = samples_from_groups([group], "drgrpo")
    metrics = train_step(model, sgd(model), samples, TrainerSection(bf16=False))
    return metrics, [p.detach().clone() for p in model.parameters()]


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    """Plain SGD, whose step is the gradient scaled: Adam's first step is about the sign of
    each gradient element, which hides a wrong weight and magnifies rounding where the
    gradient is near zero."""
    return torch.optim.SGD(model.parameters(), lr=1.0)


def test_a_guided_segment_is_learnt_at_weight_one_and_left_out_of_the_mismatch():
    guided, guided_weights = step_with_expert_answer(guided=True)
    assert guided.mismatch_abs_logprob < 1e-5  # the sampled answer's, measured alone
    assert guided.correction_truncated_frac == 0
    # The same step where the expert's answer had been sampled by the policy itself.
    model = tiny_model()
    group = [trajectory(make_segment(model, [1, 2], [5, 6, 7]), 1.0),
             trajectory(make_segment(model, [1, 2], [9, 9, 9]), 0.0)]  # fmt: skip
    samples, _ = samples_from_groups([group], "drgrpo")
    train_step(model, sgd(model), samples, TrainerSection(bf16=False))
    for mine, sampled in zip(guided_weights, model.parameters(), strict=True):
        assert torch.allclose(mine, sampled, atol=1e-6)
    # Unmarked, the expert's certainty reads as a mismatch and shrinks its weight.
    unmarked, unmarked_weights = step_with_expert_answer(guided=False)
    assert unmarked.mismatch_abs_logprob > 1
    pairs = zip(guided_weights, unmarked_weights, strict=True)
    assert any(not torch.allclose(a, b) for a, b in pairs)


@pytest.mark.parametrize("micro_batch_size", [1, 16])
def test_a_steps_mismatch_is_over_the_sampled_tokens_whatever_the_micro_batches(
    micro_batch_size,
):
    model = tiny_model()
    expert = make_segment(model, [1, 2], [5, 6, 7])
    expert.logprobs, expert.guided = [0.0] * len(expert.logprobs), True
    sampled = make_segment(model, [1, 2], [9, 9, 9])
    # An engine 0.1 nats/token less sure than the trainer of what it sampled.
    shifted = zip(sampled.logprobs, sampled.loss_mask, strict=True)
    sampled.logprobs = [lp - 0.1 * m for lp, m in shifted]
    group = [trajectory(expert, 1.0), trajectory(sampled, 0.0)]
    samples, _ = samples_from_groups([group], "drgrpo")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = TrainerSection(bf16=False, micro_batch_size=micro_batch_size)
    metrics = train_step(model, optimizer, samples, config)
    assert metrics.mismatch_abs_logprob == pytest.approx(0.1, abs=1e-4)


@pytest.mark.parametrize("minibatches", [1, 2])
def test_the_update_does_not_depend_on_the_micro_batch_size(minibatches):
    """micro_batch_size is a speed knob only (its default is the CPU's fastest)."""
    reference = tiny_model()
    completions = [[5, 6, 7], [9, 9], [4, 8, 8, 8, 3], [6], [7, 7, 2, 1], [3, 3, 3]]
    segments = [make_segment(reference, [1, 2], c) for c in completions]
    groups = [[trajectory(segments[i], 1.0), trajectory(segments[i + 1], 0.0)] for i in (0, 2, 4)]
    samples, _ = samples_from_groups(groups, "drgrpo")
    weights, losses = [], []
    for micro_batch_size in (1, 4, 16):
        model = tiny_model()
        # SGD: the update is the gradient itself (Adam would blow round-off up to ±lr).
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        config = TrainerSection(
            bf16=False, micro_batch_size=micro_batch_size, minibatches=minibatches
        )
        losses.append(train_step(model, optimizer, samples, config).loss)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6) == pytest.approx(losses[2], abs=1e-6)
    assert not torch.equal(weights[0], torch.cat([p.flatten() for p in tiny_model().parameters()]))
    assert torch.allclose(weights[0], weights[1], atol=1e-6)
    assert torch.allclose(weights[0], weights[2], atol=1e-6)


def engine_segment(model, prompt, tool_result, temperature, seed=0):
    """Two replies sampled by the real engine at `temperature`, a tool result between
    them (loss mask 0), laid out as the harness records them."""

    async def two_turns() -> list[Completion]:
        engine = Engine(model, max_batch_size=2, max_model_len=64)
        try:
            params = SamplingParams(temperature=temperature, max_tokens=6, seed=seed)
            first = await engine.generate(prompt, params)
            context = prompt + first.token_ids + tool_result
            return [first, await engine.generate(context, params)]
        finally:
            await engine.close()

    first, second = asyncio.run(two_turns())
    gap = len(tool_result)
    n = len(prompt)
    return Segment(
        token_ids=prompt + first.token_ids + tool_result + second.token_ids,
        loss_mask=[0] * n + [1] * len(first.token_ids) + [0] * gap + [1] * len(second.token_ids),
        logprobs=[0.0] * n + first.logprobs + [0.0] * gap + second.logprobs,
        versions=[-1] * n + first.versions + [-1] * gap + second.versions,
        routed_experts=second.prompt_routed_experts + second.routed_experts
        if second.routed_experts is not None and second.prompt_routed_experts is not None
        else None,
        temperature=temperature,
    )


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_trainer_logprobs_equal_the_engines_at_its_temperature(moe):
    model = tiny_model(moe)
    segment = engine_segment(model, [1, 2, 3], [4, 4], temperature=0.7)
    batch = collate([TrainSample(segment, 1.0)])
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch)
    assert ((logprobs - batch.behaviour) * batch.mask).abs().max() < 1e-5
    # The same tokens read at temperature 1 (the trainer's old reading) are far off.
    batch.temperature = torch.ones(1)
    with torch.no_grad():
        at_one, _ = token_logprobs(model, batch)
    assert ((at_one - batch.behaviour) * batch.mask).abs().max() > 1e-2


def test_a_train_step_at_temperature_sees_no_mismatch():
    model = tiny_model()
    group = [trajectory(engine_segment(model, [1, 2], [3], 0.7, seed=s), float(s % 2))
             for s in range(4)]  # fmt: skip
    samples, _ = samples_from_groups([group], "drgrpo")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    metrics = train_step(model, optimizer, samples, TrainerSection(bf16=False))
    assert metrics.mismatch_abs_logprob < 1e-5
    assert metrics.correction_truncated_frac == 0


def test_greedy_segments_are_read_at_temperature_one():
    model = tiny_model()
    segment = engine_segment(model, [1, 2, 3], [4], temperature=0.0)
    batch = collate([TrainSample(segment, 1.0)])
    assert batch.temperature.tolist() == [1.0]
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch)
    assert ((logprobs - batch.behaviour) * batch.mask).abs().max() < 1e-5


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_logprobs_at_the_loss_positions_equal_the_full_vocabulary_readings(moe):
    model = tiny_model(moe)
    samples = [TrainSample(make_segment(model, [1, 2, 3], [4, 5]), 1.0),
               TrainSample(make_segment(model, [6], [7, 8, 9, 10]), -1.0)]  # fmt: skip
    batch = collate(samples)
    batch.temperature = torch.tensor([0.7, 1.3])
    logprobs, entropy = token_logprobs(model, batch)
    # The reading every position used to get: logits over the whole batch, then masked.
    logits = model(batch.inputs, routed_experts=batch.routed_experts).logits
    full = torch.log_softmax(logits / batch.temperature[:, None, None], dim=-1)
    expected = full.gather(-1, batch.targets[..., None]).squeeze(-1) * batch.mask
    assert torch.allclose(logprobs, expected, atol=1e-6)
    assert logprobs[batch.mask == 0].abs().sum() == 0 == entropy[batch.mask == 0].abs().sum()
    full_entropy = -(full.exp() * full).sum(-1) * batch.mask
    assert torch.allclose(entropy, full_entropy, atol=1e-5)
    # The same gradient as the full reading's.
    weights = list(model.parameters())
    mine = torch.autograd.grad(logprobs.sum(), weights, allow_unused=True)
    theirs = torch.autograd.grad(expected.sum(), weights, allow_unused=True)
    for a, b in zip(mine, theirs, strict=True):
        assert (a is None and b is None) or torch.allclose(a, b, atol=1e-6)


def clip_group(model):
    """Four samples of one prompt, two rewarded: an informative group."""
    return [trajectory(make_segment(model, [1, 2], [5 + s, 6 + s, 7 + s, 8]), float(s < 2))
            for s in range(4)]  # fmt: skip


def test_minibatches_move_the_ratio_so_the_clip_acts():
    config = TrainerSection(bf16=False, micro_batch_size=1, max_grad_norm=100.0, minibatches=1)
    single = tiny_model()
    samples, _ = samples_from_groups([clip_group(single)], "drgrpo")
    optimizer = torch.optim.AdamW(single.parameters(), lr=0.2)
    one = train_step(single, optimizer, samples, config)
    # One update per batch: π_θ is π_prox throughout, the ratio is 1 and nothing is clipped.
    assert one.clip_frac == 0 and one.ratio_mean == 1

    split = tiny_model()
    samples, _ = samples_from_groups([clip_group(split)], "drgrpo")
    optimizer = torch.optim.AdamW(split.parameters(), lr=0.2)
    four = train_step(split, optimizer, samples, config.model_copy(update={"minibatches": 4}))
    # Later minibatches see weights the earlier ones moved, against the same π_prox.
    assert four.clip_frac > 0 and four.ratio_mean != 1
    assert optimizer.state[next(split.parameters())]["step"] == 4  # one AdamW step each
    assert four.train_sequences == 4 and four.mismatch_abs_logprob < 1e-5


def test_the_first_minibatch_reads_its_proximal_logprobs_from_its_own_forward():
    model = tiny_model()
    samples, _ = samples_from_groups([clip_group(model)], "drgrpo")
    batch = collate(samples)
    with torch.no_grad():
        separate = token_logprobs(model, batch)[0]
    own = token_logprobs(model, batch)[0].detach()  # the forward that is trained on
    assert torch.equal(separate, own)  # so a separate forward would add nothing

    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    config = TrainerSection(bf16=False, micro_batch_size=1, minibatches=2)
    train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), samples, config)
    # 4 samples in 2 minibatches of 2 micro-batches: 4 trained forwards, and π_prox
    # forwards for the second minibatch only.
    assert len(forwards) == 4 + 2


def test_minibatches_span_the_batch_and_never_come_out_empty():
    model = tiny_model()
    samples = [TrainSample(make_segment(model, [1], [2] * n), 0.0) for n in (5, 1, 3, 2, 4)]
    parts = minibatches(samples, 2)
    lengths = [[len(s.segment.token_ids) - 1 for s in part] for part in parts]
    assert lengths == [[1, 3, 5], [2, 4]]
    assert len(minibatches(samples, 9)) == 5 and minibatches(samples, 1) == [
        sorted(samples, key=lambda s: len(s.segment.token_ids))
    ]


def test_router_replay_can_be_turned_off():
    model = tiny_model(moe=True)
    segment = engine_segment(model, [1, 2, 3], [4, 5], temperature=1.0)
    assert segment.routed_experts is not None
    replayed = collate([TrainSample(segment, 1.0)])
    own = collate([TrainSample(segment, 1.0)], replay=False)
    assert replayed.routed_experts is not None and own.routed_experts is None
    # the trainer's own routing at the engine's weights is the engine's: the same logprobs
    with torch.no_grad():
        a, _ = token_logprobs(model, replayed)
        b, _ = token_logprobs(model, own)
    assert ((a - b) * replayed.mask).abs().max() < 1e-6
