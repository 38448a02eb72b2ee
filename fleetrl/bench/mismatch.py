"""`fleetrl bench mismatch`: how far an engine's logprobs lie from the trainer's, on the
tokens the engine sampled, per engine, serving dtype and MoE routing replay.

    held-out tasks ─▶ per arm (engine × serving dtype): the engine samples real episodes
                      in fleetrl's harness, the run configuration's budgets, T = 1
                   ─▶ the trainer's model (float32) scores exactly those tokens, twice for
                      an MoE model: with the engine's routing replayed, and routing itself
                   ─▶ per arm and scoring, over every sampled token:
                      k3 KL(μ ‖ π), mean and p99 |log π - log μ|, the share of tokens the
                      TIS correction truncates and the MIS correction masks (at
                      trainer.correction_cap), and for MoE the share of input positions
                      whose top-k experts (as a set) differ from the engine's, per MoE
                      layer and in any layer

An engine that returns no routing (vLLM on CPU) has no replay scoring and no routing
comparison: its rows say so (`routes: false`). The episodes are not graded: the
benchmark reads tokens, not rewards.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.envs.tasks.suites import configured_tasks
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.worker import Rollouts, open_rollout_engine
from fleetrl.trainer.step import SequenceBatch, TrainSample, collate
from fleetrl.types import Segment


@dataclass
class Arm:
    """One engine, one serving dtype, one way the trainer scored its tokens."""

    model: str
    engine: str  # fleetrl or vllm
    dtype: str  # the engine's serving dtype
    scoring: str  # "replay": the engine's routing replayed; "own": the trainer routes
    routes: bool  # whether the engine returned MoE routing
    segments: int  # of the episodes sampled, one per task
    tokens: int  # sampled tokens scored
    kl_k3: float  # mean over tokens of w - 1 - log w, w = π/μ: k3 of KL(μ ‖ π)
    abs_logprob_mean: float  # mean |log π - log μ|
    abs_logprob_p99: float
    tis_truncated: float  # share of tokens with w > C
    mis_masked: float  # share of tokens with w outside [1/C, C]
    routing_differs_any: float | None = None  # share of positions, any MoE layer differing
    routing_differs_per_layer: list[float] = field(default_factory=list)


def _segments(
    config: RunConfig, checkpoint: Path, engine: str, dtype: str, tasks: int
) -> list[Segment]:
    """Every segment of one ungraded episode per task (`tasks` held-out tasks), sampled
    by `engine` serving in `dtype` at T = 1."""
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    rollout = config.rollout.model_copy(
        update={"engine": engine, "engine_dtype": dtype, "temperature": 1.0}
    )
    chosen = configured_tasks(config.tasks, config.eval.split)[:tasks]
    episodes = max(1, min(len(chosen), config.eval.max_concurrent))

    async def main() -> list[Segment]:
        policy = open_rollout_engine(
            checkpoint, config.harness, rollout, episodes, config.trainer.seed
        )
        try:
            rollouts = Rollouts(policy, tokenizer, config.harness, rollout, episodes, 1)
            try:
                done = await asyncio.gather(*(rollouts.run_one(t, grade=False) for t in chosen))
            finally:
                await rollouts.close()
        finally:
            await policy.close()
        return [s for trajectory in done for s in trajectory.segments]

    return asyncio.run(main())


def _score(
    model: Qwen3, segment: Segment, replay: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, SequenceBatch]:
    """(trainer logprobs, engine logprobs, trainer routing [T, L, k] or None, batch) of
    the sampled tokens of one segment, at its temperature."""
    batch = collate([TrainSample(segment, 0.0)], replay=replay)
    at = batch.mask.bool()
    with torch.no_grad():
        out = model(
            batch.inputs,
            routed_experts=batch.routed_experts,
            return_routed_experts=model.config.is_moe,
        )
    logits = out.logits[at].float() / batch.temperature[0]
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, batch.targets[at][:, None])
    routes = None if out.routed_experts is None else out.routed_experts[0]
    return chosen.squeeze(-1), batch.behaviour[at], routes, batch


def measure_arm(
    model: Qwen3,
    name: str,
    engine: str,
    dtype: str,
    segments: list[Segment],
    replay: bool,
    cap: float,
) -> Arm:
    """The mismatch of `segments` (one arm's) as the trainer's `model` scores them."""
    ours, theirs, differs = [], [], []
    routed = bool(segments) and all(s.routed_experts is not None for s in segments)
    for segment in segments:
        if sum(segment.loss_mask) == 0:
            continue
        logprobs, behaviour, routes, batch = _score(model, segment, replay and routed)
        ours.append(logprobs)
        theirs.append(behaviour)
        if routed and routes is not None and not replay:
            n = len(segment.token_ids) - 1
            engine_routes = torch.tensor(segment.routed_experts[:-1])  # [T, L, k] inputs
            positions = batch.mask[0, :n].bool()
            mine = routes[:n][positions].sort(dim=-1).values
            given = engine_routes[positions].sort(dim=-1).values
            differs.append((mine != given).any(dim=-1))  # [P, L]
    log_w = torch.cat(ours) - torch.cat(theirs)
    w = log_w.exp()
    arm = Arm(
        model=name,
        engine=engine,
        dtype=dtype,
        scoring="replay" if replay else "own",
        routes=routed,
        segments=len(segments),
        tokens=int(log_w.numel()),
        kl_k3=float((w - 1 - log_w).mean()),
        abs_logprob_mean=float(log_w.abs().mean()),
        abs_logprob_p99=float(torch.quantile(log_w.abs(), 0.99)),
        tis_truncated=float((w > cap).float().mean()),
        mis_masked=float(((w > cap) | (w < 1 / cap)).float().mean()),
    )
    if differs:
        table = torch.cat(differs).float()
        arm.routing_differs_any = float(table.any(dim=-1).float().mean())
        arm.routing_differs_per_layer = [round(float(x), 6) for x in table.mean(dim=0)]
    return arm


def bench_mismatch(
    config: RunConfig,
    models: list[str],
    engines: list[str],
    dtypes: list[str],
    tasks: int,
    echo=print,
) -> list[Arm]:
    """Every arm of the benchmark (module docstring), in order: model, engine, dtype,
    scoring (replay first where the engine returned routes)."""
    arms = []
    for name in models:
        checkpoint = resolve_checkpoint(name)
        trainer_model = load_pretrained(checkpoint, dtype=torch.float32).eval()
        for engine in engines:
            for dtype in dtypes:
                echo(f"{name}: {engine} serving {dtype}, {tasks} held-out episodes")
                segments = _segments(config, checkpoint, engine, dtype, tasks)
                moe = trainer_model.config.is_moe
                routed = moe and all(s.routed_experts is not None for s in segments)
                for replay in [True, False] if routed else [False]:
                    arm = measure_arm(
                        trainer_model,
                        name,
                        engine,
                        dtype,
                        segments,
                        replay,
                        config.trainer.correction_cap,
                    )
                    arms.append(arm)
    return arms
