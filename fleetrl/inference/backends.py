"""The rollout engine seam: fleetrl's own engine or vLLM, behind one interface.

    rollout.engine = "fleetrl" ─▶ Engine (fleetrl.inference.engine): PyTorch, in process
                   = "vllm"    ─▶ VllmEngine (fleetrl.inference.vllm_engine): the vllm
                                  extra, in its own processes, the same interface

The harness, the recording endpoint, the rollout worker and the weight follower use only
`RolloutEngine`'s members, so they do not know which backend samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from fleetrl.inference.engine import Engine, EngineStats
from fleetrl.model.checkpoint import DTYPES, load_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.types import Completion, SamplingParams

BACKENDS = ("fleetrl", "vllm")
SERVED_DTYPES = ("float32", "bfloat16")


@runtime_checkable
class RolloutEngine(Protocol):
    """What samples a policy for rollouts and serving, and follows its weight versions."""

    version: int  # the policy version loaded now
    max_model_len: int  # prompt plus completion, in tokens
    config: ModelConfig  # the architecture served
    stats: EngineStats

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        """One completion of `prompt_ids`: tokens, logprobs at the sampling temperature,
        each token's version."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights served now, by name (what a weight follower diffs against)."""
        ...

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Swap in a new version in flight (a subset of tensors allowed); the pause, s."""
        ...

    async def close(self) -> None:
        """Stop; requests still running fail."""
        ...


class EngineUnavailable(Exception):
    """The chosen backend cannot run here (its extra is not installed)."""


def open_engine(
    backend: str,
    checkpoint: str | Path,
    max_batch_size: int,
    max_model_len: int,
    dtype: str = "auto",
    seed: int = 0,
    threads: int | None = None,
) -> RolloutEngine:
    """A `backend` engine ("fleetrl" or "vllm") serving `checkpoint`, `max_batch_size`
    requests at once (and as many finished ones kept for prefix reuse) in contexts of
    `max_model_len` tokens. `dtype` "auto" serves the built-in engine in float32 (the
    trainer's) and vLLM in bfloat16 (production's). Raises EngineUnavailable when vLLM
    is chosen and not installed."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown engine {backend!r}: choose one of {', '.join(BACKENDS)}")
    if dtype != "auto" and dtype not in SERVED_DTYPES:
        raise ValueError(f"unknown engine dtype {dtype!r}: auto, float32 or bfloat16")
    if backend == "vllm":
        from fleetrl.inference.vllm_engine import VllmEngine, vllm_available

        if not vllm_available():
            raise EngineUnavailable(
                "the vllm engine needs vLLM: pip install 'fleetrl[vllm]' (see the README's extras)"
            )
        return VllmEngine(
            checkpoint,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
            dtype="bfloat16" if dtype == "auto" else dtype,
            seed=seed,
            threads=threads,
        )
    model = load_pretrained(checkpoint, dtype=DTYPES["float32" if dtype == "auto" else dtype])
    return Engine(
        model,
        max_batch_size=max_batch_size,
        max_model_len=max_model_len,
        seed=seed,
        prefix_cache_slots=max_batch_size,
    )
