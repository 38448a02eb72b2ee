"""Inference: the batched generation engine and its HTTP server."""

from fleetrl.inference.engine import Engine, EngineStats
from fleetrl.types import Completion, InvalidRequest, SamplingParams

__all__ = ["Completion", "Engine", "EngineStats", "InvalidRequest", "SamplingParams"]
