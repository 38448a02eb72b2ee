"""The session journal: a recorder started over the journal of one that died takes its
sessions back. A session still recording continues its segment at its next turn as if
nothing happened; a rewarded one that was not sent yet is sent; a sent one is gone."""

from __future__ import annotations

import pytest

from fleetrl.inference.journal import SessionJournal
from fleetrl.inference.recording import SessionRecorder
from fleetrl.model.chat import Message
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.types import Trajectory
from tests.unit.inference.test_recording import OPENING, run, turn


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bundled_tokenizer()


def test_a_session_goes_on_across_a_restart(tmp_path, tokenizer: Tokenizer) -> None:
    sent: list[list[Trajectory]] = []
    first = SessionRecorder(
        tokenizer, group_size=1, sink=sent.append, journal=SessionJournal(tmp_path)
    )
    prompt, reply = run(turn(first, "s", OPENING, "Reading it."))
    # The process dies here; the next one reads the journal.
    second = SessionRecorder(
        tokenizer, group_size=1, sink=sent.append, journal=SessionJournal(tmp_path)
    )
    assert second.stats.recovered == 1 and second.stats.active == 1
    chat = [*OPENING, Message("assistant", "Reading it."), Message("user", "Go on.")]
    next_prompt, _ = run(turn(second, "s", chat, "Done."))
    assert next_prompt[: len(prompt) + len(reply)] == prompt + reply  # continued, not rewritten
    assert second.stats.rewritten == 0
    run(second.reward("s", 1.0, "calc"))
    (group,) = sent
    assert group[0].turns == 2 and group[0].reward == 1.0 and group[0].task_id == "calc"
    assert len(group[0].segments) == 1
    assert not list(tmp_path.glob("*.json"))  # sent: nothing left to recover


def test_a_rewarded_session_not_sent_is_sent_by_the_next_process(tmp_path, tokenizer) -> None:
    def refuse(group: list[Trajectory]) -> None:
        raise OSError("store down")

    first = SessionRecorder(tokenizer, group_size=1, sink=refuse, journal=SessionJournal(tmp_path))
    run(turn(first, "s", OPENING, "Done."))
    run(first.reward("s", 0.0, "calc"))
    assert first.stats.send_failures == 1
    sent: list[list[Trajectory]] = []
    second = SessionRecorder(
        tokenizer, group_size=1, sink=sent.append, journal=SessionJournal(tmp_path)
    )
    run(second.flush())
    assert [[t.task_id for t in g] for g in sent] == [["calc"]]
    assert not list(tmp_path.glob("*.json"))


def test_an_expired_session_leaves_the_journal(tmp_path, tokenizer: Tokenizer) -> None:
    now = [0.0]
    recorder = SessionRecorder(
        tokenizer, ttl_s=10.0, clock=lambda: now[0], journal=SessionJournal(tmp_path)
    )
    run(turn(recorder, "s", OPENING, "Reading it."))
    assert len(list(tmp_path.glob("*.json"))) == 1
    now[0] = 11.0
    run(recorder.sweep())
    assert recorder.stats.expired == 1 and not list(tmp_path.glob("*.json"))


def test_a_finished_group_is_sent_again_as_the_same_group(tmp_path, tokenizer) -> None:
    """A group the dying process had finished (sent or not) goes out again whole, with its
    id, so a reader sees a duplicate, not a new group; the next process's own groups get
    ids of their own."""

    def refuse(group: list[Trajectory]) -> None:
        raise OSError("store down")

    first = SessionRecorder(tokenizer, group_size=2, sink=refuse, journal=SessionJournal(tmp_path))
    for session in ("a", "b"):
        run(turn(first, session, OPENING, "Done."))
        run(first.reward(session, 1.0, "calc"))
    assert first.stats.send_failures == 1
    sent: list[list[Trajectory]] = []
    second = SessionRecorder(
        tokenizer, group_size=2, sink=sent.append, journal=SessionJournal(tmp_path)
    )
    run(second.flush())
    (again,) = sent
    assert len(again) == 2 and len({t.group_id for t in again}) == 1
    first_id = again[0].group_id
    for session in ("c", "d"):
        run(turn(second, session, OPENING, "Done."))
        run(second.reward(session, 0.0, "calc"))
    assert len(sent) == 2 and {t.group_id for t in sent[1]} != {first_id}
    assert not list(tmp_path.glob("*.json"))
