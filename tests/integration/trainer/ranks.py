"""Run a function at N ranks: N real processes joined in one gloo process group, as
torchrun would start them on one machine."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fleetrl.trainer.parallel import Ranks, free_port, init_ranks


def at_ranks(world: int, target: Callable[..., None], *args: Any) -> None:
    """Call `target(ranks, *args)` in `world` spawned processes (`target` must be a module
    level function); raises if any of them fails."""
    mp.start_processes(
        _enter, args=(world, free_port(), target, args), nprocs=world, start_method="spawn"
    )


def _enter(rank: int, world: int, port: int, target: Callable[..., None], args: tuple) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.set_num_threads(1)
    ranks: Ranks = init_ranks()
    try:
        target(ranks, *args)
        dist.barrier()  # no rank leaves while another still talks to it
    finally:
        dist.destroy_process_group()
