"""Trainer checkpoints in the run's object store, so a trainer can resume on any machine.

    checkpoints/step_000010/config.json, model.safetensors   the float32 model (HF layout),
                            tokenizer.json, …                with its tokenizer: evaluable
    checkpoints/step_000010/trainer_state.pt                 optimizer, RNG, loop state,
                                                             groups read but not trained
    checkpoints/LATEST                                       "step_000010", written last

A checkpoint is atomic: LATEST names it only once all its objects are in, so a trainer
killed while checkpointing resumes from the previous one. The last `keep` checkpoints are
kept; older ones are deleted after a new one is committed.
"""

from __future__ import annotations

import io
import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from fleetrl.model.checkpoint import load_pretrained, save_pretrained
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.store.objectstore import ObjectNotFound, ObjectStore
from fleetrl.store.run import upload_folder

PREFIX = "checkpoints/"
LATEST_KEY = f"{PREFIX}LATEST"
STATE_FILE = "trainer_state.pt"


def save_checkpoint(
    store: ObjectStore,
    step: int,
    model: Qwen3,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    pending: list[bytes],
    keep: int = 2,
    tokenizer: Tokenizer | None = None,
) -> str:
    """Write checkpoint `step` (model, optimizer, RNG states, `state`, the `pending` groups
    in their stored form), commit it by LATEST, drop all but the last `keep`. With the
    `tokenizer` beside the model, the checkpoint's folder is one `fleetrl eval` takes."""
    name = f"step_{step:06d}"
    prefix = f"{PREFIX}{name}/"
    with tempfile.TemporaryDirectory(prefix="fleetrl-checkpoint-") as tmp:
        save_pretrained(model, Path(tmp))
        if tokenizer is not None:
            tokenizer.save(tmp)
        upload_folder(store, Path(tmp), prefix)
    saved = {
        "optimizer": optimizer.state_dict(),
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
    store: ObjectStore, model: Qwen3, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], list[bytes]] | None:
    """Restore the checkpoint LATEST names into `model`, `optimizer` and the RNGs; returns
    the loop state and the pending groups, or None when the run has no checkpoint yet."""
    try:
        name = store.get(LATEST_KEY).decode().strip()
    except ObjectNotFound:
        return None
    prefix = f"{PREFIX}{name}/"
    with tempfile.TemporaryDirectory(prefix="fleetrl-checkpoint-") as tmp:
        for key in store.list(prefix):
            if not key.endswith(STATE_FILE):
                (Path(tmp) / key[len(prefix) :]).write_bytes(store.get(key))
        model.load_state_dict(load_pretrained(Path(tmp)).state_dict())
    saved = torch.load(io.BytesIO(store.get(prefix + STATE_FILE)), weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"]["torch"])
    random.setstate(saved["rng"]["python"])
    return saved["state"], saved["pending"]
