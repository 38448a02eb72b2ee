"""vLLM as the rollout engine (the `vllm` extra), on this CPU, with a tiny model fleetrl
wrote: logprobs at the sampling temperature equal the trainer's on the same tokens, a
swap in the middle of a generation keeps the request and stamps each token with the
version that sampled it, and the later tokens are exactly what the new weights give.

One engine serves the whole module (vLLM takes tens of seconds to start), on one event
loop, since vLLM's output handler belongs to the loop that first used it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fleetrl.config import HarnessSection, RolloutSection, TrainerSection
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.inference.vllm_engine import VllmEngine
from fleetrl.model.checkpoint import init_model, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.worker import Rollouts
from fleetrl.trainer.step import samples_from_groups, train_step
from fleetrl.types import Completion, InvalidRequest, SamplingParams, Trajectory

pytest.importorskip("vllm", reason="the vllm extra is not installed")
pytestmark = pytest.mark.slow

TOKENIZER = bundled_tokenizer()
# Two heads of 32: vLLM's CPU attention takes head_dim 32 and up (16 is refused).
CONFIG = ModelConfig.small(TOKENIZER.vocab_size, hidden_size=64, num_hidden_layers=2, heads=2)
PROMPT = TOKENIZER.encode("def add(a, b):\n    return")
STOP = 7  # a token id the random model samples now and then


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vllm-tiny")
    save_pretrained(init_model(CONFIG, seed=0), path)
    TOKENIZER.save(path)
    return path


@pytest.fixture(scope="module")
def engine(loop, checkpoint) -> Iterator[VllmEngine]:
    async def start() -> VllmEngine:
        return VllmEngine(
            checkpoint, max_batch_size=8, max_model_len=512, dtype="float32", threads=1
        )

    engine = loop.run_until_complete(start())
    yield engine
    loop.run_until_complete(engine.close())


def logprobs_of(
    model: Qwen3, prompt: list[int], tokens: list[int], temperature: float
) -> list[float]:
    """The trainer's view: each token's logprob under `model` given everything before it."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids)[0][0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp[torch.arange(len(tokens)), torch.tensor(tokens)].tolist()


