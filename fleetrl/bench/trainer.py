"""`fleetrl bench trainer`: the trainer's step and publish at 1 and N ranks, side by side.

    the run configuration's model and trainer settings, one global batch
    (groups_per_step x group_size episodes of fixed lengths, random tokens, behaviour
    logprobs the model's own) ─▶ per layout (ranks x threads per rank), in N processes
    as `fleetrl trainer` runs under torchrun: the model sharded (FSDP2 over gloo), AdamW,
    `train_step` on the same batch, each version published from the shards
    (`trainer.publish`) into a local store ─▶ per layout: median step and publish
    seconds, each rank's peak memory while training (resident set, reset after loading)
    and its share of the model state (weights, gradients, AdamW moments), bytes per
    version

Every layout trains the same batch from the same weights, so they take the same steps
(up to float summation order): the figures compare the layouts, not batches.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fleetrl.config import RunConfig
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint
from fleetrl.store.weights import WeightStore, WeightStoreOptions
from fleetrl.trainer.loop import make_optimizer
from fleetrl.trainer.parallel import Ranks, free_port, init_ranks, shard_model
from fleetrl.trainer.publish import publish_version
from fleetrl.trainer.step import TrainSample, samples_from_groups, train_step
from fleetrl.types import Segment, Trajectory


@dataclass(frozen=True)
class Layout:
    """How the trainer runs: this many processes, each with this many torch threads."""

    ranks: int
    threads: int

    @property
    def name(self) -> str:
        """E.g. "2x1": 2 ranks of 1 thread."""
        return f"{self.ranks}x{self.threads}"


@dataclass
class LayoutFigures:
    """What one layout measured."""

    layout: str
    ranks: int
    threads: int
    step_s: float  # median over the measured steps (train_step, all its minibatches)
    publish_s: float  # median wall seconds of a version's publish from the shards
    peak_rss_mb: float  # the largest rank's peak resident set while training
    state_mb_per_rank: float  # the largest rank's weights, gradients and AdamW moments
    delta_bytes: float  # mean bytes of a version's deltas (what a follower downloads)
    loss: float  # the first step's loss: the same in every layout


def parse_layouts(text: str) -> list[Layout]:
    """ "1x1,2x1" → layouts; ValueError for anything else."""
    layouts = []
    for item in text.split(","):
        ranks, _, threads = item.strip().partition("x")
        if not (ranks.isdigit() and threads.isdigit() and int(ranks) > 0 and int(threads) > 0):
            raise ValueError(f"a layout is RANKSxTHREADS, e.g. 2x1, not {item.strip()!r}")
        layouts.append(Layout(int(ranks), int(threads)))
    return layouts


def synthetic_groups(
    config: RunConfig, prompt_tokens: int, completion_tokens: int, seed: int
) -> list[list[Trajectory]]:
    """The run's global batch of episodes, `prompt_tokens` + `completion_tokens` long each,
    random tokens whose behaviour logprobs are the base model's own; rewards 0 or 1 so
    that every group has signal."""
    model = load_pretrained(resolve_checkpoint(config.model.path), dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    groups = []
    for g in range(config.trainer.groups_per_step):
        group = []
        for i in range(config.rollout.group_size):
            ids = torch.randint(vocab, (1, prompt_tokens + completion_tokens), generator=generator)
            with torch.no_grad():
                logprobs = torch.log_softmax(model(ids).logits[0].float(), -1)
            tokens = ids[0].tolist()
            sampled = [logprobs[p - 1, tokens[p]].item() for p in range(prompt_tokens, len(tokens))]
            segment = Segment(
                token_ids=tokens,
                loss_mask=[0] * prompt_tokens + [1] * completion_tokens,
                logprobs=[0.0] * prompt_tokens + sampled,
                versions=[-1] * prompt_tokens + [0] * completion_tokens,
            )
            reward = float((g + i) % 2)
            group.append(Trajectory(f"t{g}", [segment], reward, "finish", 1, 0, 0, 0.0))
        groups.append(group)
    return groups


def run_trainer_bench(
    config: RunConfig,
    layouts: list[Layout],
    steps: int,
    prompt_tokens: int,
    completion_tokens: int,
    seed: int = 0,
) -> dict:
    """Measure every layout on one batch (`steps` measured after one warm-up step)."""
    groups = synthetic_groups(config, prompt_tokens, completion_tokens, seed)
    samples, _ = samples_from_groups(groups, config.trainer.advantage)
    figures = []
    with tempfile.TemporaryDirectory(prefix="fleetrl-bench-trainer-") as tmp:
        batch = Path(tmp) / "batch.pt"
        torch.save(samples, batch)
        for layout in layouts:
            out = Path(tmp) / f"{layout.name}.json"
            args = (
                layout,
                free_port(),
                config,
                str(batch),
                steps,
                str(Path(tmp) / layout.name),
                str(out),
            )
            mp.start_processes(_rank, args=args, nprocs=layout.ranks, start_method="spawn")
            figures.append(LayoutFigures(**json.loads(out.read_text())))
    tokens = sum(sum(s.segment.loss_mask) for s in samples)
    return {
        "model": str(config.model.path),
        "episodes": len(samples),
        "trained_tokens": tokens,
        "tokens_per_episode": prompt_tokens + completion_tokens,
        "steps": steps,
        "layouts": [asdict(f) for f in figures],
    }


def flat_figures(result: dict) -> dict:
    """The result as one level of "LAYOUT figure" keys, for a two-column table."""
    flat = {key: value for key, value in result.items() if key != "layouts"}
    for row in result["layouts"]:
        for key, value in row.items():
            if key not in ("layout", "ranks", "threads"):
                flat[f"{row['layout']} {key}"] = value
    return flat


def _rank(
    rank: int,
    layout: Layout,
    port: int,
    config: RunConfig,
    batch: str,
    steps: int,
    store: str,
    out: str,
) -> None:
    """One rank of one layout: load, shard, train `steps` + 1 steps, publish each."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(layout.ranks),
    )
    torch.set_num_threads(layout.threads)
    torch.manual_seed(config.trainer.seed)
    random.seed(config.trainer.seed)
    ranks = init_ranks()
    tc = config.trainer
    model = shard_model(load_pretrained(resolve_checkpoint(config.model.path)), ranks)
    optimizer = make_optimizer(model, tc.lr, tc.output_norm_lr, tc.weight_decay)
    samples: list[TrainSample] = torch.load(batch, weights_only=False)
    options = WeightStoreOptions(
        full_every=config.store.full_every, publish_dtype=config.store.publish_dtype
    )
    weights = WeightStore(store, options)
    publish_version(weights, 0, model, ranks)
    _reset_peak_memory()
    step_s, publish_s, delta_bytes, losses = [], [], [], []
    for version in range(1, steps + 2):
        start = time.perf_counter()
        stats = train_step(model, optimizer, samples, tc, ranks=ranks)
        step_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        published = publish_version(weights, version, model, ranks)
        publish_s.append(time.perf_counter() - start)
        delta_bytes.append(published.delta_bytes)
        losses.append(stats.loss)
    state = _state_bytes(model, optimizer)
    mine = [_peak_memory_mb(), state / 2**20]
    everyone = _gathered(mine, ranks)
    if ranks.leader:
        figures = LayoutFigures(
            layout=layout.name,
            ranks=layout.ranks,
            threads=layout.threads,
            step_s=statistics.median(step_s[1:]),
            publish_s=statistics.median(publish_s[1:]),
            peak_rss_mb=max(peak for peak, _ in everyone),
            state_mb_per_rank=max(state for _, state in everyone),
            delta_bytes=statistics.mean(delta_bytes[1:]),
            loss=losses[0],
        )
        Path(out).write_text(json.dumps(asdict(figures)))
    if ranks.distributed:
        dist.barrier()
        dist.destroy_process_group()


def _gathered(values: list[float], ranks: Ranks) -> list[list[float]]:
    if not ranks.distributed:
        return [values]
    everyone: list = [None] * ranks.world
    dist.all_gather_object(everyone, values)
    return everyone


def _state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """This rank's weights, gradients (as large as the weights while a step runs) and
    AdamW moments."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    weights = sum(t.numel() * t.element_size() for t in local)
    moments = sum(
        (v.to_local() if hasattr(v, "to_local") else v).numel() * v.element_size()
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    return 2 * weights + moments


def _reset_peak_memory() -> None:
    """Start the peak resident set over (Linux: clear_refs 5), so that it is the
    training's, not the model loading's."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_memory_mb() -> float:
    """The peak resident set since the reset (VmHWM), in MiB."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
