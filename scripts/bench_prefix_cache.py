"""Rollout throughput with and without the engine's prefix cache, side by side.

Held-out `micro` evaluation of the shipped base model (100 tasks x 2 samples, the real
harness, sandboxes and verifier), alternating cache on / off for two rounds. Run with
`.venv/bin/python scripts/bench_prefix_cache.py`; the figures are in docs/benchmarks.md.
"""

import asyncio

import torch

from fleetrl.envs.tasks import load_tasks
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.evaluate import BASE_MODEL, evaluate_policy
from fleetrl.rollout.worker import RolloutConfig, Rollouts


async def measure(slots: int) -> str:
    """One evaluation with `slots` parked prefix-cache slots; a line of figures."""
    config = RolloutConfig()
    engine = Engine(
        load_pretrained(BASE_MODEL),
        max_batch_size=config.max_concurrent,
        max_model_len=config.harness.max_context + 8,
        prefix_cache_slots=slots,
    )
    tasks = load_tasks(suite="micro", split="heldout")
    rollouts = Rollouts(engine, Tokenizer.from_pretrained(BASE_MODEL), config)
    result = await evaluate_policy(rollouts, tasks, samples_per_task=2)
    await engine.close()
    stats = engine.stats
    computed = stats.prompt_tokens - stats.prefix_hit_tokens
    return (
        f"prefix slots {slots:3d}: {result.episodes / result.duration_s:.2f} episodes/s, "
        f"prompt tokens {stats.prompt_tokens}, computed {computed}, "
        f"pass@1 {result.pass_at_1:.3f}"
    )


def main() -> None:
    """Two rounds of cache on / off."""
    torch.set_num_threads(1)
    for round_ in range(2):
        for slots in (RolloutConfig().max_concurrent, 0):
            print(f"round {round_} {asyncio.run(measure(slots))}", flush=True)


if __name__ == "__main__":
    main()
