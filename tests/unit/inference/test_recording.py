"""SessionRecorder alone: segments, continuation rules, groups and expiry on a fake clock
(no engine, no server: each reply is a Completion made here)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from fleetrl.inference.recording import SessionEnded, SessionRecorder, UnknownSession
from fleetrl.model.chat import Message, encode_chat, encode_continuation
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.types import Completion, Trajectory

OPENING = [Message("system", "You fix bugs."), Message("user", "calc.py is wrong.")]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bundled_tokenizer()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def turn(
    recorder: SessionRecorder,
    session: str,
    messages: list[Message],
    text: str,
    temperature: float = 1.0,
    closed: bool = True,
    version: int = 3,
) -> tuple[list[int], list[int]]:
    """One recorded turn whose reply is `text` (closed by <|im_end|> unless `closed` is
    False: cut by max_tokens); returns (prompt ids, sampled ids)."""
    tok = recorder.tokenizer
    async with recorder.turn(session, messages, None, temperature) as t:
        ids = tok.encode(text) + ([tok.eos_id] if closed else [])
        logprobs = [-0.5] * len(ids)
        completion = Completion(t.prompt_ids, ids, logprobs, [version] * len(ids), "stop")
        t.record(completion, len(ids), {"role": "assistant", "content": text})
    return t.prompt_ids, ids


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_turns_continue_the_segment_with_only_what_is_new(tokenizer: Tokenizer) -> None:
    recorder = SessionRecorder(tokenizer)

    async def session() -> None:
        prompt, first = await turn(recorder, "s", OPENING, "Reading  it.")
        assert prompt == encode_chat(tokenizer, OPENING)
        chat = [*OPENING, Message("assistant", "Reading  it."), Message("user", "Go on.")]
        second_prompt, second = await turn(recorder, "s", chat, "Done.", closed=False)
        new = encode_continuation(tokenizer, chat[3:])
        assert second_prompt == prompt + first + new
        chat += [Message("assistant", "Done."), Message("tool", "ok")]
        third_prompt, _ = await turn(recorder, "s", chat, "Bye.")
        # the cut reply is closed with <|im_end|> as a prompt token
        closing = [tokenizer.eos_id, *encode_continuation(tokenizer, chat[5:])]
        assert third_prompt == second_prompt + second + closing

    run(session())
    view = recorder.view("s")
    assert view["turns"] == 3 and len(view["segments"]) == 1
    segment = view["segments"][0]
    sampled = [i for i, m in enumerate(segment["loss_mask"]) if m]
    assert [segment["versions"][i] for i in sampled] == [3] * len(sampled)
    assert segment["token_ids"][sampled[-1]] == tokenizer.eos_id
    assert "routed_experts" not in segment


def test_a_temperature_change_starts_a_segment_that_continues_the_tokens(
    tokenizer: Tokenizer,
) -> None:
    recorder = SessionRecorder(tokenizer)

    async def session() -> None:
        prompt, first = await turn(recorder, "s", OPENING, "Hm.")
        chat = [*OPENING, Message("assistant", "Hm."), Message("user", "Again.")]
        second_prompt, _ = await turn(recorder, "s", chat, "Hm!", temperature=0.5)
        assert second_prompt[: len(prompt) + len(first)] == prompt + first

    run(session())
    first, second = recorder.view("s")["segments"]
    assert (first["temperature"], second["temperature"]) == (1.0, 0.5)
    assert second["loss_mask"][: len(first["token_ids"])] == [0] * len(first["token_ids"])
    assert recorder.stats.temperature_changes == 1 and recorder.stats.rewritten == 0


def test_a_dropped_message_or_changed_tools_is_a_rewrite(tokenizer: Tokenizer) -> None:
    recorder = SessionRecorder(tokenizer)

    async def session() -> None:
        await turn(recorder, "s", OPENING, "One.")
        await turn(recorder, "s", [OPENING[1], Message("assistant", "One.")], "Two.")
        history = [OPENING[1], Message("assistant", "One."), Message("assistant", "Two.")]
        async with recorder.turn("s", history, [{"name": "ls"}], 1.0) as t:
            assert t.reason == "rewritten"
            t.record(Completion(t.prompt_ids, [5], [-1.0], [0], "length"), 1, {"content": ""})

    run(session())
    assert len(recorder.view("s")["segments"]) == 3
    assert recorder.stats.rewritten == 2 and recorder.stats.rewritten_sessions == 1


def test_a_failed_turn_records_nothing(tokenizer: Tokenizer) -> None:
    recorder = SessionRecorder(tokenizer)

    async def failing() -> None:
        async with recorder.turn("s", OPENING, None, 1.0):
            raise RuntimeError("engine down")

    with pytest.raises(RuntimeError, match="engine down"):
        run(failing())
    with pytest.raises(UnknownSession):
        recorder.view("s")
    assert recorder.stats.sessions == 0 and recorder.summary()["active"] == 0


def test_groups_of_a_task_and_partial_groups_after_the_ttl(tokenizer: Tokenizer) -> None:
    clock = Clock()
    sent: list[list[Trajectory]] = []
    recorder = SessionRecorder(tokenizer, ttl_s=100, group_size=3, sink=sent.append, clock=clock)

    async def scenario() -> None:
        for name in ("a", "b", "c", "d"):
            await turn(recorder, name, OPENING, f"Reply {name}.")
        await recorder.reward("a", 1.0, "t1")
        await recorder.reward("b", 0.0, "t1")
        await recorder.reward("c", 1.0, "t2")
        clock.now = 50
        await recorder.sweep()
        assert sent == [] and recorder.stats.expired == 0
        clock.now = 150
        await recorder.sweep()  # t1 goes short (2 of 3), t2 is dropped, d expires

    run(scenario())
    [group] = sent
    assert [t.reward for t in group] == [1.0, 0.0] and {t.task_id for t in group} == {"t1"}
    stats = recorder.stats
    assert (stats.partial_groups, stats.groups_dropped, stats.expired) == (1, 1, 1)
    assert stats.groups_sent == 1 and stats.trajectories_sent == 2 and stats.rewarded == 3
    with pytest.raises(UnknownSession):
        recorder.view("d")


def test_reward_twice_and_turns_after_a_reward_conflict(tokenizer: Tokenizer) -> None:
    recorder = SessionRecorder(tokenizer, group_size=2)

    async def scenario() -> None:
        await turn(recorder, "s", OPENING, "Hi.")
        result = await recorder.reward("s", 0.5, None)
        assert result["task_id"] == "s" and result["group_id"].startswith("serve-")
        with pytest.raises(SessionEnded):
            await recorder.reward("s", 0.5, None)
        with pytest.raises(SessionEnded):
            await turn(recorder, "s", OPENING, "Again.")
        with pytest.raises(UnknownSession):
            await recorder.reward("nobody", 1.0, None)

    run(scenario())
    assert recorder.stats.groups_unsent == 1  # a session without task_id: a group alone


def test_a_sink_that_fails_keeps_the_group_for_the_next_sweep(tokenizer: Tokenizer) -> None:
    sent: list[list[Trajectory]] = []
    failures = [RuntimeError("store down")]

    def flaky(group: list[Trajectory]) -> None:
        if failures:
            raise failures.pop()
        sent.append(group)

    recorder = SessionRecorder(tokenizer, group_size=1, sink=flaky)

    async def scenario() -> None:
        await turn(recorder, "s", OPENING, "Hi.")
        assert (await recorder.reward("s", 1.0, "t"))["sent"] is False
        await recorder.sweep()

    run(scenario())
    assert len(sent) == 1 and recorder.stats.send_failures == 1
    assert recorder.stats.groups_sent == 1


def test_rewards_at_once_send_each_group_once(tokenizer: Tokenizer) -> None:
    """Two feedbacks at once while the sink is slow: each group reaches it once, in order."""
    sent: list[str] = []

    def slow(group: list[Trajectory]) -> None:
        time.sleep(0.05)  # the store's write, in the flush's thread
        sent.append(group[0].task_id)

    recorder = SessionRecorder(tokenizer, group_size=1, sink=slow)

    async def scenario() -> None:
        for name in ("a", "b", "c"):
            await turn(recorder, name, OPENING, "Done.")
        await asyncio.gather(*(recorder.reward(n, 1.0, f"task-{n}") for n in ("a", "b", "c")))

    run(scenario())
    assert sorted(sent) == ["task-a", "task-b", "task-c"]
    assert recorder.stats.groups_sent == 3
