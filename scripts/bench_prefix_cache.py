"""Rollout throughput with and without the engine's prefix cache, side by side.

Held-out `micro` evaluation of the shipped base model (100 tasks x 2 samples, the real
harness, sandboxes and verifier), alternating cache on / off for two rounds. Run with
`.venv/bin/python scripts/bench_prefix_cache.py`; the figures are in docs/benchmarks.md.
"""

import asyncio

import torch

from fleetrl.config_files import load_config
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import BASE_MODEL, load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.session import evaluate_policy
from fleetrl.rollout.worker import Rollouts

CONFIG = load_config()  # the defaults of the run configuration tree, as `fleetrl eval` uses


async def measure(slots: int) -> str:
    """One evaluation with `slots` parked prefix-cache slots; a line of figures."""
    episodes = CONFIG.eval.max_concurrent
    engine = Engine(
        load_pretrained(BASE_MODEL),
        max_batch_size=episodes,
        max_model_len=CONFIG.harness.max_context + 8,
        prefix_cache_slots=slots,
    )
    tasks = load_tasks(suite="micro", split="heldout")
    tokenizer = Tokenizer.from_pretrained(BASE_MODEL)
    gradings = CONFIG.eval.max_concurrent_verify
    rollouts = Rollouts(engine, tokenizer, CONFIG.harness, CONFIG.rollout, episodes, gradings)
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
        for slots in (CONFIG.eval.max_concurrent, 0):
            print(f"round {round_} {asyncio.run(measure(slots))}", flush=True)


if __name__ == "__main__":
    main()
