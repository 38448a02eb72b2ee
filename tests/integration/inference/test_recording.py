"""`fleetrl serve --record` end to end: real uvicorn servers on free ports, the official openai
client as the harness, multi-turn tool conversations, rewards into a real trajectory channel.

The harness here does what agent harnesses do: it sends the whole chat back each turn, the
assistant messages as the server returned them, tool results after them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fleetrl.cli.model import channel_sink
from fleetrl.inference.engine import Engine
from fleetrl.inference.protocol import ChatMessage, to_messages
from fleetrl.inference.recording import SessionRecorder
from fleetrl.inference.server import create_app
from fleetrl.model.chat import ToolCall, encode_chat, format_tool_call
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.store.objectstore import open_store
from fleetrl.store.run import CONFIG_KEY
from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.types import Completion, SamplingParams
from tests.integration.inference.test_server import (  # noqa: F401  (fixtures)
    MAX_MODEL_LEN,
    READ_FILE,
    cli_server,
    dense_dir,
    moe_dir,
    one_torch_thread,
    running,
    tokenizer,
)

OPENING = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "The tests of calc.py fail."},
]


class Recording:
    """A recording server: its URL, its recorder and the run store its groups go to."""

    def __init__(self, url: str, recorder: SessionRecorder, store: Path) -> None:
        self.url, self.recorder, self.store = url, recorder, store

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="x", max_retries=0)

    def session(self, session_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/v1/sessions/{session_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def summary(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/v1/sessions").json()

    def reward(self, session_id: str, body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/sessions/{session_id}/reward", json=body, timeout=30)


class ScriptedEngine(Engine):
    """The engine with its sampling replaced by a script of replies (text), so that replies
    carry real tool calls; everything around sampling (the server, the recorder) is real."""

    def __init__(self, model: Any, tok: Tokenizer, replies: list[str]) -> None:
        super().__init__(model, max_batch_size=4, max_model_len=MAX_MODEL_LEN)
        self.tokenizer, self.replies = tok, replies
        self.prompts: list[list[int]] = []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        self.prompts.append(list(prompt_ids))
        ids = [*self.tokenizer.encode(self.replies.pop(0)), self.tokenizer.eos_id]
        logprobs = [-0.25 - 0.01 * i for i in range(len(ids))]
        return Completion(list(prompt_ids), ids, logprobs, [self.version] * len(ids), "stop")


@contextlib.contextmanager
def recording(engine: Engine, tok: Tokenizer, store: Path, **options: Any) -> Iterator[Recording]:
    """A recording server whose rewarded groups go into the run store at `store`, through
    the sink `fleetrl serve --store` builds."""
    open_store(str(store)).put(CONFIG_KEY, b"")  # a run's config marks the store as a run's
    options.setdefault("group_size", 2)
    recorder = SessionRecorder(tok, sink=channel_sink(str(store), "serve"), **options)
    app = create_app(engine, tok, "tiny", admin_token=None, recorder=recorder)
    with running(app) as url:
        yield Recording(url, recorder, store)


@pytest.fixture(scope="module")
def served(
    dense_dir: Path,  # noqa: F811
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Recording]:
    engine = Engine(load_pretrained(dense_dir), max_batch_size=8, max_model_len=MAX_MODEL_LEN)
    with recording(engine, tokenizer, tmp_path_factory.mktemp("store")) as server:
        yield server


def chat(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage(**m) for m in messages]


def reply_ids(response: Any) -> tuple[list[int], list[int]]:
    """(prompt ids, sampled ids) of a chat response (fleetrl's extra fields)."""
    return response.model_extra["prompt_token_ids"], response.choices[0].model_extra["token_ids"]


def run_session(
    client: openai.OpenAI, user: str, turns: int, seed: int = 0
) -> tuple[list[dict[str, Any]], list[tuple[list[int], list[int]]], list[Any]]:
    """A tool conversation of `turns` replies: after each one the harness sends the chat
    back with the reply as returned and a tool result. Returns the messages, the (prompt,
    sampled) ids of each turn and the responses."""
    messages: list[dict[str, Any]] = [dict(m) for m in OPENING]
    turns_ids, responses = [], []
    for turn in range(turns):
        response = client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=[READ_FILE],
            max_tokens=6,
            seed=seed + turn,
            logprobs=True,
            user=user,
        )
        responses.append(response)
        turns_ids.append(reply_ids(response))
        reply = response.choices[0].message.model_dump(exclude_none=True)
        messages += [reply, {"role": "tool", "tool_call_id": f"c{turn}", "content": f"out {turn}"}]
    return messages, turns_ids, responses


