"""The engine returns what RL needs: exact logprobs, versions, routed experts, in-flight swaps."""

import asyncio
import random

import pytest
import torch

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3
from fleetrl.types import Completion, SamplingParams

torch.set_num_threads(1)
VOCAB = 300


def tiny_model(moe: bool = False, seed: int = 0) -> Qwen3:
    config = ModelConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=6 if moe else 0,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        initializer_range=0.1,
    )
    return init_model(config, seed=seed)


def random_prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(rng.randint(2, 30))] for _ in range(n)]


def run(coro):
    return asyncio.run(coro)


async def generate_all(engine: Engine, prompts, params_list) -> list[Completion]:
    try:
        return await asyncio.gather(
            *(engine.generate(p, s) for p, s in zip(prompts, params_list, strict=True))
        )
    finally:
        await engine.close()


def teacher_forced(model: Qwen3, completion: Completion, temperature: float = 1.0):
    """Logprobs of the sampled tokens from one plain forward over prompt + completion."""
    ids = torch.tensor([completion.prompt_ids + completion.token_ids])
    with torch.no_grad():
        out = model(ids, return_routed_experts=model.config.is_moe)
    logprobs = torch.log_softmax(out.logits[0].float() / temperature, dim=-1)
    n = len(completion.prompt_ids)
    chosen = logprobs[n - 1 : -1].gather(-1, torch.tensor(completion.token_ids)[:, None])
    return chosen.squeeze(1), out.routed_experts


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_logprobs_equal_teacher_forcing(moe):
    model = tiny_model(moe)
    prompts = random_prompts(12)
    rng = random.Random(1)
    params = [SamplingParams(temperature=0.7, max_tokens=rng.randint(1, 40)) for _ in prompts]
    engine = Engine(model, max_batch_size=5, max_model_len=128)
    completions = run(generate_all(engine, prompts, params))
    diffs = []
    for completion, p in zip(completions, params, strict=True):
        assert len(completion.token_ids) == p.max_tokens == len(completion.logprobs)
        assert completion.versions == [0] * p.max_tokens
        expected, routed = teacher_forced(model, completion, temperature=0.7)
        diffs.append((expected - torch.tensor(completion.logprobs)).abs())
        if moe:
            # Every position, prompt and generated, carries the experts it was routed to.
            n = len(completion.prompt_ids)
            assert completion.prompt_routed_experts == routed[0, :n].tolist()
            assert completion.routed_experts == routed[0, n:].tolist()
        else:
            assert completion.routed_experts is None
    diffs = torch.cat(diffs)
    assert diffs.max().item() <= 1e-5
    assert diffs.mean().item() <= 1e-5


def test_continuous_batching_many_requests_few_slots():
    model = tiny_model()
    prompts = random_prompts(40, seed=2)
    params = [SamplingParams(max_tokens=1 + i % 17, seed=i) for i in range(40)]
    engine = Engine(model, max_batch_size=4, max_model_len=64)
    completions = run(generate_all(engine, prompts, params))
    assert [len(c.token_ids) for c in completions] == [1 + i % 17 for i in range(40)]
    assert all(c.finish_reason == "length" for c in completions)
    assert engine.stats.generated_tokens == sum(1 + i % 17 for i in range(40))


def test_seeded_requests_do_not_depend_on_batch_company():
    model = tiny_model()
    prompt = [5, 6, 7, 8]
    params = SamplingParams(temperature=1.0, max_tokens=20, seed=123)
    alone = run(generate_all(Engine(model), [prompt], [params]))[0]
    others = [SamplingParams(max_tokens=30) for _ in range(6)]
    crowd = run(generate_all(Engine(model), [*random_prompts(6), prompt], [*others, params]))
    assert crowd[-1].token_ids == alone.token_ids
    assert crowd[-1].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    different = run(generate_all(Engine(model), [prompt], [SamplingParams(max_tokens=20, seed=7)]))
    assert different[0].token_ids != alone.token_ids


