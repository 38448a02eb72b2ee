"""Launchers: the trainer and rollout regions as separate processes that share a store."""
