"""`fleetrl bench record`: what `fleetrl serve --record` costs an agent harness, and what it keeps.

    this process (the harness)                     two `fleetrl serve` processes, one model
    16 sessions at once, AsyncOpenAI  ─ round 1 ─▶  record   (--record), then
      each turn: the whole chat back,  ─ round 1 ─▶  plain    (no --record)
      `user` = session id              ─ round 2 ─▶  plain, then record, ... (order alternates)
                                                    record: GET /v1/sessions/{id}, /v1/sessions

Workload, per round and arm: `sessions` concurrent multi-turn sessions, as an agent harness
runs them: a system prompt naming the tools and a short bug report (the shipped models'
own prompt format), then `turns` chat requests, each sending the whole conversation back
with the assistant messages as the server returned them and, after each reply, short
tool-like results (a `tool` message per tool call, else a user message). Replies are greedy
by default (`temperature`), at most `max_tokens` tokens: a recorded session continues from
the tokens it sampled and an unrecorded one from the chat rendered anew, and where these
are the same tokens, greedy replies are the same in both arms, so the arms do equal work.
A share of the sessions (`rewrite_share`) edits its history halfway: it drops its first
exchange (the first reply and the results after it), as harnesses that drop malformed
replies or trim their context do, which the recorder must detect (`rewritten_sessions`).

Both servers run the same checkpoint with the same threads, and both are up for the whole
run; the rounds alternate which arm goes first, so that both see the same machine. Latency
is the client's wall time of each chat request (`create()` call to parsed reply), p50 and
p99 over every request of every round, also per reply token; the ratios are record over
plain from this one run. The mean prompt and reply tokens per request of each arm say
whether the work was equal (sampled replies, `temperature` > 0, differ between the arms).

What is kept, from the record arm: bytes per session as `GET /v1/sessions/{id}` returns it
(JSON) and as the trajectory channel stores it (one session as a zstd JSON group record,
`fleetrl.store.trajectories.encode_record`), tokens per session, and the recorder's
counters (`GET /v1/sessions`): sessions, turns, rewritten sessions and turns. Each session
is then rewarded (its group goes nowhere: the server has no store).

Not covered: streaming; a trajectory channel in a real store (the bytes are what it would
hold); harnesses other than this scripted one (`fleetrl bench record --harness
mini-swe-agent` runs the real one: `fleetrl.bench.record_mswe`).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import openai
from rich.progress import Progress

from fleetrl.store.trajectories import GroupRecord, RegionReport, encode_record
from fleetrl.types import Segment, Trajectory

ARMS = ("plain", "record")  # served without and with --record
SYSTEM = "Fix the bug. Tools: read_file, edit_file, run, finish."
BUGS = [
    "The tests of calc.py fail: add(2, 3) returns -1.",
    "parse_date in dates.py rejects '2024-02-29'.",
    "slugify('Hello World') returns 'hello_world', the tests expect 'hello-world'.",
    "Stack.pop on an empty stack returns None; it should raise IndexError.",
]
# Short tool-like results: what a harness sends back after each reply.
TOOL_OUTPUT = {
    "read_file": "1\tdef add(a, b):\n2\t    return a - b\n",
    "run": "F..\nFAILED test_calc.py::test_add - assert -1 == 5\n1 failed, 2 passed",
    "edit_file": "edited calc.py",
    "grep": "calc.py:2:    return a - b",
}
NO_CALL = "No tool call found. Call one tool: read_file, edit_file, run or finish."
WARMUP_SESSIONS = 2  # per arm, one turn each, before the timed rounds


class RecordBenchError(Exception):
    """The benchmark cannot run: a server did not start, or refused the workload."""


@dataclass
class RecordBenchConfig:
    """Workload of the recording benchmark."""

    model: str = "base-slip"  # checkpoint both servers load (a shipped name or a folder)
    sessions: int = 16  # concurrent sessions per round and arm
    turns: int = 4  # chat requests per session
    rounds: int = 3  # timed rounds per arm, alternating which arm goes first
    max_tokens: int = 64  # per reply
    rewrite_share: float = 0.0  # share of sessions that edit their history halfway
    temperature: float = 0.0  # of every reply; 0: greedy, the same replies in both arms
    threads: int = 1  # torch threads of each server
    max_model_len: int = 2048  # each server's context length
    seed: int = 0
    start_timeout_s: float = 300.0  # a server's start-up, model loading included


@dataclass
class Served:
    """One `fleetrl serve` process and where it listens."""

    arm: str
    process: subprocess.Popen[str]
    url: str
    output: list[str]  # its output lines so far (for errors)


def serve_argv(config: RecordBenchConfig, record: bool) -> list[str]:
    """`fleetrl serve` as a user starts it, on a free port."""
    argv = [sys.executable, "-m", "fleetrl.cli", "serve", config.model, "--port", "0"]
    argv += ["--threads", str(config.threads), "--max-model-len", str(config.max_model_len)]
    argv += ["--max-batch-size", str(max(64, config.sessions))]  # also sizes its prefix cache
    return argv + (["--record"] if record else [])


def start_server(config: RecordBenchConfig, arm: str) -> Served:
    """Start one server; its URL is read from the line it prints once listening."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        serve_argv(config, arm == "record"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []

    def read() -> None:  # keeps draining, so the server never blocks on a full pipe
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return Served(arm, process, "", lines)