def assert_prefixes(segment: dict[str, Any], turns: list[tuple[list[int], list[int]]]) -> None:
    """Every turn's prompt, and its reply after it, is a prefix of the segment; the reply
    tokens are the sampled ones (loss_mask 1), nothing else is."""
    ids, mask = segment["token_ids"], segment["loss_mask"]
    for prompt, sampled in turns:
        assert ids[: len(prompt) + len(sampled)] == prompt + sampled
        assert mask[len(prompt) : len(prompt) + len(sampled)] == [1] * len(sampled)
    assert sum(mask) == sum(len(sampled) for _, sampled in turns)


# -- token in, token out ---------------------------------------------------------------


def test_a_tool_session_is_one_segment_of_exactly_the_sampled_tokens(served: Recording) -> None:
    _, turns, responses = run_session(served.client(), "alpha", turns=3)
    view = served.session("alpha")
    assert view["turns"] == 3 and view["rewrites"] == 0 and not view["ended"]
    [segment] = view["segments"]
    assert_prefixes(segment, turns)
    n = len(segment["token_ids"])
    assert len(segment["loss_mask"]) == len(segment["logprobs"]) == len(segment["versions"]) == n
    sampled = [i for i, m in enumerate(segment["loss_mask"]) if m]
    logprobs = [c.logprob for r in responses for c in r.choices[0].logprobs.content]
    assert [segment["logprobs"][i] for i in sampled] == pytest.approx(logprobs)
    assert all(segment["versions"][i] == 0 for i in sampled)
    assert {segment["versions"][i] for i in range(n) if i not in set(sampled)} == {-1}
    assert {segment["logprobs"][i] for i in range(n) if i not in set(sampled)} == {0.0}
    assert segment["temperature"] == 1.0


def test_sessions_run_concurrently_and_stay_apart(served: Recording) -> None:
    client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)

    async def session(user: str, seed: int) -> list[tuple[list[int], list[int]]]:
        messages: list[dict[str, Any]] = [dict(m) for m in OPENING]
        turns = []
        for turn in range(2):
            response = await client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=5, seed=seed + turn, user=user
            )
            turns.append(reply_ids(response))
            reply = response.choices[0].message.model_dump(exclude_none=True)
            messages += [reply, {"role": "user", "content": f"and {user}?"}]
        return turns

    async def all_sessions() -> list[list[tuple[list[int], list[int]]]]:
        return await asyncio.gather(*(session(f"many-{i}", 10 * i) for i in range(4)))

    for i, turns in enumerate(asyncio.run(all_sessions())):
        view = served.session(f"many-{i}")
        assert view["turns"] == 2 and len(view["segments"]) == 1
        assert_prefixes(view["segments"][0], turns)


def test_an_edited_history_starts_a_new_segment(served: Recording, tokenizer: Tokenizer) -> None:  # noqa: F811
    client = served.client()
    messages, turns, _ = run_session(client, "editor", turns=2)
    before = served.summary()
    edited = [messages[0], {"role": "user", "content": "Only the summary of the task."}]
    edited += messages[-2:]  # the last reply and its tool result: earlier history dropped
    response = client.chat.completions.create(
        model="tiny", messages=edited, tools=[READ_FILE], max_tokens=6, seed=7, user="editor"
    )
    view = served.session("editor")
    assert view["turns"] == 3 and view["rewrites"] == 1 and len(view["segments"]) == 2
    assert_prefixes(view["segments"][0], turns)
    assert_prefixes(view["segments"][1], [reply_ids(response)])
    prompt, _ = reply_ids(response)  # rendered from scratch, as without recording
    assert prompt == encode_chat(tokenizer, to_messages(chat(edited)), [READ_FILE])
    after = served.summary()
    assert after["rewritten"] == before["rewritten"] + 1
    assert after["rewritten_sessions"] == before["rewritten_sessions"] + 1
    assert after["new_segments"] == before["new_segments"] + 1


