"""Trainer checkpoints in the run's object store, so a trainer can resume on any machine
and at any number of ranks.

    checkpoints/step_000010/config.json, model.safetensors   the float32 model (HF layout),
                            tokenizer.json, …                with its tokenizer: evaluable
    checkpoints/step_000010/dcp/.metadata, __0_0.distcp, …   model and AdamW state as
                                                             torch.distributed.checkpoint
                                                             wrote them, one file per rank
    checkpoints/step_000010/trainer_state.pt                 RNG, loop state, groups read
                                                             but not trained
    checkpoints/LATEST                                       "step_000010", written last

The model and optimizer go through torch.distributed.checkpoint (DCP): each rank writes its
own shards, and a trainer at another number of ranks loads them resharded (saved at 2,
resumed at 1, or the other way). One rank is the same code without a process group. The
HF copy is gathered to rank 0 (a checkpoint is rare; publishing never gathers).

A checkpoint is atomic: LATEST names it only once all its objects are in, so a trainer
killed while checkpointing resumes from the previous one. The last `keep` checkpoints are
kept; older ones are deleted after a new one is committed. Checkpoints from before DCP
(no dcp/ folder) resume at one rank.
"""

from __future__ import annotations

import contextlib
import io
import random
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from fleetrl.model.checkpoint import load_pretrained, save_pretrained
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.store.objectstore import ObjectNotFound, ObjectStore
from fleetrl.store.run import upload_folder
from fleetrl.trainer.parallel import ONE_RANK, Ranks

PREFIX = "checkpoints/"
LATEST_KEY = f"{PREFIX}LATEST"
STATE_FILE = "trainer_state.pt"
DCP_FOLDER = "dcp/"


def save_checkpoint(
    store: ObjectStore,
    step: int,
    model: Qwen3,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    pending: list[bytes],
    keep: int = 2,
    tokenizer: Tokenizer | None = None,
    ranks: Ranks = ONE_RANK,
) -> str:
    """Write checkpoint `step` (model, optimizer, RNG states, `state`, the `pending` groups
    in their stored form), commit it by LATEST, drop all but the last `keep`. With the
    `tokenizer` beside the model, the checkpoint's folder is one `fleetrl eval` takes.
    Every rank calls it; rank 0 writes all but the other ranks' shards."""
    name = f"step_{step:06d}"
    prefix = f"{PREFIX}{name}/"
    whole = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    model_state, optimizer_state = get_state_dict(model, optimizer)
    with tempfile.TemporaryDirectory(prefix="fleetrl-checkpoint-") as tmp:
        sharded = Path(tmp) / "dcp"
        shards = {"model": model_state, "optimizer": optimizer_state}
        with _one_process_is_meant():
            dcp.save(shards, checkpoint_id=sharded, no_dist=not ranks.distributed)
        upload_folder(store, sharded, prefix + DCP_FOLDER)
        if ranks.leader:
            save_pretrained(model, Path(tmp) / "hf", state=whole)
            if tokenizer is not None:
                tokenizer.save(Path(tmp) / "hf")
            upload_folder(store, Path(tmp) / "hf", prefix)
    if ranks.distributed:
        dist.barrier()  # every rank's shards are in before LATEST names them
    if not ranks.leader:
        return name
    saved = {
        "state": state,
        "pending": pending,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    store.put(prefix + STATE_FILE, buffer.getvalue())
    store.put(LATEST_KEY, name.encode())
    older = sorted(
        {key[len(PREFIX) :].split("/")[0] for key in store.list(PREFIX) if "/step_" in key} - {name}
    )
    older = [n for n in older if n < name]  # later ones: a dead incarnation's, overwritten later
    doomed = older[: max(0, len(older) - (keep - 1))]
    store.delete([key for n in doomed for key in store.list(f"{PREFIX}{n}/")])
    return name


def load_checkpoint(
    store: ObjectStore, model: Qwen3, optimizer: torch.optim.Optimizer, ranks: Ranks = ONE_RANK
) -> tuple[dict[str, Any], list[bytes]] | None:
    """Restore the checkpoint LATEST names into `model`, `optimizer` and the RNGs, resharded
    to this trainer's ranks; returns the loop state and the pending groups, or None when the
    run has no checkpoint yet. Every rank calls it."""
    try:
        name = store.get(LATEST_KEY).decode().strip()
    except ObjectNotFound:
        return None
    prefix = f"{PREFIX}{name}/"
    saved = torch.load(io.BytesIO(store.get(prefix + STATE_FILE)), weights_only=False)
    with tempfile.TemporaryDirectory(prefix="fleetrl-checkpoint-") as tmp:
        keys = store.list(prefix + DCP_FOLDER)
        if keys:
            for key in keys:
                (Path(tmp) / key[len(prefix + DCP_FOLDER) :]).write_bytes(store.get(key))
            model_state, optimizer_state = get_state_dict(model, optimizer)
            loaded = {"model": model_state, "optimizer": optimizer_state}
            with _one_process_is_meant():
                dcp.load(loaded, checkpoint_id=tmp, no_dist=not ranks.distributed)
            set_state_dict(
                model,
                optimizer,
                model_state_dict=loaded["model"],
                optim_state_dict=loaded["optimizer"],
            )
        else:  # from before DCP: the HF model and the optimizer's own state dict
            _load_legacy(store, prefix, model, optimizer, saved, Path(tmp))
    torch.set_rng_state(saved["rng"]["torch"])
    random.setstate(saved["rng"]["python"])
    return saved["state"], saved["pending"]


@contextlib.contextmanager
def _one_process_is_meant() -> Iterator[None]:
    """Silence DCP's warning that one process without a process group saves alone."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _load_legacy(
    store: ObjectStore,
    prefix: str,
    model: Qwen3,
    optimizer: torch.optim.Optimizer,
    saved: dict[str, Any],
    tmp: Path,
) -> None:
    for key in store.list(prefix):
        if not key.endswith(STATE_FILE):
            (tmp / key[len(prefix) :]).write_bytes(store.get(key))
    model.load_state_dict(load_pretrained(tmp).state_dict())
    optimizer.load_state_dict(saved["optimizer"])
