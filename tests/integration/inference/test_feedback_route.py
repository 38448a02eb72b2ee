"""POST /v1/feedback on a real recording server (uvicorn on a free port, the tiny dense
model): signals weighted into the session's reward, which goes to the run's channel; a
second feedback is a conflict, a feedback the server cannot read a 400 naming why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.store.trajectories import TrajectoryChannel
from tests.integration.inference.test_recording import OPENING, Recording, recording
from tests.integration.inference.test_server import (  # noqa: F401  (fixtures)
    MAX_MODEL_LEN,
    dense_dir,
    one_torch_thread,
    tokenizer,
)

SIGNALS = {"accepted": 1.0, "tests_passed": 2.0, "reverted": -1.0}


@pytest.fixture(scope="module")
def server(
    dense_dir: Path,  # noqa: F811
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Recording]:
    engine = Engine(load_pretrained(dense_dir), max_batch_size=4, max_model_len=MAX_MODEL_LEN)
    store = tmp_path_factory.mktemp("store")
    with recording(engine, tokenizer, store, group_size=1, signals=SIGNALS) as served:
        yield served


def turn(server: Recording, user: str) -> None:
    body = {"model": "tiny", "messages": OPENING, "max_tokens": 3, "seed": 0, "user": user}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text


def feedback(server: Recording, body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/feedback", json=body, timeout=30)


def test_signals_become_the_sessions_reward_in_the_channel(server: Recording) -> None:
    turn(server, "liked")
    signals = {"accepted": 1.0, "tests_passed": 0.25}
    response = feedback(server, {"session_id": "liked", "signals": signals, "task_id": "t1"})
    assert response.status_code == 200, response.text
    assert response.json()["sent"] is True and response.json()["task_id"] == "t1"
    view = server.session("liked")
    assert view["ended"] is True and view["reward"] == pytest.approx(1.0 + 0.5)
    records = [
        r
        for r in TrajectoryChannel(str(server.store)).read_new({})
        if r.trajectories[0].task_id == "t1"
    ]
    [record] = records
    [trajectory] = record.trajectories  # a group of one: online mode's unit
    assert trajectory.reward == pytest.approx(1.5) and trajectory.finish_reason == "external"
    assert trajectory.segments[0].token_ids == view["segments"][0]["token_ids"]
    again = feedback(server, {"session_id": "liked", "reward": 0.0})
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict_error"


def test_a_plain_reward_is_taken_too(server: Recording) -> None:
    turn(server, "plain")
    response = feedback(server, {"session_id": "plain", "reward": -0.5})
    assert response.status_code == 200, response.text
    assert server.session("plain")["reward"] == -0.5


def test_feedback_the_server_cannot_read_is_a_400_naming_why(server: Recording) -> None:
    turn(server, "odd")
    cases = [
        ({"signals": {"accepted": 1.0, "starred": 1.0}}, "unknown signal 'starred'"),
        ({"reward": 1.0, "signals": {"accepted": 1.0}}, "either reward or signals"),
        ({}, "either reward or signals"),
        ({"signals": {"accepted": "yes"}}, "signals.accepted"),
    ]
    for fields, message in cases:
        response = feedback(server, {"session_id": "odd", **fields})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and message in error["message"]
    response = httpx.post(
        f"{server.url}/v1/feedback",
        content=b'{"session_id": "odd", "signals": {"accepted": Infinity}}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and "finite" in response.json()["error"]["message"]
    # None of those ended the session: a good feedback still does.
    assert server.session("odd")["ended"] is False
    assert feedback(server, {"session_id": "odd", "signals": {"reverted": 1}}).status_code == 200
    assert server.session("odd")["reward"] == -1.0


def test_feedback_for_an_unknown_session_is_a_404(server: Recording) -> None:
    response = feedback(server, {"session_id": "nobody", "signals": {"accepted": 1.0}})
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"
    assert "nobody" in response.json()["error"]["message"]