def test_requests_without_user_are_served_not_recorded(served: Recording) -> None:
    before = served.summary()
    reply = served.client().chat.completions.create(model="tiny", messages=OPENING, max_tokens=3)
    assert reply.choices[0].message.content is not None
    after = served.summary()
    assert after["unrecorded_requests"] == before["unrecorded_requests"] + 1
    assert after["ids"] == before["ids"] and after["turns"] == before["turns"]


def test_n_above_one_is_refused_in_a_session(served: Recording) -> None:
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        served.client().chat.completions.create(
            model="tiny", messages=OPENING, max_tokens=3, n=2, user="forked"
        )
    assert httpx.get(f"{served.url}/v1/sessions/forked").status_code == 404


def test_real_tool_calls_round_trip_without_retokenising(
    dense_dir: Path,  # noqa: F811
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path: Path,
) -> None:
    call = ToolCall("read_file", {"path": "calc.py"})
    # An uncanonical reply (two spaces after the colon): re-rendering it would change tokens.
    odd = '<tool_call>\n{"name": "read_file", "arguments": {"path":  "calc.py"}}\n</tool_call>'
    replies = ["Let me look.\n" + format_tool_call(call), odd, "Fixed it."]
    engine = ScriptedEngine(load_pretrained(dense_dir), tokenizer, replies)
    with recording(engine, tokenizer, tmp_path) as server:
        client = server.client()
        messages: list[dict[str, Any]] = [dict(m) for m in OPENING]
        turns = []
        for turn in range(3):
            response = client.chat.completions.create(
                model="tiny", messages=messages, tools=[READ_FILE], user="tools"
            )
            turns.append(reply_ids(response))
            message = response.choices[0].message
            if turn < 2:
                assert response.choices[0].finish_reason == "tool_calls"
                assert json.loads(message.tool_calls[0].function.arguments) == call.arguments
            reply = message.model_dump(exclude_none=True)
            if turn == 1:  # a harness that re-serialises the arguments its own way
                for c in reply["tool_calls"]:
                    c["function"]["arguments"] = json.dumps(
                        json.loads(c["function"]["arguments"]), indent=2
                    )
            results = [
                {"role": "tool", "tool_call_id": c["id"], "content": "def add(a, b): return a - b"}
                for c in reply.get("tool_calls", [])
            ]
            messages += [reply, *results]
        view = server.session("tools")
        assert view["turns"] == 3 and len(view["segments"]) == 1
        [segment] = view["segments"]
        assert_prefixes(segment, turns)
        odd_ids = tokenizer.encode(odd)
        start = len(turns[1][0])
        assert segment["token_ids"][start : start + len(odd_ids)] == odd_ids
        assert engine.prompts == [prompt for prompt, _ in turns]


def test_moe_sessions_record_the_routing_of_every_position(
    moe_dir: Path,  # noqa: F811
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path: Path,
) -> None:
    engine = Engine(load_pretrained(moe_dir), max_batch_size=4, max_model_len=MAX_MODEL_LEN)
    with recording(engine, tokenizer, tmp_path) as server:
        _, turns, _ = run_session(server.client(), "moe", turns=2)
        [segment] = server.session("moe")["segments"]
    assert_prefixes(segment, turns)
    routed = segment["routed_experts"]
    assert len(routed) == len(segment["token_ids"])
    assert {len(experts) for position in routed for experts in position} == {2}  # top-2
    # the second turn continued the first one's tokens: the engine's prefix cache served them
    assert engine.stats.prefix_hit_tokens >= len(turns[0][0]) + len(turns[0][1]) - 1


# -- rewards, groups, the channel --------------------------------------------------------


