"""A simulated user population: scripted clients that use a served model as users would.

    rate λ ─▶ arrivals, exponential gaps (seeded) ─▶ user i: a task, a fresh sandbox
      ─▶ micro harness ⇄ POST /v1/chat/completions {"user": "user-<seed>-<i>"}  (recorded)
      ─▶ verifier grades the sandbox ─▶ POST /v1/feedback {session_id, reward, task_id}

Real-time RL learns from the sessions of people using a served model (`fleetrl serve
--record`, docs/serving.md): each chat session is recorded token by token under its
`user`, and ends with the user's feedback, which turns it into a trajectory. This module
stands in for the people, to test that path end to end (`fleetrl bench realtime` drives
it): users arrive as a Poisson process, each works on one task through fleetrl's micro
harness (`run_episode_openai`) in a sandbox of its own, keeps the change if its tests
pass (the verifier's verdict is the reward) and says so with a POST /v1/feedback.

At most `concurrency` users work at once; one who arrives beyond that waits (`arrived`
and `started` differ). A request the server does not answer (down, timed out) or answers
429/5xx is sent again with backoff for up to `retry_s`; a user whose request still fails
gives up, as does one whose sandbox or grading fails: the failure is recorded in the
session's `error`, never raised.

Not covered: think time between turns (a user's requests go back to back), users who
leave without feedback or send `signals`, streaming. A chat request retried after the
server had recorded it reaches the recorder as a rewritten turn. Session ids repeat with
the seed: a second run with the same seed against the same server collides with the
first's (already rewarded) sessions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import dataclass, field

import httpx
import numpy as np

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.harness.loop import run_episode_openai
from fleetrl.envs.sandbox import Limits, open_sandbox
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.types import Task

FIRST_BACKOFF_S = 0.25  # the wait before the first retry; it doubles each retry after
MAX_BACKOFF_S = 4.0
FEEDBACK_TIMEOUT_S = 30.0  # per attempt


@dataclass
class UserSession:
    """One simulated user's session, as the user saw it."""

    session_id: str  # the chat requests' `user`: the id the server records the session under
    task_id: str
    arrived: float  # unix time the user arrived
    started: float = 0.0  # unix time a slot was free and the user began (>= arrived)
    ended: float = 0.0  # unix time the user was done (feedback sent, or given up)
    reward: float | None = None  # the verifier's; None when the sandbox was never graded
    finish_reason: str = ""  # how the episode ended (`Trajectory.finish_reason`)
    turns: int = 0
    request_latencies_s: list[float] = field(default_factory=list)  # per chat request
    versions: set[int] = field(default_factory=set)  # policy versions that sampled its replies
    feedback_status: int | None = None  # HTTP status of the feedback POST; None: none answered
    error: str | None = None  # why the user gave up; None when all went through


class _RetryingTransport(httpx.AsyncBaseTransport):
    """httpx's transport, patient: a request that gets no answer (connection refused,
    timeout) or a 429/5xx one is sent again, with exponential backoff, until another
    answer comes or `retry_s` seconds have passed since the first try (then the last
    error stands). Each answered request's wall time, retries and body included, is
    appended to `latencies`; with `versions`, the policy versions that sampled each
    answered (200) chat response are added to it (`sampled_versions`)."""

    def __init__(
        self,
        retry_s: float,
        latencies: list[float] | None = None,
        versions: set[int] | None = None,
    ) -> None:
        self.retry_s = retry_s
        self.latencies = latencies if latencies is not None else []
        self.versions = versions
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        start = time.monotonic()
        delay = FIRST_BACKOFF_S

        def patience_left() -> bool:  # for one more wait and try
            return time.monotonic() + delay - start <= self.retry_s

        while True:
            try:
                response = await self._inner.handle_async_request(request)
            except httpx.TransportError:
                if not patience_left():
                    raise
            else:
                busy = response.status_code == 429 or response.status_code >= 500
                if not busy or not patience_left():
                    await response.aread()
                    self.latencies.append(time.monotonic() - start)
                    if self.versions is not None and response.status_code == 200:
                        self.versions.update(sampled_versions(response.content))
                    return response
                await response.aclose()
            await asyncio.sleep(delay)
            delay = min(2 * delay, MAX_BACKOFF_S)

    async def aclose(self) -> None:
        await self._inner.aclose()


def sampled_versions(body: bytes) -> set[int]:
    """The policy versions that sampled a chat response's tokens: its choices' `versions`,
    which fleetrl's server adds to OpenAI's response (none from a server without them)."""
    choices = json.loads(body).get("choices") or []
    return {v for choice in choices for v in choice.get("versions") or [] if v >= 0}


def arrival_offsets(rate_per_s: float, count: int, rng: random.Random) -> list[float]:
    """Seconds after the start at which `count` users arrive: a Poisson process of rate
    `rate_per_s` (independent exponential gaps of mean 1/rate), how independent users
    arrive at a service."""
    return list(itertools.accumulate(rng.expovariate(rate_per_s) for _ in range(count)))


