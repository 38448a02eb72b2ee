"""fleetrl: asynchronous, distributed reinforcement learning for coding-agent models."""

__version__ = "0.1.0"
