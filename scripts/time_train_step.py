"""Time one RL trainer step of the shipped base model on a batch shaped like the demo's.

    python scripts/time_train_step.py [--threads 1] [--minibatches 2] [--repeats 2]

The batch: 64 sequences of 300-600 tokens (random ids, seeded), a 120-token prompt, then
alternating 60-token runs of sampled and tool tokens, advantages of ±0.5: the sizes of a
demo step, none of its content. Prints the wall time of each `train_step` call; the first
includes warm-up. A side measurement of the float32 trainer alone, without the engine that
shares the cores during `fleetrl train`.
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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_pretrained(resolve_checkpoint("base"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    config = TrainerSection(minibatches=args.minibatches)
    samples = demo_shaped_batch(random.Random(0))
    for _ in range(args.repeats):
        start = time.perf_counter()
        train_step(model, optimizer, samples, config)
        print(f"train_step: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
