"""Time one RL trainer step of the shipped base model on a batch shaped like the demo's.

    python scripts/time_train_step.py [--threads 1] [--minibatches 2] [--repeats 2]
        [--micro-batch-size 16 4] [--float32]

The batch: 64 sequences of 300-600 tokens (random ids, seeded), a 120-token prompt, then
alternating 60-token runs of sampled and tool tokens, advantages of ±0.5: the sizes of a
demo step, none of its content. Prints the wall time of each `train_step` call; the first
includes warm-up. With several micro-batch sizes each repeat times every size in turn (one
model, its weights barely moved by the tiny learning rate), so the sizes are measured side
by side. `--float32` forces the path of a CPU without AVX512-BF16. A side measurement of
the trainer alone, without the engine that shares the cores during `fleetrl train`.
"""

import argparse
import random
import time

import torch

from fleetrl.config import TrainerSection
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint
from fleetrl.trainer.step import TrainSample, train_step
from fleetrl.types import Segment


def demo_shaped_batch(rng: random.Random) -> list[TrainSample]:
    """64 samples with the demo's sequence lengths and share of sampled tokens."""
    samples = []
    for _ in range(64):
        n = rng.randint(300, 600)
        mask = [0] * 120 + [1 if (j // 60) % 2 == 0 else 0 for j in range(n - 120)]
        ids = [rng.randrange(1000) for _ in range(n)]
        logprobs = [-0.1 * m for m in mask]
        versions = [0 if m else -1 for m in mask]
        segment = Segment(ids, mask, logprobs, versions)
        samples.append(TrainSample(segment, rng.choice([-0.5, 0.5])))
    return samples


def main() -> None:
    """Print the wall time of each step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--minibatches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--micro-batch-size", type=int, nargs="+", default=[4])
    parser.add_argument("--float32", action="store_true", help="no bfloat16 autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_pretrained(resolve_checkpoint("base"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    bf16 = False if args.float32 else None
    samples = demo_shaped_batch(random.Random(0))
    for _ in range(args.repeats):
        for size in args.micro_batch_size:
            config = TrainerSection(minibatches=args.minibatches, micro_batch_size=size, bf16=bf16)
            start = time.perf_counter()
            train_step(model, optimizer, samples, config)
            print(f"micro-batch {size}: train_step {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
