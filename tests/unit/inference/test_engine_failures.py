"""A failed engine step fails only the requests that cause it; the engine keeps serving.

The model's forward is wrapped to raise for one request's input (a poisoned prompt token
in a prefill, a position only that request reaches in a decode step), while it shares
the batch with requests that must come out as if nothing had happened.
"""

import asyncio
import random

import pytest
import torch

from fleetrl.inference.engine import Engine
from fleetrl.model.qwen3 import Qwen3
from fleetrl.types import Completion, SamplingParams
from tests.unit.inference.test_engine import VOCAB, tiny_model

torch.set_num_threads(1)
POISON = 7  # a prompt token the poisoned prefill refuses
LONG = 40  # a prompt length; decode steps at positions >= LONG are refused


def clean_prompts(n: int) -> list[list[int]]:
    """Prompts of 2-10 tokens without POISON (so with 20 new tokens they stay below LONG)."""
    rng = random.Random(0)
    tokens = [t for t in range(1, VOCAB) if t != POISON]
    return [[rng.choice(tokens) for _ in range(rng.randint(2, 10))] for _ in range(n)]


class Poisoned:
    """Wraps a model's forward: raises when `refuse(input_ids, kv_cache)` says so and
    records the batch size of every refused call."""

    def __init__(self, model: Qwen3, refuse) -> None:
        self.forward = model.forward
        self.refuse = refuse
        self.refused: list[int] = []
        model.forward = self  # instance attribute: nn.Module.__call__ finds it first

    def __call__(self, input_ids, *args, **kwargs):
        if self.refuse(input_ids, kwargs.get("kv_cache")):
            self.refused.append(input_ids.shape[0])
            raise RuntimeError("poisoned input")
        return self.forward(input_ids, *args, **kwargs)


async def outcomes(engine: Engine, prompts, params) -> list[Completion | BaseException]:
    """Every request's completion or error, then one more request on the same engine.
    A request the engine loses track of fails the test by the timeout, not by hanging."""
    async with asyncio.timeout(60):
        results = await asyncio.gather(
            *(engine.generate(p, s) for p, s in zip(prompts, params, strict=True)),
            return_exceptions=True,
        )
        after = await engine.generate([1, 2, 3], SamplingParams(max_tokens=4))
    await engine.close()
    assert len(after.token_ids) == 4  # the engine still serves
    return list(results)


def run_with(model: Qwen3, prompts, params) -> list[Completion | BaseException]:
    return asyncio.run(outcomes(Engine(model, max_batch_size=8, max_model_len=64), prompts, params))


def seeded(n: int) -> list[SamplingParams]:
    return [SamplingParams(temperature=1.0, max_tokens=20, seed=i) for i in range(n)]


def assert_same(got: Completion, expected: Completion) -> None:
    assert got.token_ids == expected.token_ids
    assert got.logprobs == pytest.approx(expected.logprobs, abs=1e-5)
    assert got.versions == expected.versions
    assert got.routed_experts == expected.routed_experts
    assert got.prompt_routed_experts == expected.prompt_routed_experts


def test_a_failed_prefill_fails_only_the_request_that_raises():
    model = tiny_model()
    prompts = clean_prompts(5)
    expected = run_with(model, prompts, seeded(5))
    poisoned = Poisoned(model, lambda ids, cache: ids.shape[1] > 1 and bool((ids == POISON).any()))
    mixed = [*prompts[:2], [3, POISON, 4, 5], *prompts[2:]]
    params = seeded(5)
    results = run_with(model, mixed, [*params[:2], SamplingParams(max_tokens=5), *params[2:]])
    assert poisoned.refused[0] == 6  # the whole prefill raised, then each prompt alone
    assert isinstance(results[2], RuntimeError)
    for got, want in zip(results[:2] + results[3:], expected, strict=True):
        assert_same(got, want)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_a_failed_decode_step_fails_only_the_request_that_raises(moe):
    model = tiny_model(moe)
    prompts = clean_prompts(5)
    expected = run_with(model, prompts, seeded(5))
    poisoned = Poisoned(
        model, lambda ids, cache: ids.shape[1] == 1 and bool((cache.starts >= LONG).any())
    )
    long_prompt = [1 + i % 50 for i in range(LONG)]
    results = run_with(model, [long_prompt, *prompts], [SamplingParams(max_tokens=5), *seeded(5)])
    assert poisoned.refused[0] == 6  # the step of all six raised, then each request alone
    assert isinstance(results[0], RuntimeError)
    # Their keys and values survived the failed step: the same tokens as without it.
    for got, want in zip(results[1:], expected, strict=True):
        assert_same(got, want)


def test_a_step_that_fails_once_fails_nobody():
    model = tiny_model()
    prompts = clean_prompts(4)
    expected = run_with(model, prompts, seeded(4))
    poisoned = Poisoned(model, lambda ids, cache: ids.shape == (4, 1) and not poisoned.refused)
    results = run_with(model, prompts, seeded(4))
    assert poisoned.refused == [4]
    for got, want in zip(results, expected, strict=True):
        assert_same(got, want)