class Spy:
    """The engine, keeping every completion it returned; the rest passes through."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine = engine
        self.completions: list[Completion] = []

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    async def generate(self, prompt_ids, params=None) -> Completion:
        completion = await self.engine.generate(prompt_ids, params)
        self.completions.append(completion)
        return completion


def test_logprobs_are_the_trainers_at_the_sampling_temperature(loop, engine, checkpoint):
    params = SamplingParams(temperature=0.7, max_tokens=24, seed=1)
    completion = loop.run_until_complete(engine.generate(PROMPT, params))
    assert completion.prompt_ids == PROMPT and len(completion.token_ids) == 24
    assert completion.finish_reason == "length" and completion.versions == [0] * 24
    model = init_model(CONFIG, seed=0)
    expected = logprobs_of(model, PROMPT, completion.token_ids, 0.7)
    assert completion.logprobs == pytest.approx(expected, abs=1e-4)
    # the same seed, the same tokens
    again = loop.run_until_complete(engine.generate(PROMPT, params))
    assert again.token_ids == completion.token_ids


def test_generation_stops_after_a_stop_token_and_counts_it(loop, engine):
    params = SamplingParams(temperature=1.0, max_tokens=400, seed=3, stop_token_ids=[STOP])
    completion = loop.run_until_complete(engine.generate(PROMPT, params))
    if completion.finish_reason == "stop":
        assert completion.token_ids[-1] == STOP and STOP not in completion.token_ids[:-1]
    else:
        assert STOP not in completion.token_ids
    assert len(completion.logprobs) == len(completion.versions) == len(completion.token_ids)


def test_bad_requests_are_refused_before_they_reach_vllm(loop, engine):
    with pytest.raises(InvalidRequest, match="leaves no room"):
        loop.run_until_complete(engine.generate([1] * 512, SamplingParams()))
    with pytest.raises(InvalidRequest, match="must be token ids in"):
        loop.run_until_complete(engine.generate([CONFIG.vocab_size], SamplingParams()))
    with pytest.raises(InvalidRequest, match="unknown parameter"):
        loop.run_until_complete(engine.update_weights({"nope": torch.zeros(1)}, 9))
    with pytest.raises(InvalidRequest, match="shape"):
        name = "model.norm.weight"
        loop.run_until_complete(engine.update_weights({name: torch.zeros(3)}, 9))


def test_a_swap_in_flight_keeps_the_request_and_stamps_each_token(loop, engine):
    """A long generation; a new version (a subset of the tensors, as the follower sends)
    lands in its middle. The request survives, its tokens carry 0 then 1, and each token
    of version 1 has the new model's logprob given the whole sequence before it (vLLM
    recomputes the request's cache under the new weights)."""
    new = init_model(CONFIG, seed=5)
    changed = {n: t for n, t in new.state_dict().items() if "mlp" in n or "embed" in n}
    merged = init_model(CONFIG, seed=0)
    merged.load_state_dict({**merged.state_dict(), **changed})
    params = SamplingParams(temperature=1.0, max_tokens=400, seed=4)

    async def scenario():
        running = asyncio.create_task(engine.generate(PROMPT, params))
        while engine.stats.running == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        pause = await engine.update_weights(changed, 1)
        return await running, pause

    completion, pause = loop.run_until_complete(scenario())
    versions = completion.versions
    assert 0 < versions.index(1) < len(versions) and pause > 0
    assert versions == sorted(versions) and set(versions) == {0, 1}
    assert engine.version == 1 and engine.stats.weight_updates == 1
    switch = versions.index(1)
    expected = logprobs_of(merged, PROMPT, completion.token_ids, 1.0)
    assert completion.logprobs[switch:] == pytest.approx(expected[switch:], abs=1e-4)
    old = logprobs_of(init_model(CONFIG, seed=0), PROMPT, completion.token_ids, 1.0)
    assert completion.logprobs[: switch - 1] == pytest.approx(old[: switch - 1], abs=1e-4)
    # the follower's view is the new version, tensor for tensor
    held = engine.state_dict()
    for name, tensor in changed.items():
        assert torch.equal(held[name], tensor)
    # a new request sees only the new weights
    after = loop.run_until_complete(engine.generate(PROMPT, SamplingParams(max_tokens=8, seed=2)))
    assert after.versions == [1] * 8
    assert after.logprobs == pytest.approx(
        logprobs_of(merged, PROMPT, after.token_ids, 1.0), abs=1e-4
    )