def wait_listening(served: Served, timeout_s: float) -> None:
    """Wait for the start-up line (`fleetrl: serving NAME on http://HOST:PORT (...)`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in served.output:
            if line.startswith("fleetrl: serving") and " on http://" in line:
                served.url = line.split(" on ", 1)[1].split(" ", 1)[0]
                return
        if served.process.poll() is not None:
            time.sleep(0.2)  # let the reader take the last lines
            tail = "; ".join(served.output[-3:]) or "no output"
            raise RecordBenchError(f"the {served.arm} server exited at start-up: {tail}")
        time.sleep(0.1)
    raise RecordBenchError(f"the {served.arm} server did not start within {timeout_s:.0f} s")


def stop_server(served: Served) -> None:
    """End the server this benchmark started (its own process, by its id)."""
    if served.process.poll() is None:
        served.process.terminate()
        try:
            served.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            served.process.kill()
            served.process.wait()


@contextmanager
def servers(config: RecordBenchConfig) -> Iterator[dict[str, Served]]:
    """Both arms' servers, started together, stopped whatever happens."""
    started = {arm: start_server(config, arm) for arm in ARMS}
    try:
        for served in started.values():
            wait_listening(served, config.start_timeout_s)
        yield started
    finally:
        for served in started.values():
            stop_server(served)


# -- the harness ------------------------------------------------------------------------------


def opening(index: int) -> list[dict[str, Any]]:
    """A session's first messages: the system prompt and a bug report."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": BUGS[index % len(BUGS)]},
    ]


def followups(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """What the harness sends after a reply: a tool result per call, else a nudge."""
    calls = reply.get("tool_calls") or []
    if not calls:
        return [{"role": "user", "content": NO_CALL}]
    return [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": TOOL_OUTPUT.get(call["function"]["name"], "ok"),
        }
        for call in calls
    ]


def rewrite(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat without its first exchange (the first reply and the results after it), as
    a harness that drops a reply from its history does: no longer what was recorded."""
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    end = replies[1] if len(replies) > 1 else len(messages)
    return messages[: replies[0]] + messages[end:]


def rewriting_sessions(config: RecordBenchConfig) -> set[int]:
    """Which sessions edit their history: round(share x sessions) of them, seeded."""
    count = round(config.rewrite_share * config.sessions)
    return set(random.Random(config.seed).sample(range(config.sessions), count))


