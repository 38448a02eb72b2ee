"""`fleetrl bench engine`: useful tokens/s of the Engine vs transformers `generate`.

Workload: N requests with random prompts and max_tokens spread uniformly over
[min_tokens, max_tokens], no stop tokens, temperature 1 (top-k/top-p off) — the shape of
RL rollouts, whose lengths are unknown ahead. Both sides run the same weights in the same
process, one after the other, with the same thread count:

- engine: all requests submitted at once to an Engine with `batch_size` slots;
  requests join and leave the batch between decode steps (continuous batching).
- transformers: the requests in arrival order, in static batches of `batch_size`,
  left-padded; each batch runs until its longest request is done.

Each side first runs a short warm-up (first calls into torch are slow), then the two
alternate for `rounds` rounds; the figures are medians over the rounds, which keeps the
ratio honest on a noisy shared machine.

"Useful" tokens are those the requests asked for; tokens a static batch generates past a
request's own max_tokens count as time spent but not as output.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

import torch
from rich.progress import Progress

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3
from fleetrl.types import Completion, SamplingParams


@dataclass
class EngineBenchConfig:
    """Workload and model of the engine benchmark."""

    requests: int = 64
    min_tokens: int = 16  # smallest max_tokens of a request
    max_tokens: int = 256  # largest max_tokens of a request
    min_prompt: int = 16  # prompt length range, tokens
    max_prompt: int = 64
    batch_size: int = 64  # engine slots; transformers static batch size
    threads: int = 2
    rounds: int = 3  # alternating timed runs of each side; medians reported
    seed: int = 0
    # The small model: Qwen3 layout, ~3.5 M parameters.
    vocab_size: int = 1024
    hidden_size: int = 256
    num_hidden_layers: int = 4


@dataclass
class Workload:
    prompts: list[list[int]]
    max_tokens: list[int]


def make_workload(config: EngineBenchConfig) -> Workload:
    """Deterministic random prompts and output lengths."""
    rng = random.Random(config.seed)
    prompts = [
        [
            rng.randrange(config.vocab_size)
            for _ in range(rng.randint(config.min_prompt, config.max_prompt))
        ]
        for _ in range(config.requests)
    ]
    lengths = [rng.randint(config.min_tokens, config.max_tokens) for _ in range(config.requests)]
    return Workload(prompts, lengths)


@dataclass
class EngineRun:
    seconds: float  # wall time for the whole workload
    completions: list[Completion]
    swap_pause_s: float  # decoding pause of the weight swap made halfway through
    steps: int  # engine steps (decode steps; prefills ride along in them)


def run_engine(
    model: Qwen3, work: Workload, config: EngineBenchConfig, progress: Progress | None
) -> EngineRun:
    """Run the workload on an Engine; halfway through, swap in (identical) weights in flight.

    The swap makes the run look like RL serving, where new versions arrive mid-generation,
    and measures the decoding pause it costs.
    """
    task = progress.add_task("engine", total=len(work.prompts)) if progress else None
    new_weights = {name: t.clone() for name, t in model.state_dict().items()}

    async def one(engine: Engine, prompt: list[int], n: int, seed: int) -> Completion:
        params = SamplingParams(temperature=1.0, max_tokens=n, seed=seed)
        completion = await engine.generate(prompt, params)
        assert len(completion.token_ids) == n
        if progress is not None and task is not None:
            progress.advance(task)
        return completion

    async def swap_halfway(engine: Engine) -> float:
        while engine.stats.generated_tokens < sum(work.max_tokens) // 2:
            await asyncio.sleep(0.001)
        return await engine.update_weights(new_weights, version=1)

    async def main() -> EngineRun:
        engine = Engine(
            model,
            max_batch_size=config.batch_size,
            max_model_len=config.max_prompt + config.max_tokens + 1,
        )
        start = time.perf_counter()
        swap = asyncio.create_task(swap_halfway(engine))
        pairs = zip(work.prompts, work.max_tokens, strict=True)
        completions = await asyncio.gather(
            *(one(engine, p, n, i) for i, (p, n) in enumerate(pairs))
        )
        elapsed = time.perf_counter() - start
        pause = await swap
        await engine.close()
        return EngineRun(elapsed, completions, pause, engine.stats.decode_steps)

    return asyncio.run(main())


def logprob_mismatch(model: Qwen3, completions: list[Completion]) -> tuple[float, float]:
    """Mean and max |engine logprob - teacher-forced logprob| over the completions' tokens."""
    diffs = []
    with torch.inference_mode():
        for c in completions:
            logits = model(torch.tensor([c.prompt_ids + c.token_ids])).logits[0].float()
            logprobs = torch.log_softmax(logits[len(c.prompt_ids) - 1 : -1], dim=-1)
            forced = logprobs.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
            diffs.append((forced - torch.tensor(c.logprobs)).abs())
    flat = torch.cat(diffs)
    return flat.mean().item(), flat.max().item()


