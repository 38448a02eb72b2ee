"""Fixtures of the verifier's end-to-end tests: the micro task they grade, a fresh checkout
of it, and an empty outcome cache for every test (each grades for real)."""

import pytest

from fleetrl.envs.tasks.suites import get_task
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.envs.verifier import OutcomeCache
from fleetrl.envs.verifier import cache as verifier_cache
from tests.env.envs.verifier.nkims_task import TASK_ID


@pytest.fixture(autouse=True)
def fresh_outcomes(monkeypatch):
    """Every test grades for real: no outcome is carried over from another test."""
    cache = OutcomeCache()
    monkeypatch.setattr(verifier_cache, "OUTCOMES", cache)
    return cache


@pytest.fixture
def task():
    return get_task(TASK_ID)


@pytest.fixture
def workspace(task, tmp_path):
    return checkout(task, tmp_path / "ws")