def test_rewarded_sessions_of_a_task_form_a_group_in_the_channel(served: Recording) -> None:
    client = served.client()
    for i in range(2):
        run_session(client, f"task-{i}", turns=2, seed=100 + i)
    views = {f"task-{i}": served.session(f"task-{i}") for i in range(2)}
    channel = TrajectoryChannel(str(served.store))
    cursor: dict[str, int] = {}
    already = len(channel.read_new(cursor))
    first = served.reward("task-0", {"reward": 1.0, "task_id": "calc-7"})
    assert first.status_code == 200, first.text
    assert first.json()["sent"] is False and first.json()["waiting"] == 1
    second = served.reward("task-1", {"reward": 0.0, "task_id": "calc-7"})
    assert second.status_code == 200 and second.json()["sent"] is True
    [record] = channel.read_new(cursor)
    assert already == 0 and record.region == "serve"
    assert [t.reward for t in record.trajectories] == [1.0, 0.0]
    assert {t.task_id for t in record.trajectories} == {"calc-7"}
    assert len({t.group_id for t in record.trajectories}) == 1 and record.trajectories[0].group_id
    for trajectory, view in zip(record.trajectories, views.values(), strict=True):
        [segment] = trajectory.segments
        assert segment.token_ids == view["segments"][0]["token_ids"]
        assert segment.loss_mask == view["segments"][0]["loss_mask"]
        assert segment.logprobs == pytest.approx(view["segments"][0]["logprobs"])
        assert trajectory.turns == 2 and trajectory.finish_reason == "external"
    summary = served.summary()
    assert summary["groups_sent"] >= 1 and summary["rewarded"] >= 2
    assert served.session("task-0")["ended"] is True


def test_reward_errors(served: Recording) -> None:
    run_session(served.client(), "once", turns=1)
    assert served.reward("nobody", {"reward": 1.0}).status_code == 404
    for bad in ({}, {"reward": "high"}, {"reward": 1.0, "task_id": ""}, [1.0]):
        response = served.reward("once", bad)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"]
    response = httpx.post(
        f"{served.url}/v1/sessions/once/reward",
        content=b'{"reward": NaN}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert served.reward("once", {"reward": 0.5}).status_code == 200  # a group of its own
    again = served.reward("once", {"reward": 0.5})
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict_error"
    with pytest.raises(openai.ConflictError):
        served.client().chat.completions.create(
            model="tiny", messages=OPENING, max_tokens=3, user="once"
        )


def test_unrewarded_sessions_expire_and_are_counted(
    dense_dir: Path,  # noqa: F811
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path: Path,
) -> None:
    engine = Engine(load_pretrained(dense_dir), max_batch_size=4, max_model_len=MAX_MODEL_LEN)
    with recording(engine, tokenizer, tmp_path, ttl_s=0.5) as server:
        run_session(server.client(), "idle", turns=1)
        assert server.summary()["active"] == 1
        time.sleep(0.7)
        summary = server.summary()
        assert summary["expired"] == 1 and summary["active"] == 0 and summary["ids"] == []
        assert httpx.get(f"{server.url}/v1/sessions/idle").status_code == 404


# -- the command line --------------------------------------------------------------------


def test_cli_serve_record_sends_rewarded_groups_to_the_run_store(
    dense_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    open_store(str(store)).put(CONFIG_KEY, b"")
    options = ["--threads", "1", "--record", "--store", str(store), "--group-size", "1"]
    with cli_server(dense_dir, *options) as served:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model="tiny", messages=OPENING, max_tokens=4, seed=0, user="cli"
        )
        reward = {"reward": 1, "task_id": "t"}
        response = httpx.post(f"{served.url}/v1/sessions/cli/reward", json=reward)
        assert response.status_code == 200 and response.json()["sent"] is True, response.text
    assert "recording sessions" in served.stdout
    [record] = TrajectoryChannel(str(store)).read_new({})
    [trajectory] = record.trajectories
    assert record.region == "serve" and trajectory.task_id == "t" and trajectory.reward == 1.0
    prompt, sampled = reply_ids(reply)
    assert trajectory.segments[0].token_ids == prompt + sampled