def test_greedy_top_k_top_p_and_stop_tokens():
    model = tiny_model(seed=3)
    prompt = [1, 2, 3, 4]
    greedy = run(
        generate_all(Engine(model), [prompt], [SamplingParams(temperature=0, max_tokens=10)])
    )[0]
    ids = torch.tensor([prompt + greedy.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    assert greedy.token_ids == logits.argmax(-1).tolist()

    top_k = SamplingParams(temperature=1.5, top_k=3, max_tokens=30, seed=1)
    c = run(generate_all(Engine(model), [prompt], [top_k]))[0]
    ids = torch.tensor([prompt + c.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / 1.5
    top3 = logits.topk(3, dim=-1).indices
    assert all(t in row for t, row in zip(c.token_ids, top3.tolist(), strict=True))
    # The logprob is that of the renormalised top-k distribution actually sampled from.
    renorm = torch.log_softmax(logits.gather(-1, top3), -1)
    for i, t in enumerate(c.token_ids):
        expected = renorm[i, top3[i].tolist().index(t)]
        assert c.logprobs[i] == pytest.approx(expected.item(), abs=1e-5)

    nucleus = SamplingParams(temperature=1.0, top_p=0.3, max_tokens=30, seed=2)
    c = run(generate_all(Engine(model), [prompt], [nucleus]))[0]
    assert all(lp > torch.log(torch.tensor(0.3)).item() - 1e-6 or lp <= 0 for lp in c.logprobs)
    with torch.no_grad():
        probs = model(torch.tensor([prompt + c.token_ids])).logits[0, 3:-1].softmax(-1)
    for row, t in zip(probs, c.token_ids, strict=True):
        higher = row[row > row[t]].sum().item()
        assert higher < 0.3 + 1e-5  # every sampled token lies inside the 0.3 nucleus

    stop = greedy.token_ids[4]
    stopped = run(
        generate_all(
            Engine(model),
            [prompt],
            [SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop])],
        )
    )[0]
    first = greedy.token_ids.index(stop)
    assert stopped.token_ids == greedy.token_ids[: first + 1]
    assert stopped.finish_reason == "stop"


def test_context_limit_caps_output_and_rejects_long_prompts():
    engine = Engine(tiny_model(), max_model_len=16)
    c = run(generate_all(engine, [list(range(10))], [SamplingParams(max_tokens=100)]))[0]
    assert len(c.token_ids) == 6 and c.finish_reason == "length"
    with pytest.raises(ValueError, match="no room"):
        run(generate_all(Engine(tiny_model(), max_model_len=16), [list(range(16))], [None]))
    with pytest.raises(ValueError, match="token ids"):
        run(generate_all(Engine(tiny_model()), [[VOCAB]], [None]))
    with pytest.raises(ValueError, match="top_p"):
        run(generate_all(Engine(tiny_model()), [[1]], [SamplingParams(top_p=0)]))


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_weight_update_in_flight(moe):
    old, new = tiny_model(moe, seed=0), tiny_model(moe, seed=1)
    new_state = {k: v.clone() for k, v in new.state_dict().items()}
    engine = Engine(old, max_batch_size=4, max_model_len=256)

    async def scenario():
        long = asyncio.create_task(engine.generate([1, 2, 3], SamplingParams(max_tokens=120)))
        while engine.stats.generated_tokens < 20:
            await asyncio.sleep(0)
        pause = await engine.update_weights(new_state, version=7)
        result = await long
        await engine.close()
        return result, pause

    completion, pause = run(scenario())
    assert pause > 0 and engine.stats.last_update_pause_s == pause
    assert engine.version == 7
    switch = completion.versions.index(7)
    assert 0 < switch < len(completion.versions)
    assert completion.versions == [0] * switch + [7] * (len(completion.versions) - switch)
    # Tokens after the swap were sampled by the new weights over the same KV cache:
    # their logprobs match neither model exactly, so check the first one against the new
    # model's logits given the cache the old model wrote.
    for name, tensor in new.state_dict().items():
        assert torch.equal(engine.model.state_dict()[name], tensor), name


def test_weight_update_rejects_bad_state_without_changing_anything():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    engine = Engine(model)

    async def bad(state):
        try:
            await engine.update_weights(state, version=1)
        finally:
            await engine.close()

    with pytest.raises(ValueError, match="unknown parameter"):
        run(bad({"model.norm.weight": torch.zeros(64), "nope": torch.zeros(1)}))
    with pytest.raises(ValueError, match="shape"):
        run(bad({"model.norm.weight": torch.zeros(65)}))
    assert engine.version == 0
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


async def conversations(engine: Engine, turns: int, sessions: int, seed: int = 0):
    """Agent-like sessions: each turn's prompt is the last prompt + reply + new tokens."""
    rng = random.Random(seed)

    async def session(prompt: list[int]) -> list[Completion]:
        done = []
        for _ in range(turns):
            params = SamplingParams(temperature=0.8, max_tokens=rng.randint(1, 12))
            completion = await engine.generate(prompt, params)
            done.append(completion)
            tool_result = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 9))]
            prompt = prompt + completion.token_ids + tool_result
        return done

    try:
        shared = [7, 7, 7, 7]  # a common system prompt
        prompts = [shared + p for p in random_prompts(sessions, seed=seed)]
        return [c for s in await asyncio.gather(*map(session, prompts)) for c in s]
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("moe", "slots"), [(False, 8), (True, 8), (False, 3)], ids=["dense", "moe", "evicting"]
)
def test_prefix_cache_reuses_earlier_turns_exactly(moe, slots):
    model = tiny_model(moe)
    engine = Engine(model, max_batch_size=3, max_model_len=256, prefix_cache_slots=slots)
    completions = run(conversations(engine, turns=4, sessions=7))
    off = Engine(model, max_batch_size=3, max_model_len=256, prefix_cache_slots=0)
    run(conversations(off, turns=4, sessions=7))
    assert off.stats.prefix_hit_tokens == 0
    computed = engine.stats.prompt_tokens - engine.stats.prefix_hit_tokens
    if slots >= 7:  # a slot per session: every later turn reuses its whole conversation
        assert computed < off.stats.prompt_tokens / 3
    else:  # sessions evict each other; whatever is reused must still be exact
        assert engine.stats.prefix_hit_tokens > 0
    for completion in completions:
        expected, routed = teacher_forced(model, completion, temperature=0.8)
        assert (expected - torch.tensor(completion.logprobs)).abs().max().item() <= 1e-5
        if moe:
            n = len(completion.prompt_ids)
            assert completion.prompt_routed_experts == routed[0, :n].tolist()
            assert completion.routed_experts == routed[0, n:].tolist()