def logits_parity(model: Qwen3, reference: torch.nn.Module, prompts: list[list[int]]) -> float:
    """Max |logit difference| between fleetrl and transformers on the same prompts."""
    with torch.inference_mode():
        return max(
            (model(torch.tensor([p])).logits - reference(torch.tensor([p])).logits)
            .abs()
            .max()
            .item()
            for p in prompts
        )


def load_transformers(checkpoint: str) -> torch.nn.Module:
    """The reference implementation of the same checkpoint, set to never stop early."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def run_transformers(
    model: torch.nn.Module, work: Workload, config: EngineBenchConfig, progress: Progress | None
) -> float:
    """Seconds for transformers' `generate` to finish the workload in static batches."""
    batches = range(0, len(work.prompts), config.batch_size)
    task = progress.add_task("transformers", total=len(work.prompts)) if progress else None
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    for first in batches:
        prompts = work.prompts[first : first + config.batch_size]
        new_tokens = max(work.max_tokens[first : first + config.batch_size])
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
            )
        assert out.shape[1] == width + new_tokens
        if progress is not None and task is not None:
            progress.advance(task, len(prompts))
    return time.perf_counter() - start


def run_engine_bench(
    config: EngineBenchConfig, progress: bool = True
) -> dict[str, float | int | str]:
    """Run both sides on one model and workload; return the figures (JSON-ready)."""
    torch.set_num_threads(config.threads)
    model_config = ModelConfig.small(
        config.vocab_size, config.hidden_size, config.num_hidden_layers
    )
    model = init_model(model_config, seed=config.seed)
    work = make_workload(config)
    warmup = Workload(work.prompts[:4], [8] * min(4, len(work.prompts)))
    useful = sum(work.max_tokens)
    engine_runs: list[EngineRun] = []
    hf_runs: list[float] = []
    with (
        tempfile.TemporaryDirectory() as checkpoint,
        Progress(disable=not progress, transient=True) as bar,
    ):
        save_pretrained(model, checkpoint)
        hf_model = load_transformers(checkpoint)
        parity = logits_parity(model, hf_model, work.prompts[:4])
        run_engine(model, warmup, config, None)
        run_transformers(hf_model, warmup, config, None)
        for _ in range(config.rounds):
            engine_runs.append(run_engine(model, work, config, bar if progress else None))
            hf_runs.append(run_transformers(hf_model, work, config, bar if progress else None))
    engine_s = statistics.median(run.seconds for run in engine_runs)
    hf_s = statistics.median(hf_runs)
    mean_diff, max_diff = logprob_mismatch(model, engine_runs[-1].completions[:16])
    return {
        **{f"config_{k}": v for k, v in asdict(config).items()},
        "parameters": sum(p.numel() for p in model.parameters()),
        "useful_tokens": useful,
        "engine_s": engine_s,
        "transformers_s": hf_s,
        "engine_tokens_per_s": useful / engine_s,
        "transformers_tokens_per_s": useful / hf_s,
        "speedup_vs_transformers": hf_s / engine_s,
        "weight_swap_pause_ms": 1000 * statistics.median(r.swap_pause_s for r in engine_runs),
        "engine_mean_step_ms": 1000 * engine_s / engine_runs[-1].steps,
        "logprob_mean_abs_diff": mean_diff,
        "logprob_max_abs_diff": max_diff,
        "logits_max_abs_diff_vs_transformers": parity,
    }
