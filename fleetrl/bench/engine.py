"""`fleetrl bench engine`: useful tokens/s of the Engine vs transformers `generate`.

Workload: N requests with random prompts and max_tokens spread uniformly over
[min_tokens, max_tokens], no stop tokens, temperature 1 (top-k/top-p off) — the shape of
RL rollouts, whose lengths are unknown ahead. Both sides run the same weights in the same
process, one after the other, with the same thread count:

- engine: all requests submitted at once to an Engine with `batch_size` slots;
  requests join and leave the batch between decode steps (continuous batching).
- transformers: the requests in arrival order, in static batches of `batch_size`,
  left-padded; each batch runs until its longest request is done.

With `vllm`, a third side: vLLM (`fleetrl.inference.vllm_engine`, the rollout engine
`rollout.engine = "vllm"` starts) on the same checkpoint, in float32 like the others,
the same requests submitted at once, and the same swap halfway.

Each side first runs a short warm-up (first calls into torch are slow), then the sides
alternate for `rounds` rounds; the figures are medians over the rounds, which keeps the
ratios honest on a noisy shared machine. Latency is each request's time from the
workload's start to its completion (all requests are submitted at once).

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

from fleetrl.inference.backends import RolloutEngine
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
    vllm: bool = False  # also time vLLM (the vllm extra)


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
    steps: int  # engine steps (decode steps; prefills ride along in them); 0: unknown
    latencies: list[float]  # s from the workload's start to each request's completion


async def timed_workload(
    engine: RolloutEngine,
    work: Workload,
    new_weights: dict[str, torch.Tensor],
    progress: Progress | None,
    label: str,
) -> EngineRun:
    """All of `work` submitted at once to `engine`; halfway through (in generated
    tokens), `new_weights` swapped in flight, as RL serving sees new versions arrive."""
    task = progress.add_task(label, total=len(work.prompts)) if progress else None
    start = time.perf_counter()
    latencies: list[float] = []
    generated = 0

    async def one(prompt: list[int], n: int, seed: int) -> Completion:
        nonlocal generated
        params = SamplingParams(temperature=1.0, max_tokens=n, seed=seed)
        completion = await engine.generate(prompt, params)
        assert len(completion.token_ids) == n
        latencies.append(time.perf_counter() - start)
        generated += n
        if progress is not None and task is not None:
            progress.advance(task)
        return completion

    async def swap_halfway() -> float:
        # the built-in engine counts tokens as it samples; vLLM's are counted per request
        while max(engine.stats.generated_tokens, generated) < sum(work.max_tokens) // 2:
            await asyncio.sleep(0.001)
        return await engine.update_weights(new_weights, version=engine.version + 1)

    swap = asyncio.create_task(swap_halfway())
    pairs = zip(work.prompts, work.max_tokens, strict=True)
    completions = await asyncio.gather(*(one(p, n, i) for i, (p, n) in enumerate(pairs)))
    elapsed = time.perf_counter() - start
    pause = await swap
    return EngineRun(elapsed, completions, pause, engine.stats.decode_steps, latencies)


async def builtin_round(
    model: Qwen3, work: Workload, config: EngineBenchConfig, progress: Progress | None
) -> EngineRun:
    """The workload on a fresh built-in Engine (`timed_workload`), swapping in (identical)
    weights halfway."""
    new_weights = {name: t.clone() for name, t in model.state_dict().items()}
    engine = Engine(
        model,
        max_batch_size=config.batch_size,
        max_model_len=config.max_prompt + config.max_tokens + 1,
    )
    try:
        return await timed_workload(engine, work, new_weights, progress, "engine")
    finally:
        await engine.close()


def start_vllm(checkpoint: str, config: EngineBenchConfig) -> RolloutEngine:
    """vLLM on `checkpoint`, sized like the built-in engine, in float32, bound to
    `config.threads` cores (it takes tens of seconds to start)."""
    from fleetrl.inference.vllm_engine import VllmEngine

    return VllmEngine(
        checkpoint,
        max_batch_size=config.batch_size,
        max_model_len=config.max_prompt + config.max_tokens + 1,
        dtype="float32",
        seed=config.seed,
        threads=config.threads,
    )


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
    with (
        tempfile.TemporaryDirectory() as checkpoint,
        Progress(disable=not progress, transient=True) as bar,
    ):
        save_pretrained(model, checkpoint)
        hf_model = load_transformers(checkpoint)
        parity = logits_parity(model, hf_model, work.prompts[:4])
        shown = bar if progress else None

        async def rounds() -> tuple[list[EngineRun], list[float], list[EngineRun]]:
            # one event loop for all sides: vLLM's engine belongs to the loop it started in
            vllm = start_vllm(checkpoint, config) if config.vllm else None
            engine_runs: list[EngineRun] = []
            hf_runs: list[float] = []
            vllm_runs: list[EngineRun] = []
            try:
                await builtin_round(model, warmup, config, None)
                run_transformers(hf_model, warmup, config, None)
                if vllm is not None:
                    same = dict(vllm.state_dict())
                    await timed_workload(vllm, warmup, same, None, "vllm")
                for _ in range(config.rounds):
                    engine_runs.append(await builtin_round(model, work, config, shown))
                    hf_runs.append(run_transformers(hf_model, work, config, shown))
                    if vllm is not None:
                        vllm_runs.append(await timed_workload(vllm, work, same, shown, "vllm"))
            finally:
                if vllm is not None:
                    await vllm.close()
            return engine_runs, hf_runs, vllm_runs

        engine_runs, hf_runs, vllm_runs = asyncio.run(rounds())
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
        **_latencies("engine", engine_runs),
        **(_vllm_figures(vllm_runs, engine_s, useful) if vllm_runs else {}),
    }


def _percentile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latencies(side: str, runs: list[EngineRun]) -> dict[str, float]:
    """Median over rounds of each round's p50 and p99 request latency, in ms."""
    p50 = statistics.median(_percentile(r.latencies, 0.5) for r in runs)
    p99 = statistics.median(_percentile(r.latencies, 0.99) for r in runs)
    return {f"{side}_latency_p50_ms": 1000 * p50, f"{side}_latency_p99_ms": 1000 * p99}


def _vllm_figures(runs: list[EngineRun], engine_s: float, useful: int) -> dict[str, float]:
    """vLLM's side: tokens/s, the ratio to the built-in engine, latencies, swap pause."""
    vllm_s = statistics.median(run.seconds for run in runs)
    return {
        "vllm_s": vllm_s,
        "vllm_tokens_per_s": useful / vllm_s,
        "vllm_vs_engine": engine_s / vllm_s,
        "vllm_weight_swap_pause_ms": 1000 * statistics.median(r.swap_pause_s for r in runs),
        **_latencies("vllm", runs),
    }