async def run_session(
    client: openai.AsyncOpenAI,
    session_id: str,
    index: int,
    config: RecordBenchConfig,
    rewrites: bool,
    advance: Callable[[], None],
) -> list[tuple[float, int, int]]:
    """One session's turns; per chat request its latency (seconds), prompt and reply tokens."""
    messages = opening(index)
    latencies = []
    for turn in range(config.turns):
        if rewrites and turn == max(1, config.turns // 2):
            messages = rewrite(messages)
        start = time.perf_counter()
        try:
            response = await client.chat.completions.create(
                model="served",
                messages=messages,  # type: ignore[arg-type]
                user=session_id,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                seed=config.seed * 1_000_003 + index * 1009 + turn,
            )
        except openai.APIStatusError as err:
            raise RecordBenchError(
                f"the server refused a turn ({err.status_code}): {err}"
            ) from None
        except openai.APIConnectionError as err:
            raise RecordBenchError(f"lost the server: {err}") from None
        usage = response.usage
        assert usage is not None
        latencies.append(
            (time.perf_counter() - start, usage.prompt_tokens, usage.completion_tokens)
        )
        reply = response.choices[0].message.model_dump(exclude_none=True)
        messages += [reply, *followups(reply)]
        advance()
    return latencies


async def run_round(
    url: str, prefix: str, config: RecordBenchConfig, advance: Callable[[], None]
) -> list[tuple[float, int, int]]:
    """All sessions of one round at once against the server at `url`; every request's
    latency, prompt and reply tokens."""
    rewrites = rewriting_sessions(config)
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    async with client:
        jobs = [
            run_session(client, f"{prefix}-s{i}", i, config, i in rewrites, advance)
            for i in range(config.sessions)
        ]
        return [latency for session in await asyncio.gather(*jobs) for latency in session]


# -- what is recorded -------------------------------------------------------------------------


def stored_bytes(view: dict[str, Any]) -> int:
    """Bytes of one session (`GET /v1/sessions/{id}`) as the trajectory channel stores
    it: a group record of one trajectory."""
    trajectory = Trajectory(
        task_id=view["id"],
        segments=[Segment(**segment) for segment in view["segments"]],
        reward=0.0,
        finish_reason="external",
        turns=view["turns"],
        tool_calls=0,
        tool_errors=0,
        duration_s=0.0,
    )
    return len(encode_record(GroupRecord("serve", 0, [trajectory], RegionReport("serve", 0))))


def collect(url: str, session_ids: list[str]) -> list[dict[str, int]]:
    """Per session of a finished round: view bytes, stored bytes, tokens; then its reward."""
    kept = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for session_id in session_ids:
            response = client.get(f"/v1/sessions/{session_id}")
            response.raise_for_status()
            view = response.json()
            segments = view["segments"]
            kept.append(
                {
                    "view_bytes": len(response.content),
                    "stored_bytes": stored_bytes(view),
                    "tokens": sum(len(s["token_ids"]) for s in segments),
                    "segments": len(segments),
                }
            )
            client.post(f"/v1/sessions/{session_id}/reward", json={"reward": 0.0})
    return kept


def counters(url: str) -> dict[str, Any]:
    """The recorder's counters (GET /v1/sessions)."""
    response = httpx.get(f"{url}/v1/sessions", timeout=60)
    response.raise_for_status()
    return response.json()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def run_record_bench(config: RecordBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Start both servers, run the rounds alternately, read what was recorded; the figures
    (JSON-ready). Raises RecordBenchError when a server fails to start or refuses a turn."""
    latencies: dict[str, list[tuple[float, int, int]]] = {arm: [] for arm in ARMS}
    kept: list[dict[str, int]] = []
    per_round = config.sessions * config.turns
    with servers(config) as served, Progress(disable=not progress, transient=True) as bar:
        warmup = RecordBenchConfig(**{**asdict(config), "sessions": WARMUP_SESSIONS, "turns": 1})
        for arm in ARMS:  # first calls into torch are slow: not timed
            asyncio.run(run_round(served[arm].url, f"warmup-{arm}", warmup, lambda: None))
        tasks = {arm: bar.add_task(arm, total=per_round * config.rounds) for arm in ARMS}
        for round_ in range(config.rounds):
            for arm in ARMS if round_ % 2 else ARMS[::-1]:
                url, prefix = served[arm].url, f"{arm}-r{round_}"
                advance = lambda arm=arm: bar.advance(tasks[arm])  # noqa: E731
                latencies[arm] += asyncio.run(run_round(url, prefix, config, advance))
                if arm == "record":
                    ids = [f"{prefix}-s{i}" for i in range(config.sessions)]
                    kept += collect(url, ids)
        summary = counters(served["record"].url)
    return figures(config, latencies, kept, summary)


def figures(
    config: RecordBenchConfig,
    latencies: dict[str, list[tuple[float, int, int]]],
    kept: list[dict[str, int]],
    summary: dict[str, Any],
) -> dict[str, Any]:
    """The benchmark's flat figures."""
    out: dict[str, Any] = {f"config_{k}": v for k, v in asdict(config).items()}
    for arm in ARMS:
        seconds = [s for s, _, _ in latencies[arm]]
        out[f"{arm}_requests"] = len(seconds)
        for q in (50, 99):
            out[f"{arm}_p{q}_ms"] = 1000 * percentile(seconds, q)
        out[f"{arm}_mean_ms"] = 1000 * statistics.fmean(seconds)
        # Per reply token: the arms sample their own replies, which need not be as long.
        per_token = [s / max(r, 1) for s, _, r in latencies[arm]]
        for q in (50, 99):
            out[f"{arm}_p{q}_ms_per_reply_token"] = 1000 * percentile(per_token, q)
        # The arms sample their own replies: equal work only if these match.
        out[f"{arm}_prompt_tokens_mean"] = statistics.fmean(p for _, p, _ in latencies[arm])
        out[f"{arm}_reply_tokens_mean"] = statistics.fmean(r for _, _, r in latencies[arm])
    for q in (50, 99):
        out[f"p{q}_ratio"] = out[f"record_p{q}_ms"] / out[f"plain_p{q}_ms"]
        per_token = f"p{q}_ms_per_reply_token"
        out[f"{per_token}_ratio"] = out[f"record_{per_token}"] / out[f"plain_{per_token}"]
    # The counters include the warm-up's sessions (one turn each, never rewritten).
    sessions = summary["sessions"] - WARMUP_SESSIONS
    out |= {
        "recorded_sessions": sessions,
        "recorded_turns": summary["turns"] - WARMUP_SESSIONS,
        "view_bytes_per_session_median": statistics.median(k["view_bytes"] for k in kept),
        "view_bytes_per_session_mean": statistics.fmean(k["view_bytes"] for k in kept),
        "stored_bytes_per_session_median": statistics.median(k["stored_bytes"] for k in kept),
        "stored_bytes_per_session_mean": statistics.fmean(k["stored_bytes"] for k in kept),
        "tokens_per_session_median": statistics.median(k["tokens"] for k in kept),
        "segments_per_session_mean": statistics.fmean(k["segments"] for k in kept),
        "rewritten_sessions": summary["rewritten_sessions"],
        "rewritten_turns": summary["rewritten"],
        "rewritten_share": summary["rewritten_sessions"] / sessions if sessions else 0.0,
        "new_segments": summary["new_segments"],
        "unrecorded_requests": summary["unrecorded_requests"],
    }
    return out
