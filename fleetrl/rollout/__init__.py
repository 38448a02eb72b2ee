"""Rollouts: verified agent episodes in groups, and evaluation (pass@1 with a CI)."""