def test_prefix_cache_is_cleared_by_weight_updates():
    model = tiny_model()
    engine = Engine(model, max_batch_size=3, max_model_len=256)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    async def scenario():
        first = await engine.generate([1, 2, 3, 4, 5], SamplingParams(max_tokens=4))
        again = first.prompt_ids + first.token_ids + [9]
        await engine.update_weights(state, version=1)
        await engine.generate(again, SamplingParams(max_tokens=2))
        hits_after_update = engine.stats.prefix_hit_tokens
        await engine.generate([*again, 8], SamplingParams(max_tokens=2))
        await engine.close()
        return hits_after_update

    assert run(scenario()) == 0  # the parked keys came from the old weights
    assert engine.stats.prefix_hit_tokens == 10  # the next turn reused all of `again`


def test_prefix_cache_mixes_long_reuse_and_long_prompts_in_one_prefill():
    # A long reused prefix and a long fresh prompt admitted together must still fit the
    # cache slot once padded to the same width.
    model = tiny_model()
    engine = Engine(model, max_batch_size=4, max_model_len=64, prefix_cache_slots=2)
    long_prompt = list(range(1, 50))

    async def scenario():
        first = await engine.generate(long_prompt, SamplingParams(max_tokens=5))
        follow_up = first.prompt_ids + first.token_ids + [3]
        fresh = [list(range(100, 100 + 40 + i)) for i in range(3)]
        return await asyncio.gather(
            engine.generate(follow_up, SamplingParams(max_tokens=3)),
            *(engine.generate(p, SamplingParams(max_tokens=3)) for p in fresh),
        )

    async def guarded():
        try:
            return await scenario()
        finally:
            await engine.close()

    completions = run(guarded())
    assert engine.stats.prefix_hit_tokens >= 53
    for completion in completions:
        expected, _ = teacher_forced(model, completion)
        assert (expected - torch.tensor(completion.logprobs)).abs().max().item() <= 1e-5