@pytest.mark.parametrize("harness", ["fleetrl", "mini-swe-agent"])
def test_episodes_on_vllm_are_token_exact_and_the_trainer_accepts_them(loop, engine, harness):
    """A group of a micro task sampled by vLLM through either harness (the random model
    fails it): each recorded segment holds exactly what vLLM sampled, every prompt it was
    sent is a prefix of its segment, and a trainer step on the group (rewards set apart)
    measures no mismatch beyond float32 noise: the logprobs are the trainer's."""
    if harness == "mini-swe-agent":
        pytest.importorskip("minisweagent", reason="the mswe extra is not installed")
    task = load_tasks("micro", split="train")[0]
    spy = Spy(engine)
    rollout = RolloutSection(harness=harness, temperature=0.8)
    budgets = HarnessSection(max_turns=2, max_reply_tokens=24, max_context=500)

    async def group() -> list[Trajectory]:
        rollouts = Rollouts(spy, TOKENIZER, budgets, rollout, episodes=2, gradings=1)
        try:
            return (await rollouts.run_group(task, 2, "g")).trajectories
        finally:
            await rollouts.close()

    trajectories = loop.run_until_complete(group())
    assert len(trajectories) == 2 and spy.completions
    segments = [s for t in trajectories for s in t.segments]
    sampled = {tuple(c.prompt_ids + c.token_ids): c for c in spy.completions}
    for completion in spy.completions:
        owner = [
            s
            for s in segments
            if s.token_ids[: len(completion.prompt_ids)] == completion.prompt_ids
        ]
        assert owner, "every prompt vLLM was sent is a prefix of a recorded segment"
    for segment in segments:
        replies = [i for i, m in enumerate(segment.loss_mask) if m]
        assert replies and all(segment.versions[i] == engine.version for i in replies)
        assert segment.temperature == 0.8
        # the segment's last reply is one completion, token for token, logprob for logprob
        last = sampled[tuple(segment.token_ids[: replies[-1] + 1])]
        assert segment.token_ids[-len(last.token_ids) :] == last.token_ids
        assert segment.logprobs[-len(last.token_ids) :] == pytest.approx(last.logprobs)
    trajectories[0].reward, trajectories[1].reward = 1.0, 0.0
    samples, skipped = samples_from_groups([trajectories], "drgrpo")
    assert not skipped
    model = init_model(CONFIG, seed=0)
    model.load_state_dict({**model.state_dict(), **engine.state_dict()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_step(model, optimizer, samples, TrainerSection(bf16=False))
    assert stats.mismatch_abs_logprob < 1e-4 and stats.grad_norm > 0


def test_bench_engine_times_vllm_beside_the_built_in_engine():
    from typer.testing import CliRunner

    from fleetrl.cli import app

    args = ["bench", "engine", "--vllm", "--json", "--requests", "4", "--min-tokens", "4",
            "--max-tokens", "12", "--rounds", "1", "--threads", "1"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    assert figures["vllm_tokens_per_s"] > 0 and figures["vllm_vs_engine"] > 0
    assert figures["vllm_latency_p99_ms"] >= figures["vllm_latency_p50_ms"] > 0
    assert figures["vllm_weight_swap_pause_ms"] > 0


def test_seeded_long_requests_survive_together_and_a_swap(loop, engine):
    """Eight seeded requests with long prompts at once (more prompt tokens than vLLM's
    default step takes), then a swap while they decode. On CPU a seeded request whose
    prefill vLLM split over steps killed the engine (it rewinds the generator's offset,
    which CPU generators lack): the engine asks vLLM for whole prefills."""
    prompts = [[(i * 7 + j) % 1000 + 1 for j in range(450)] for i in range(8)]
    weights = {n: t.clone() for n, t in engine.state_dict().items()}

    async def scenario():
        running = [
            asyncio.create_task(engine.generate(p, SamplingParams(max_tokens=40, seed=i)))
            for i, p in enumerate(prompts)
        ]
        while engine.stats.running < 8:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        await engine.update_weights(weights, engine.version + 1)
        return await asyncio.gather(*running)

    completions = loop.run_until_complete(scenario())
    assert [len(c.token_ids) for c in completions] == [40] * 8
    assert all(c.finish_reason == "length" for c in completions)


def test_fleetrl_serve_samples_with_vllm(checkpoint):
    """`fleetrl serve --engine vllm`: the same HTTP API, vLLM behind it."""
    import httpx

    from tests.integration.inference.test_server import cli_server

    options = ("--engine", "vllm", "--dtype", "float32", "--threads", "1", "--max-model-len", "512")
    with cli_server(checkpoint, *options, start_s=300) as served:
        body = {"prompt_ids": PROMPT, "sampling": {"max_tokens": 6, "temperature": 0.7, "seed": 1}}
        reply = httpx.post(f"{served.url}/generate", json=body, timeout=60).json()
        assert len(reply["token_ids"]) == 6 and reply["versions"] == [0] * 6
        expected = logprobs_of(init_model(CONFIG, seed=0), PROMPT, reply["token_ids"], 0.7)
        assert reply["logprobs"] == pytest.approx(expected, abs=1e-4)
    assert "vLLM" in served.stdout