def task_draws(tasks: list[Task], count: int, rng: random.Random, pool: int | None) -> list[Task]:
    """The tasks of `count` users in order of arrival: each drawn uniformly from `tasks`;
    with `pool`, `pool` of them drawn once and gone through in rounds, each round in a new
    order. A pool is a population whose tasks recur, as a product's users ask alike again
    and again: each round holds the same tasks, so two rounds' rewards compare the policies
    that served them, not two draws of tasks."""
    if pool is None:
        return [rng.choice(tasks) for _ in range(count)]
    if not 1 <= pool <= len(tasks):
        raise ValueError(f"a pool of {pool} tasks needs 1 to {len(tasks)} (the tasks given)")
    chosen = rng.sample(tasks, pool)
    draws: list[Task] = []
    while len(draws) < count:
        draws += rng.sample(chosen, pool)
    return draws[:count]


async def run_users(
    base_url: str,
    model: str,
    tasks: list[Task],
    harness: HarnessSection,
    rate_per_s: float,
    sessions: int,
    seed: int = 0,
    temperature: float = 1.0,
    concurrency: int = 8,
    retry_s: float = 60.0,
    rollout: RolloutSection | None = None,
    api_key: str = "unused",
    pool: int | None = None,
) -> list[UserSession]:
    """`sessions` simulated users of the recording server at `base_url` (its root, e.g.
    http://127.0.0.1:8000), in order of arrival.

    Users arrive at `rate_per_s` (`arrival_offsets`), each picks a task (`task_draws`:
    uniformly from `tasks`, or in rounds through a `pool` of them) and works on it through
    the `harness` at `temperature` under the session id f"user-{seed}-{i}"; the draws are
    seeded by `seed`. At most `concurrency` users work at once. `retry_s`: how long a
    failing request is retried before the user gives up. `rollout`: sandbox backend,
    sandbox limits and grading timeout (default: its defaults). `model` and `api_key` go
    into the chat requests. Returns once every user is done; one user's failure is in its
    session's `error`, never raised."""
    if rate_per_s <= 0 or sessions < 0 or concurrency < 1 or not tasks:
        raise ValueError("need rate_per_s > 0, sessions >= 0, concurrency >= 1 and some tasks")
    settings = rollout or RolloutSection()
    limits = Limits(wall_s=settings.sandbox_wall_s, memory_mb=settings.sandbox_memory_mb)
    root = base_url.rstrip("/")
    rng = random.Random(seed)
    offsets = arrival_offsets(rate_per_s, sessions, rng)
    picks = task_draws(tasks, sessions, rng, pool)
    slots = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def work(session: UserSession, task: Task) -> None:
        """One user's session: an episode in a fresh sandbox, its grading, the feedback."""
        repo = await asyncio.to_thread(ensure_repo, task)
        sandbox = await asyncio.to_thread(open_sandbox, repo, settings.sandbox_backend, limits)
        try:
            episode = await run_episode_openai(
                f"{root}/v1",
                model,
                sandbox,
                task,
                harness,
                temperature,
                api_key,
                user=session.session_id,
                transport=_RetryingTransport(
                    retry_s, session.request_latencies_s, session.versions
                ),
            )
            changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
        finally:
            await asyncio.to_thread(sandbox.close)
        session.turns = episode.trajectory.turns
        session.finish_reason = episode.trajectory.finish_reason
        calls = [(record.name, record.arguments) for record in episode.tool_log]
        verdict = await asyncio.to_thread(
            verify, task, changes, calls, timeout=settings.verify_timeout_s
        )
        session.reward = verdict.reward
        body = {
            "session_id": session.session_id,
            "reward": verdict.reward,
            "task_id": task.instance_id,
        }
        async with httpx.AsyncClient(
            transport=_RetryingTransport(retry_s), timeout=FEEDBACK_TIMEOUT_S
        ) as http:
            response = await http.post(f"{root}/v1/feedback", json=body)
        session.feedback_status = response.status_code
        if response.status_code != 200:
            session.error = f"feedback: HTTP {response.status_code}: {response.text[:200]}"

    async def user(i: int) -> UserSession:
        await asyncio.sleep(max(0.0, start + offsets[i] - loop.time()))
        session = UserSession(f"user-{seed}-{i}", picks[i].instance_id, arrived=time.time())
        async with slots:
            session.started = time.time()
            try:
                await work(session, picks[i])
            except Exception as err:  # one user's failure is recorded, not raised
                session.error = f"{type(err).__name__}: {err}"
            session.ended = time.time()
        return session

    return list(await asyncio.gather(*(user(i) for i in range(sessions))))


def summarise(sessions: list[UserSession]) -> dict[str, float | int | None]:
    """The population's figures for a report: sessions, failed (those with an error), the
    mean reward of the graded ones, request latency p50/p99 in seconds over every chat
    request, and sessions per minute (those without error, over the time from the first
    arrival to the last end). None where there is nothing to measure."""
    latencies = [s for session in sessions for s in session.request_latencies_s]
    rewards = [session.reward for session in sessions if session.reward is not None]
    done = sum(session.error is None for session in sessions)
    span = max(s.ended for s in sessions) - min(s.arrived for s in sessions) if sessions else 0
    return {
        "sessions": len(sessions),
        "failed": len(sessions) - done,
        "mean_reward": float(np.mean(rewards)) if rewards else None,
        "latency_p50_s": float(np.percentile(latencies, 50)) if latencies else None,
        "latency_p99_s": float(np.percentile(latencies, 99)) if latencies else None,
        "sessions_per_minute": 60 * done / span if span > 0 else None,
    }
