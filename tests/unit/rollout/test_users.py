"""The simulated users' arrival process and their summary (the sessions themselves run
against a real server in tests/integration/rollout/test_users.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from fleetrl.rollout.users import (
    UserSession,
    arrival_offsets,
    sampled_versions,
    summarise,
    task_draws,
)
from fleetrl.types import Task


def test_arrivals_are_a_seeded_poisson_process() -> None:
    offsets = arrival_offsets(4.0, 20_000, random.Random(7))
    gaps = np.diff([0.0, *offsets])
    assert (gaps > 0).all()
    assert gaps.mean() == pytest.approx(1 / 4.0, rel=0.03)
    assert np.std(gaps) == pytest.approx(1 / 4.0, rel=0.05)  # exponential: sd = mean
    assert arrival_offsets(4.0, 5, random.Random(7)) == offsets[:5]


def test_summary_of_a_population() -> None:
    sessions = [
        UserSession("a", "t", arrived=0.0, ended=30.0, reward=1.0, request_latencies_s=[1.0]),
        UserSession("b", "t", arrived=10.0, ended=60.0, reward=0.0, request_latencies_s=[3.0]),
        UserSession("c", "t", arrived=20.0, ended=25.0, error="ConnectError: refused"),
    ]
    figures = summarise(sessions)
    assert figures == figures | {"sessions": 3, "failed": 1, "mean_reward": 0.5}
    assert figures["latency_p50_s"] == pytest.approx(2.0)
    assert figures["sessions_per_minute"] == pytest.approx(2.0)  # 2 done in 60 s
    assert summarise([])["latency_p99_s"] is None


def test_versions_of_a_chat_response() -> None:
    body = {"choices": [{"versions": [3, 3, 4]}, {"versions": [-1, 5]}]}
    assert sampled_versions(json.dumps(body).encode()) == {3, 4, 5}
    assert sampled_versions(b'{"choices": [{"message": {"content": "hi"}}]}') == set()


def tasks(count: int) -> list[Task]:
    return [Task(f"t{i}", "/nowhere", "0" * 40, "fix it", "", "", [], []) for i in range(count)]


def test_users_draw_any_task_or_go_round_a_pool() -> None:
    many = tasks(50)
    uniform = [t.instance_id for t in task_draws(many, 200, random.Random(1), None)]
    assert len(set(uniform)) > 40  # every task may come, some twice in a row

    pooled = [t.instance_id for t in task_draws(many, 25, random.Random(1), 10)]
    rounds = [pooled[:10], pooled[10:20], pooled[20:]]
    assert len(set(rounds[0])) == 10 and sorted(rounds[1]) == sorted(rounds[0])
    assert rounds[1] != rounds[0]  # each round in a new order
    assert set(rounds[2]) < set(rounds[0]) and len(set(rounds[2])) == 5  # a part round
    assert pooled == [t.instance_id for t in task_draws(many, 25, random.Random(1), 10)]
    with pytest.raises(ValueError, match="pool of 51"):
        task_draws(many, 5, random.Random(1), 51)
