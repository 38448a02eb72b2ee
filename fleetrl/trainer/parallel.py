"""The trainer across processes: ranks, the sharded model, each rank's share of a batch.

    torchrun --nproc-per-node N ─▶ RANK, WORLD_SIZE, MASTER_ADDR, … in the environment
        ─▶ init_ranks: one process group (gloo on CPU, NCCL on CUDA)
        ─▶ shard_model: FSDP2 (`fully_shard`) per decoder layer, then the whole model;
           each rank holds 1/N of every parameter and of its AdamW state
        ─▶ a step (`fleetrl.trainer.step.train_step`): every rank holds the whole batch,
           so the advantages and the loss's normaliser are those of all of it; each rank
           trains its samples (`share`) and the ranks' gradients add up, so N ranks
           take the step one rank would

Ranks run the same number of forward and backward passes (FSDP2's collectives pair them
up): a rank with fewer samples runs `idle` micro-batches that carry no loss.

Without torchrun (no WORLD_SIZE, or 1) the trainer is one process: `Ranks()`, no process
group, nothing sharded.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from fleetrl.model.qwen3 import Qwen3

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the trainer's processes."""

    rank: int = 0
    world: int = 1
    device: str = "cpu"  # where its shard of the model trains: "cpu" or "cuda:LOCAL_RANK"

    @property
    def distributed(self) -> bool:
        """Whether there is more than one rank (and a process group)."""
        return self.world > 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one that speaks for the trainer (logs, control files)."""
        return self.rank == 0


ONE_RANK = Ranks()  # the trainer as one process

# The other ranks wait in a collective while rank 0 waits for groups from the regions,
# which can take long (regions restarting); a dead rank still fails the others at once.
WAIT_FOR_LEADER = timedelta(hours=24)


def free_port() -> int:
    """A TCP port of this machine nobody listens on now: the rendezvous of ranks started
    on one machine (by `fleetrl train --trainer-ranks`, a benchmark, a test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_ranks() -> Ranks:
    """This process's ranks as torchrun (or the Ray launcher) set them in the environment;
    one rank without them. Joins the process group: gloo on CPU, NCCL on CUDA, where each
    rank trains on the GPU of its LOCAL_RANK."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = "cpu"
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if world == 1:
        return Ranks(device=device)
    if not dist.is_initialized():
        backend = "nccl" if device != "cpu" else "gloo"
        dist.init_process_group(backend, timeout=WAIT_FOR_LEADER)
    return Ranks(dist.get_rank(), dist.get_world_size(), device)


def shard_model(model: Qwen3, ranks: Ranks) -> Qwen3:
    """`model` on the ranks' device, sharded over them with FSDP2 (whole on one rank).
    FSDP averages the ranks' gradients; `train_step` scales each rank's loss by N, so that
    they add up to the batch's (the normaliser counts the whole batch)."""
    model = model.to(ranks.device)
    if not ranks.distributed:
        return model
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)  # the embedding (tied to the output head), the final norm
    assert isinstance(model, FSDPModule)
    return model


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Scale the gradients to a global norm of at most `max_norm`; returns the norm before.
    Sharded gradients' norm is the whole model's, not this rank's shard's."""
    parameters = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)
    return float(norm)


def share(items: list[T], ranks: Ranks) -> list[T]:
    """This rank's items of `items`: every N-th, from its rank on."""
    return items[ranks.rank :: ranks.world]


def most_per_rank(count: int, ranks: Ranks) -> int:
    """How many of `count` items the rank with the most gets (rank 0's share)."""
    return -(-count // ranks.world)


def all_sum(values: list[float], ranks: Ranks) -> list[float]:
    """`values` summed over the ranks (float64; as they are on one rank)."""
    if not ranks.distributed:
        return values
    total = torch.tensor(values, dtype=torch.float64, device=ranks.device)
    dist.all_reduce(total)
    return total.tolist()


def from_leader(make: Callable[[], T], ranks: Ranks) -> T:
    """What `make()` returns on rank 0, on every rank (it runs on rank 0 only); an
    exception it raises is raised on every rank."""
    if not ranks.distributed:
        return make()
    box: list[object] = [None]
    if ranks.leader:
        try:
            box[0] = make()
        except Exception as err:  # handed to every rank and raised there
            box[0] = _Raised(err)
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], _Raised):
        raise box[0].error
    return box[0]  # type: ignore[return-value]


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter in full: gathered from every rank if sharded (all ranks call it)."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


@dataclass
class _Raised:
    error: Exception
