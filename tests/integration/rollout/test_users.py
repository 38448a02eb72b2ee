"""Simulated users against a real `fleetrl serve --record` on a tiny random model: real
sandboxes over micro tasks, the micro harness, the real verifier, feedback that ends each
recorded session. A random model solves nothing, so every reward is 0; the path is what
is checked."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from fleetrl.config import HarnessSection
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.rollout.users import run_users, summarise
from fleetrl.types import Task
from tests.integration.inference.test_server import cli_server

HARNESS = HarnessSection(max_turns=2, max_reply_tokens=16, max_tokens=32)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks("micro", split="train")[:3]


def test_users_drive_a_recording_server(tiny_checkpoint: Path, tasks: list[Task]) -> None:
    with cli_server(tiny_checkpoint, "--record", "--threads", "1") as server:
        users = asyncio.run(
            run_users(server.url, "tiny", tasks, HARNESS, 20.0, 4, seed=3, concurrency=2)
        )
        recorded = httpx.get(f"{server.url}/v1/sessions").json()
        views = [httpx.get(f"{server.url}/v1/sessions/{u.session_id}").json() for u in users]
    assert [(u.error, u.feedback_status) for u in users] == [(None, 200)] * 4
    assert (recorded["sessions"], recorded["rewarded"]) == (4, 4)
    assert [(v["ended"], v["turns"]) for v in views] == [(True, u.turns) for u in users]
    assert {u.session_id for u in users} == {f"user-3-{i}" for i in range(4)}
    assert {u.task_id for u in users} <= {t.instance_id for t in tasks}
    assert {u.reward for u in users} <= {0.0, 1.0}
    arrivals = [u.arrived for u in users]
    assert arrivals == sorted(arrivals) and len(set(arrivals)) == 4
    assert all(u.arrived <= u.started <= u.ended for u in users)
    for u in users:  # two slots: no user starts while two others are working
        assert sum(o.started <= u.started < o.ended for o in users if o is not u) <= 1
    assert all(len(u.request_latencies_s) == u.turns >= 1 for u in users)
    assert all(u.versions == {0} for u in users)  # the checkpoint serves as version 0
    assert all(0 < s < 30 for u in users for s in u.request_latencies_s)
    assert summarise(users)["failed"] == 0


def test_users_give_up_on_a_server_that_is_down(tasks: list[Task]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        users = asyncio.run(run_users(url, "tiny", tasks, HARNESS, 50.0, 2, retry_s=1.0))
    assert [u.error and u.error.startswith("ConnectError") for u in users] == [True, True]
    assert [(u.reward, u.feedback_status, u.turns) for u in users] == [(None, None, 0)] * 2
    # it tried again after 0.25 s and 0.5 s; a third wait (1 s) would pass retry_s
    assert all(0.75 <= u.ended - u.started < 10 for u in users)
