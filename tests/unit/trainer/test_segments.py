"""Episodes of several segments (self-summarisation: a fresh context after each summary):
a trajectory counts once in the loss however many contexts it took, every segment trains
with its trajectory's advantage (the summary included), and its staleness is that of its
oldest token."""

import pytest
import torch

from fleetrl.config import TrainerSection
from fleetrl.store.trajectories import GroupRecord, RegionReport
from fleetrl.trainer import step
from fleetrl.trainer.loop import staleness
from fleetrl.trainer.loss import loss_normalizer, policy_loss
from fleetrl.trainer.step import collate, samples_from_groups, token_logprobs, train_step
from fleetrl.types import Segment, Trajectory
from tests.unit.trainer.test_loss import make_segment, sgd, tiny_model

torch.set_num_threads(1)

# One optimizer step over the whole batch, unclipped: with SGD at lr 1 the update is the
# gradient itself.
ONE_STEP = TrainerSection(bf16=False, minibatches=1, max_grad_norm=1e9)
SUMMARY = [7, 8]  # the tokens the model wrote to carry its first context into the second


def episode(segments: list[Segment], reward: float) -> Trajectory:
    return Trajectory("t", segments, reward, "finish", len(segments), 0, 0, 0.0)


def four_and_one(model) -> list[Trajectory]:
    """A group of an episode of four contexts (rewarded) and one of a single context."""
    four = [make_segment(model, [1, 2], [3 + i] * (i + 1)) for i in range(4)]
    return [episode(four, 1.0), episode([make_segment(model, [1, 2], [9, 9])], 0.0)]


def update_of(samples, config=ONE_STEP) -> list[torch.Tensor]:
    """What one `train_step` with SGD at lr 1 takes off each weight: its gradient."""
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    train_step(model, sgd(model), samples, config)
    return [b - p.detach() for b, p in zip(before, model.parameters(), strict=True)]


def assert_close(mine: list[torch.Tensor], theirs: list[torch.Tensor]) -> None:
    for a, b in zip(mine, theirs, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-7)


def test_a_segment_is_its_share_of_its_trajectory():
    samples, _ = samples_from_groups([four_and_one(tiny_model())], "drgrpo")
    assert [s.share for s in samples] == [0.25] * 4 + [1.0]
    assert [s.advantage for s in samples] == [0.5] * 4 + [-0.5]
    config = TrainerSection(aggregation="seq_sum_norm")
    tokens = sum(sum(s.segment.loss_mask) for s in samples)
    trajectories = sum(s.share for s in samples)
    assert loss_normalizer(config, trajectories, tokens) == 2 * config.norm_tokens
    token_mean = TrainerSection(aggregation="token_mean")
    assert loss_normalizer(token_mean, trajectories, tokens) == tokens


def test_a_minibatch_counts_the_share_of_each_trajectory_it_holds(monkeypatch):
    samples, _ = samples_from_groups([four_and_one(tiny_model())], "drgrpo")
    counted = []

    def counting(config, trajectories, loss_tokens):
        counted.append(trajectories)
        return loss_normalizer(config, trajectories, loss_tokens)

    monkeypatch.setattr(step, "loss_normalizer", counting)
    config = ONE_STEP.model_copy(update={"minibatches": 2})
    model = tiny_model()
    train_step(model, sgd(model), samples, config)
    # By length: the four-context episode's segments fall 2 + 2 into the minibatches, the
    # other episode's one segment into the first. Each counts part, and once in all.
    assert counted == [1.5, 0.5]


def test_a_trajectory_of_four_segments_weighs_as_one():
    model = tiny_model()
    samples, _ = samples_from_groups([four_and_one(model)], "drgrpo")
    # Dr. GRPO by hand: each segment's token losses summed, at its trajectory's advantage,
    # over 2 trajectories x norm_tokens (5 segments x norm_tokens is the bias).
    total = 0
    for sample in samples:
        batch = collate([sample])
        logprobs, _ = token_logprobs(model, batch)
        args = (batch.behaviour, batch.advantages, batch.mask, ONE_STEP, 1.0)
        total = total + policy_loss(logprobs, logprobs.detach(), *args).loss
    expected = torch.autograd.grad(total / (2 * ONE_STEP.norm_tokens), list(model.parameters()))
    assert_close(update_of(samples), list(expected))


def summarised(model) -> list[Segment]:
    """Two contexts: the task, a reply and the summary the model wrote (both sampled), then
    a fresh context of the task and that summary (given) and the reply that follows."""
    first = make_segment(model, [1, 2], [5, 6, *SUMMARY])
    second = make_segment(model, [1, 2, *SUMMARY], [9, 4])
    return [first, second]


def test_the_summary_is_trained_with_its_trajectorys_advantage():
    model = tiny_model()
    group = [episode(summarised(model), 1.0), episode([make_segment(model, [1, 2], [3, 3])], 0.0)]
    samples, _ = samples_from_groups([group], "drgrpo")
    batch = collate(samples)
    normalizer = loss_normalizer(ONE_STEP, 2, int(batch.mask.sum()))

    def gradient(advantages: torch.Tensor) -> list[torch.Tensor]:
        logprobs, _ = token_logprobs(model, batch)
        args = (batch.behaviour, advantages, batch.mask, ONE_STEP, normalizer)
        loss = policy_loss(logprobs, logprobs.detach(), *args).loss
        return list(torch.autograd.grad(loss, list(model.parameters())))

    advantages = batch.advantages[:, None].expand_as(batch.mask).clone()
    end = len(samples[0].segment.token_ids) - 1  # targets are token_ids[1:]
    summary = (0, slice(end - len(SUMMARY), end))
    assert batch.targets[summary].tolist() == SUMMARY and batch.mask[summary].all()
    assert advantages[summary].tolist() == [0.5, 0.5]
    credited = gradient(advantages)
    advantages[summary] = 0
    uncredited = gradient(advantages)
    assert any(not torch.allclose(a, b) for a, b in zip(credited, uncredited, strict=True))
    # The trainer's update is the one whose summary carries the trajectory's advantage.
    assert_close(update_of(samples), credited)


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_a_trajectorys_staleness_is_its_oldest_tokens_across_segments(order):
    first = Segment([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], [-1, 3, 3])
    second = Segment([1, 4, 5], [0, 1, 1], [0.0, -1.0, -1.0], [-1, 5, 5])
    segments = [first, second] if order == "in order" else [second, first]
    record = GroupRecord("r", 0, [episode(segments, 1.0)], RegionReport("r", 5))
    assert staleness(record, 7) == 7 - 3
