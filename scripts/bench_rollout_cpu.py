"""Where rollout CPU goes, and the verifier's outcome cache, side by side.

Held-out `micro` evaluation of the shipped base model (100 tasks x 2 samples, real
harness, bwrap sandboxes and verifier, one engine thread), run twice in one process: with
every submission graded, then with identical submissions graded once (the default).
Prints wall time, the whole machine's CPU seconds (from /proc/stat: engine, sandboxes,
tools, pytest) and this process's own. Also times decode attention, the fused kernel vs
`decode_attention`, at one new token per row. Run with
`.venv/bin/python scripts/bench_rollout_cpu.py`; figures are in docs/benchmarks.md.
"""

import resource
import time

import torch
import torch.nn.functional as F

from fleetrl.config_files import load_config
from fleetrl.envs.verifier import cache
from fleetrl.model.checkpoint import BASE_MODEL
from fleetrl.model.qwen3 import decode_attention
from fleetrl.rollout.evaluate import evaluate_checkpoint


def machine_cpu_s() -> float:
    with open("/proc/stat") as stat:
        user, nice, system = map(int, stat.readline().split()[1:4])
    return (user + nice + system) / 100


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def evaluation(cache_capacity: int) -> None:
    cache.OUTCOMES = cache.OutcomeCache(cache_capacity)
    wall, machine, own = time.monotonic(), machine_cpu_s(), own_cpu_s()
    config = load_config(overrides={"eval": {"episodes": 200}})
    result = evaluate_checkpoint(BASE_MODEL, config)
    print(
        f"outcome cache {'on ' if cache_capacity else 'off'}: pass@1 {result.pass_at_1:.3f}  "
        f"wall {time.monotonic() - wall:5.1f} s  machine CPU {machine_cpu_s() - machine:5.1f} s"
        f"  this process {own_cpu_s() - own:5.1f} s  gradings {cache.OUTCOMES.misses}"
    )


def attention(rows: int = 26, cached: int = 563, repeats: int = 200) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, 4, 1, 64, generator=g)
    k, v = torch.randn(2, rows, 2, cached, 64, generator=g)
    mask = torch.ones(rows, 1, 1, cached, dtype=torch.bool)
    runs = {
        "fused kernel": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True
        ),
        "decode_attention": lambda: decode_attention(q, k, v, mask),
    }
    for name, run in runs.items():
        run()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        print(f"{name:17s} {(time.perf_counter() - start) / repeats * 1e3:.3f} ms per layer call")


if __name__ == "__main__":
    torch.set_num_threads(1)
    attention()
    evaluation(cache_capacity=0)
    evaluation(cache_capacity=4096)
