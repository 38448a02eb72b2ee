"""Session recording (`fleetrl serve --record`): every chat session an agent harness runs
through the OpenAI endpoint becomes a token-level trajectory, exactly as the engine sampled it.

    POST /v1/chat/completions {user: S, messages, tools}
      │  does S's last segment hold `messages[:k]` (k: the messages it has recorded)?
      ├─ yes: prompt = the segment's tokens + only what is new (tool results, user turns)
      └─ no (first turn; or the harness edited/dropped history): a new segment, from scratch
      ▼
    Engine.generate (the same continuous batch as every other request)
      ▼
    segment += the sampled tokens (loss_mask 1, behaviour logprobs, versions, MoE routing)

    POST /v1/sessions/S/reward {reward, task_id} ─▶ Trajectory ─▶ group of task_id ─▶ sink
    no reward within ttl_s ─▶ expired and counted (`RecorderStats.expired`)

Contract. A session is the request's `user` field; a request without one is served and not
recorded. Turns of one session run one at a time (a per-session lock); sessions run side by
side. The assistant turns the endpoint sampled are never re-tokenised: a harness that sends
the whole chat back has its earlier messages matched against what the segment recorded (as
fleetrl `Message`s, so a tool call's id or its arguments' whitespace may differ), and only
the messages after them are tokenised (`encode_continuation`). A reply that did not end at
`<|im_end|>` (cut by max_tokens or a stop string) is closed with one, as prompt. When the
sent messages do not start with what was recorded, or the tools changed, the turn starts a
new segment rendered from scratch: the trajectory never becomes one the model did not see.
A change of temperature also starts a new segment (a segment has one temperature), which
continues the same tokens as its prompt.

Segments (`fleetrl.types.Segment`): `loss_mask` 1 on sampled tokens, 0 on prompt, tool and
user tokens; `logprobs` 0.0 and `versions` -1 where `loss_mask` is 0. A rewarded session
becomes a `Trajectory` (`finish_reason` "external", `task_id` the reward's or else the
session id). `group_size` rewarded sessions of one task_id form a group, handed to the sink
(e.g. the run's trajectory channel) in one call; a session without a task_id is a group of
its own. A group still short after `ttl_s` is sent if it has 2 or more samples (group
advantages need two) and dropped and counted otherwise; a sink that raises keeps its group
for the next sweep.

With a `SessionJournal` (`fleetrl serve --store`), every session is kept on disk as it
grows, and a restarted process takes them back (`fleetrl.inference.journal`): a session
goes on across the restart, and a rewarded one not yet sent is sent. Without one, a
restart loses the sessions in flight (shutdown logs how many).

Not covered: `n > 1` within a session (refused), streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from fleetrl.inference.journal import (
    SessionJournal,
    clock_time,
    decode_recording,
    encode_recording,
    wall_time,
)
from fleetrl.model.chat import Message, ToolCall, encode_chat, encode_continuation
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, Segment, Trajectory

log = logging.getLogger(__name__)

MIN_GROUP = 2  # samples a partial group needs to be sent: advantages compare samples
MAX_SESSION_ID = 256  # characters of a `user` field

# Hands one finished group to its consumer (called in a worker thread; may raise to retry).
GroupSink = Callable[[list[Trajectory]], None]


class UnknownSession(LookupError):
    """No session of that id is recorded (never started, expired, or forgotten)."""


class SessionEnded(RuntimeError):
    """The session was already rewarded: it takes neither turns nor another reward."""


class RewardRequest(BaseModel):
    """POST /v1/sessions/{id}/reward: ends the session with its reward."""

    reward: float = Field(allow_inf_nan=False)  # the episode's return, e.g. 1.0 = solved
    # Task the session worked on: sessions of one task form a group (group advantages).
    task_id: str | None = Field(None, min_length=1, max_length=MAX_SESSION_ID)


class FeedbackRequest(BaseModel):
    """POST /v1/feedback: a session's outcome, as a reward or as signals a configured
    function maps to one (`reward_of`); ends the session like POST …/reward."""

    session_id: str = Field(min_length=1, max_length=MAX_SESSION_ID)
    reward: float | None = Field(None, allow_inf_nan=False)
    # Named outcomes, e.g. {"accepted": 1, "tests_passed": 0.5}: reward = sum(weight * value).
    signals: dict[str, float] | None = None
    task_id: str | None = Field(None, min_length=1, max_length=MAX_SESSION_ID)


def reward_of(feedback: FeedbackRequest, weights: dict[str, float]) -> float:
    """The reward of a feedback: its `reward`, or the weighted sum of its signals (a signal
    not given counts 0). Raises InvalidFeedback for both or neither, an unknown signal or
    a value that is not finite."""
    if (feedback.reward is None) == (feedback.signals is None):
        raise InvalidFeedback("give either reward or signals")
    if feedback.reward is not None:
        return feedback.reward
    assert feedback.signals is not None
    unknown = sorted(set(feedback.signals) - set(weights))
    if unknown:
        known = ", ".join(sorted(weights)) or "none (this server takes rewards only)"
        raise InvalidFeedback(f"unknown signal {unknown[0]!r}; this server's signals: {known}")
    if not all(math.isfinite(v) for v in feedback.signals.values()):
        raise InvalidFeedback("signal values must be finite numbers")
    return sum(weights[name] * value for name, value in feedback.signals.items())


class InvalidFeedback(ValueError):
    """A feedback the server cannot turn into a reward (a client's mistake: 400)."""


@dataclass
class RecorderStats:
    """Counters of the recorder (GET /v1/sessions shows them)."""

    sessions: int = 0  # sessions started
    active: int = 0  # sessions recording now (not rewarded, not expired)
    turns: int = 0  # recorded turns (assistant replies)
    sampled_tokens: int = 0  # sampled tokens recorded
    unrecorded_requests: int = 0  # chat requests without `user`: served, not recorded
    new_segments: int = 0  # segments begun after a session's first (both reasons below)
    rewritten: int = 0  # turns whose sent history did not match the recording
    rewritten_sessions: int = 0  # sessions whose history the harness rewrote at least once
    temperature_changes: int = 0  # turns that changed the segment's temperature
    rewarded: int = 0  # sessions ended by a reward
    expired: int = 0  # sessions that got no reward within ttl_s: recorded, never trained on
    groups_sent: int = 0  # groups handed to the sink
    trajectories_sent: int = 0  # trajectories in those groups
    partial_groups: int = 0  # of those, sent short of group_size after ttl_s
    groups_dropped: int = 0  # groups under MIN_GROUP after ttl_s: not sent
    groups_unsent: int = 0  # groups finished without a sink (no store configured)
    send_failures: int = 0  # sink calls that raised (the group is retried)
    recovered: int = 0  # sessions taken back from the journal at start-up


@dataclass
class _Recording:
    """One segment of a session and the conversation its tokens render."""

    segment: Segment
    history: list[Message]  # the messages, replies included, as the harness sends them back
    tools: list[dict[str, Any]] | None  # the tool specs rendered into the segment's prompt


@dataclass
class Session:
    """One recorded chat session (one `user`)."""

    id: str
    created: float  # recorder clock at the first turn
    last_active: float  # recorder clock at the last turn (or the reward)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one turn at a time
    recordings: list[_Recording] = field(default_factory=list)
    turns: int = 0  # replies recorded
    tool_calls: int = 0  # tool calls in those replies
    rewrites: int = 0  # turns whose history did not match the recording
    reward: float | None = None  # set once rewarded: the session has ended
    task_id: str | None = None  # the reward's
    group_id: str | None = None  # its group's, once the group is finished


@dataclass
class Turn:
    """One turn of a session between its prompt and its reply; `record` it once sampled."""

    session: Session
    prompt_ids: list[int]  # what the engine is to be given
    messages: list[Message]  # the conversation as sent
    tools: list[dict[str, Any]] | None
    temperature: float
    continues: bool  # extends the session's last segment (else a new one begins)
    reason: str  # "first", "continued", "rewritten" or "temperature"
    completion: Completion | None = None
    n_tokens: int = 0  # sampled tokens kept (a stop string cuts the rest)
    reply: Message | None = None

    def record(self, completion: Completion, n_tokens: int, reply: dict[str, Any]) -> None:
        """Keep the sampled reply: the completion, how many of its tokens the response
        kept, and the response's OpenAI message (what the harness will send back)."""
        self.completion, self.n_tokens = completion, n_tokens
        calls = [
            ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in reply.get("tool_calls") or []
        ]
        self.reply = Message("assistant", reply.get("content") or "", calls)


@dataclass
class _Group:
    trajectories: list[Trajectory]
    started: float  # recorder clock at its first reward
    sessions: list[Session] = field(default_factory=list)  # the trajectories' sessions

    def session_ids(self) -> list[str]:
        """Its sessions' ids (to forget them in the journal)."""
        return [session.id for session in self.sessions]


class SessionRecorder:
    """Records chat sessions as segments and turns rewarded ones into trajectory groups."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        ttl_s: float = 3600.0,
        group_size: int = 8,
        sink: GroupSink | None = None,
        name: str = "serve",
        clock: Callable[[], float] = time.monotonic,
        signals: dict[str, float] | None = None,
        journal: SessionJournal | None = None,
    ) -> None:
        """`ttl_s`: a session without a turn or reward for this long expires (a rewarded one
        is forgotten after it too); `group_size`: rewarded sessions of one task per group;
        `sink`: where groups go (None: counted, not sent); `name`: prefix of group ids;
        `signals`: the weight of each outcome signal POST /v1/feedback may carry;
        `journal`: where sessions are kept on disk, and recovered from at start-up."""
        if not ttl_s > 0 or group_size < 1:
            raise ValueError(f"need ttl_s > 0 and group_size >= 1, got {ttl_s}, {group_size}")
        self.tokenizer = tokenizer
        self.ttl_s = ttl_s
        self.group_size = group_size
        self.sink = sink
        self.name = name
        self.clock = clock
        self.signals = dict(signals or {})
        self.stats = RecorderStats()
        self._sessions: dict[str, Session] = {}
        self._groups: dict[str, _Group] = {}  # by task_id, until group_size are rewarded
        self._outbox: list[_Group] = []  # finished groups not yet accepted by the sink
        self._group_seq = 0
        # in the group ids: a restarted process's groups do not reuse a previous one's
        self._incarnation = secrets.token_hex(3)
        self._flushing = asyncio.Lock()
        self.journal = journal
        if journal is not None:
            self._recover(journal)

    # -- turns ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(
        self,
        session_id: str,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        temperature: float,
    ) -> AsyncIterator[Turn]:
        """Hold `session_id`'s lock for one turn and yield its prompt; the reply given to
        `Turn.record` is added to the session when the block exits normally. A block that
        raises records nothing. Raises SessionEnded for a rewarded session."""
        session = self._sessions.get(session_id)
        if session is None:
            now = self.clock()
            session = self._sessions[session_id] = Session(session_id, now, now)
        async with session.lock:
            if session.reward is not None:
                raise SessionEnded(f"session {session_id!r} was rewarded: use a new `user`")
            turn = self._plan(session, messages, tools or None, temperature)
            yield turn
            if turn.completion is None or turn.reply is None:
                raise RuntimeError("a recorded turn ended without Turn.record")
            self._commit(turn)
        self.stats.active = self._active()

    def note_unrecorded(self) -> None:
        """Count a chat request served without recording (it had no `user`)."""
        self.stats.unrecorded_requests += 1

    def _plan(
        self,
        session: Session,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        temperature: float,
    ) -> Turn:
        """The turn's prompt: the last segment continued where the sent messages start with
        what it recorded (and the tools are the same), else the whole chat rendered anew."""
        last = session.recordings[-1] if session.recordings else None
        if last is None:
            reason = "first"
        elif last.tools != tools or messages[: len(last.history)] != last.history:
            reason = "rewritten"
        else:
            ids = last.segment.token_ids
            eos = self.tokenizer.eos_id
            closing = [] if ids[-1] == eos else [eos]  # as the chat template closes a reply
            new = encode_continuation(self.tokenizer, messages[len(last.history) :])
            prompt = [*ids, *closing, *new]
            same = temperature == last.segment.temperature
            reason = "continued" if same else "temperature"
            return Turn(session, prompt, messages, tools, temperature, same, reason)
        prompt = encode_chat(self.tokenizer, messages, tools)
        return Turn(session, prompt, messages, tools, temperature, False, reason)

    def _commit(self, turn: Turn) -> None:
        """Append the turn's prompt and sampled reply to its segment (a new one if need be)."""
        session, completion, n = turn.session, turn.completion, turn.n_tokens
        assert completion is not None and turn.reply is not None
        if turn.continues:
            recording = session.recordings[-1]
        else:
            recording = _Recording(Segment([], [], [], [], temperature=turn.temperature), [], None)
            session.recordings.append(recording)
            if turn.reason != "first":
                self.stats.new_segments += 1
            if turn.reason == "rewritten":
                session.rewrites += 1
                self.stats.rewritten += 1
                self.stats.rewritten_sessions += session.rewrites == 1
            elif turn.reason == "temperature":
                self.stats.temperature_changes += 1
        seg = recording.segment
        new_prompt = turn.prompt_ids[len(seg.token_ids) :]
        seg.token_ids += new_prompt + completion.token_ids[:n]
        seg.loss_mask += [0] * len(new_prompt) + [1] * n
        seg.logprobs += [0.0] * len(new_prompt) + completion.logprobs[:n]
        seg.versions += [-1] * len(new_prompt) + completion.versions[:n]
        if completion.routed_experts is not None and completion.prompt_routed_experts is not None:
            # The turn's prefill routed every earlier position again: keep the newest routing.
            seg.routed_experts = completion.prompt_routed_experts + completion.routed_experts[:n]
        recording.history = [*turn.messages, turn.reply]
        recording.tools = turn.tools
        self.stats.sessions += session.turns == 0
        session.turns += 1
        session.tool_calls += len(turn.reply.tool_calls)
        session.last_active = self.clock()
        self.stats.turns += 1
        self.stats.sampled_tokens += n
        self._keep(session)

    # -- reading and rewarding ------------------------------------------------------------

    def view(self, session_id: str) -> dict[str, Any]:
        """GET /v1/sessions/{id}: the segments (as `Segment` fields) and the turn count."""
        session = self._get(session_id)
        segments = []
        for recording in session.recordings:
            body = asdict(recording.segment)
            del body["guided"]
            if body["routed_experts"] is None:
                del body["routed_experts"]
            segments.append(body)
        return {
            "id": session.id,
            "segments": segments,
            "turns": session.turns,
            "rewrites": session.rewrites,
            "ended": session.reward is not None,
            "reward": session.reward,
        }

    async def reward(self, session_id: str, reward: float, task_id: str | None) -> dict[str, Any]:
        """End a session with its reward; its trajectory joins the group of `task_id`.

        Raises UnknownSession, or SessionEnded when it was rewarded before. Waits for a turn
        in flight. Returns where the trajectory went (its group id, whether the group was
        sent)."""
        session = self._get(session_id)
        async with session.lock:
            if session.reward is not None:
                raise SessionEnded(f"session {session_id!r} was already rewarded")
            session.reward, session.task_id = reward, task_id
            session.last_active = self.clock()
            self.stats.rewarded += 1
            self.stats.active = self._active()
            trajectory, key = self._join_group(session)
            if session.group_id is None:  # a finished group's sessions are kept already
                self._keep(session)
        before = self.stats.groups_sent
        await self.flush()
        return {
            "id": session_id,
            "task_id": trajectory.task_id,
            "group_id": trajectory.group_id,
            "waiting": len(self._groups[key].trajectories) if key in self._groups else 0,
            "sent": self.stats.groups_sent > before,
        }

    def _join_group(self, session: Session) -> tuple[Trajectory, str]:
        """A rewarded session's trajectory, added to its task's group (finished once it
        holds group_size); the trajectory and the group's key."""
        trajectory = self._trajectory(session)
        key = session.task_id if session.task_id is not None else f"session:{session.id}"
        group = self._groups.setdefault(key, _Group([], self.clock()))
        group.trajectories.append(trajectory)
        group.sessions.append(session)
        size = self.group_size if session.task_id is not None else 1
        if len(group.trajectories) >= size:
            del self._groups[key]
            self._finish_group(group)
        return trajectory, key

    def _trajectory(self, session: Session) -> Trajectory:
        """A rewarded session as the trainer's trajectory (its group's id, once it has one)."""
        assert session.reward is not None
        return Trajectory(
            task_id=session.task_id or session.id,
            segments=[r.segment for r in session.recordings],
            reward=session.reward,
            finish_reason="external",
            turns=session.turns,
            tool_calls=session.tool_calls,
            tool_errors=0,
            duration_s=session.last_active - session.created,
            group_id=session.group_id or "",
        )

    def _get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None or not session.turns:  # a session whose turns all failed
            raise UnknownSession(f"no recorded session {session_id!r}")
        return session

    def _active(self) -> int:
        return sum(s.reward is None and s.turns > 0 for s in self._sessions.values())

    def _finish_group(self, group: _Group) -> None:
        """Give a finished group its id, journal it with its sessions (a restarted process
        sends the same group again, not a new one), and queue it for the sink."""
        group_id = f"{self.name}-{self._incarnation}-{self._group_seq}"
        self._group_seq += 1
        for trajectory in group.trajectories:
            trajectory.group_id = group_id
        for session in group.sessions:
            session.group_id = group_id
            self._keep(session)
        self._queue(group)

    def _queue(self, group: _Group) -> None:
        """Queue a finished group for the sink; with none, count it unsent and forget it."""
        if self.sink is None:
            self.stats.groups_unsent += 1
            self._forget(group.session_ids())
        else:
            self._outbox.append(group)

    async def flush(self) -> None:
        """Hand queued groups to the sink (in a thread), in order; one that raises stays
        queued. One flush at a time: two rewards at once must not send a group twice."""
        async with self._flushing:
            while self._outbox and self.sink is not None:
                group = self._outbox[0]
                try:
                    await asyncio.to_thread(self.sink, group.trajectories)
                except Exception:
                    self.stats.send_failures += 1
                    log.exception(
                        "recorded group %s not sent; retried later",
                        group.trajectories[0].group_id,
                    )
                    return
                self._outbox.pop(0)
                self._forget(group.session_ids())
                self.stats.groups_sent += 1
                self.stats.trajectories_sent += len(group.trajectories)

    # -- the journal ------------------------------------------------------------------

    def _keep(self, session: Session) -> None:
        """Write the session to the journal, if there is one."""
        if self.journal is None:
            return
        now = self.clock()
        self.journal.save(
            {
                "id": session.id,
                "created": wall_time(session.created, now),
                "last_active": wall_time(session.last_active, now),
                "recordings": [
                    encode_recording(r.segment, r.history, r.tools) for r in session.recordings
                ],
                "turns": session.turns,
                "tool_calls": session.tool_calls,
                "rewrites": session.rewrites,
                "reward": session.reward,
                "task_id": session.task_id,
                "group_id": session.group_id,
            }
        )

    def _forget(self, session_ids: list[str]) -> None:
        """Drop sessions from the journal: sent, expired or dropped."""
        if self.journal is not None:
            self.journal.remove(session_ids)

    def _recover(self, journal: SessionJournal) -> None:
        """Take back the sessions a previous process journaled: those still recording go
        on; rewarded ones of a finished group make that group again, to be sent (again, if
        that process died right after sending it); other rewarded ones rejoin their task's
        group."""
        now = self.clock()
        finished: dict[str, _Group] = {}
        for state in journal.load():
            recordings = [_Recording(*decode_recording(r)) for r in state["recordings"]]
            session = Session(
                state["id"],
                clock_time(state["created"], now),
                clock_time(state["last_active"], now),
                recordings=recordings,
                turns=state["turns"],
                tool_calls=state["tool_calls"],
                rewrites=state["rewrites"],
                reward=state["reward"],
                task_id=state["task_id"],
                group_id=state.get("group_id"),
            )
            self._sessions[session.id] = session
            self.stats.recovered += 1
            if session.group_id is not None:
                group = finished.setdefault(session.group_id, _Group([], now))
                group.trajectories.append(self._trajectory(session))
                group.sessions.append(session)
            elif session.reward is not None:
                self._join_group(session)
        for group in finished.values():
            self._queue(group)
        self.stats.active = self._active()

    # -- expiry -----------------------------------------------------------------------

    async def sweep(self) -> None:
        """Expire sessions idle for ttl_s (counted), forget rewarded ones after it, settle
        groups waiting longer than it, and retry groups the sink refused."""
        now = self.clock()
        for session in list(self._sessions.values()):
            if session.lock.locked() or now - session.last_active < self.ttl_s:
                continue
            del self._sessions[session.id]
            if session.reward is None:
                self._forget([session.id])
            if session.reward is None and session.turns:
                self.stats.expired += 1
                log.warning(
                    "session %r expired unrewarded after %d turns", session.id, session.turns
                )
        for key, group in list(self._groups.items()):
            if now - group.started < self.ttl_s:
                continue
            del self._groups[key]
            if len(group.trajectories) >= MIN_GROUP:
                self.stats.partial_groups += 1
                self._finish_group(group)
            else:
                self.stats.groups_dropped += 1
                self._forget(group.session_ids())
                log.warning("group of %r dropped: 1 of %d sessions rewarded", key, self.group_size)
        self.stats.active = self._active()
        await self.flush()

    async def run(self) -> None:
        """Sweep every `ttl_s / 4` seconds (at most every minute) until cancelled."""
        period = min(self.ttl_s / 4, 60.0)
        await self.flush()  # groups recovered from the journal
        while True:
            await asyncio.sleep(period)
            await self.sweep()

    def close(self) -> None:
        """Log what a shutdown loses: sessions still recording, groups not yet complete."""
        waiting = sum(len(g.trajectories) for g in self._groups.values())
        if self.stats.active or waiting or self._outbox:
            log.warning(
                "recorder closed with %d unrewarded sessions, %d rewarded sessions in "
                "incomplete groups and %d groups not sent",
                self.stats.active,
                waiting,
                len(self._outbox),
            )

    def summary(self) -> dict[str, Any]:
        """GET /v1/sessions: the counters, and the ids of the sessions held."""
        body: dict[str, Any] = asdict(self.stats)
        body["ttl_s"] = self.ttl_s
        body["group_size"] = self.group_size
        body["waiting_groups"] = {k: len(g.trajectories) for k, g in self._groups.items()}
        body["ids"] = sorted(self._sessions)
        return body
