"""The agent loop: the model works on a task in a sandbox through tools, turn by turn.

    system + task ─▶ generate ─▶ parse tool calls ─▶ run them in the sandbox ─┐
          ▲                                                                    │
          └──────────── append results (masked out of the loss) ◀──────────────┘
    until `finish`, a reply without a tool call, or a budget (turns, tokens, context, time)

`run_episode` drives a token-level policy (the Engine, or anything with its `generate`):
token in, token out. The trajectory holds the exact ids the policy sampled with their
logprobs, versions, MoE routing and sampling temperature; prompt and tool-result tokens
are in the same sequence with loss_mask 0. Nothing is re-tokenised: tool results are
appended with `encode_continuation`, never by re-rendering the model's own reply.

`run_episode_openai` drives any OpenAI-compatible chat endpoint (for evaluation of models
served elsewhere); it runs the same tools but records no tokens.

When the context fills, the episode ends with "context_full", or, with self-summarisation
(`harness.summarise_at`; on by default for the `long` suite), the policy is asked for a
summary and goes on from it in a fresh context window:

    segment 1: system + task ─▶ turns ... ─▶ tool results + summary request ─▶ summary
    segment 2: system + task + "Your notes from before: <summary>" ─▶ turns ...

Each window is one Segment of the trajectory; the summary tokens are sampled like any
reply (loss mask 1), so the episode's reward trains them. The last tool result before a
summary is not carried over: the summary has to keep what the policy still needs.
`harness.truncate` (a benchmark arm) drops the oldest turns instead.

The reward is not computed here: the verifier grades the sandbox afterwards
(`fleetrl.envs.verifier`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.tools import TOOL_SPECS, ToolOutcome, execute
from fleetrl.envs.sandbox import Sandbox
from fleetrl.model.chat import Message, ToolCall, encode_chat, encode_continuation, parse_reply
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Segment, Task, Trajectory

# What stands for tool results that leave no room for the summary the harness asks for.
CUT_RESULT = "(this result does not fit in the context: note what you need to read again)"


class TokenPolicy(Protocol):
    """What the harness samples from; `fleetrl.inference.Engine` is one."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion: ...


@dataclass
class ToolRecord:
    """One executed tool call, for the verifier's anti-cheat checks and for debugging."""

    turn: int  # 1-based assistant turn that made the call
    name: str
    arguments: dict[str, Any]
    error: bool  # the call was at fault (see ToolOutcome)
    output: str  # the text the model was shown (truncated)


@dataclass
class Episode:
    """What an episode leaves behind besides the sandbox's files."""

    trajectory: Trajectory  # reward still 0.0: grading happens after
    tool_log: list[ToolRecord]  # every call, malformed ones included, in order


def task_prompt(task: Task, config: HarnessSection) -> list[Message]:
    """The opening messages of an episode on `task`."""
    messages = [Message("system", config.system_prompt)] if config.system_prompt else []
    text = config.task_template.format(problem_statement=task.problem_statement)
    return [*messages, Message("user", text)]


def neutralise_specials(text: str, tokenizer: Tokenizer) -> str:
    """Break special-token strings inside tool output (a file may contain `<|im_end|>`), so
    tool results can never inject control tokens into the context."""
    for token_id in tokenizer.special_ids:
        special = tokenizer.id_to_token(token_id)
        if special and special in text:
            text = text.replace(special, special[0] + "\u200b" + special[1:])
    return text


class _SegmentBuilder:
    """Accumulates one context window's ids with their per-position annotations."""

    def __init__(self, prompt_ids: list[int], temperature: float) -> None:
        self.segment = Segment(
            token_ids=list(prompt_ids),
            loss_mask=[0] * len(prompt_ids),
            logprobs=[0.0] * len(prompt_ids),
            versions=[-1] * len(prompt_ids),
            temperature=temperature,
        )
        self.fed = len(prompt_ids)  # positions the policy has processed

    def add_prompt(self, ids: list[int]) -> None:
        seg = self.segment
        seg.token_ids += ids
        seg.loss_mask += [0] * len(ids)
        seg.logprobs += [0.0] * len(ids)
        seg.versions += [-1] * len(ids)

    def add_completion(self, completion: Completion) -> None:
        seg = self.segment
        seg.token_ids += completion.token_ids
        seg.loss_mask += [1] * len(completion.token_ids)
        seg.logprobs += completion.logprobs
        seg.versions += completion.versions
        self.fed = len(seg.token_ids)
        if completion.routed_experts is not None and completion.prompt_routed_experts is not None:
            # The latest prefill routed every earlier position again: keep the newest routing.
            seg.routed_experts = completion.prompt_routed_experts + completion.routed_experts

    def finish(self) -> Segment:
        """The segment without trailing results the policy never read (no routing, no loss)."""
        seg = self.segment
        for name in ("token_ids", "loss_mask", "logprobs", "versions"):
            setattr(seg, name, getattr(seg, name)[: self.fed])
        return seg


def environment_latency(mean_s: float) -> float:
    """A long-tailed wait (log-normal, sigma 1) with mean `mean_s` seconds."""
    return random.lognormvariate(math.log(mean_s) - 0.5, 1.0)


async def run_tool_calls(
    sandbox: Sandbox,
    calls: list[ToolCall],
    turn: int,
    limits: HarnessSection,
    log: list[ToolRecord],
) -> tuple[list[ToolOutcome], bool]:
    """Run one turn's calls in order; stop at `finish`. Returns outcomes and whether finished."""
    outcomes = []
    for call in calls:
        outcome = await asyncio.to_thread(execute, sandbox, call, limits)
        log.append(ToolRecord(turn, call.name, call.arguments, outcome.error, outcome.text))
        if outcome.finished:
            return outcomes, True
        outcomes.append(outcome)
    return outcomes, False


class _Window:
    """The episode's context windows: the current one's builder, those already closed,
    and the chunks (a reply and the results after it) the current one holds."""

    def __init__(self, opening: list[int], temperature: float) -> None:
        self.opening, self.temperature = opening, temperature
        self.builder = _SegmentBuilder(opening, temperature)
        self.closed: list[Segment] = []
        self.chunks: list[list[int]] = []  # since the opening, for truncation

    def __len__(self) -> int:
        return len(self.builder.segment.token_ids)

    def reopen(self, opening: list[int], chunks: list[list[int]] | None = None) -> None:
        """Close the current window and open a fresh one on `opening` (the window's own
        opening followed by `chunks`, when carried over by a truncation)."""
        self.closed.append(self.builder.finish())
        chunks = chunks or []
        self.builder = _SegmentBuilder(opening + [t for c in chunks for t in c], self.temperature)
        self.chunks = chunks

    def segments(self) -> list[Segment]:
        return [*self.closed, self.builder.finish()]


def _truncated(window: _Window, results: list[int], room: int) -> list[list[int]] | None:
    """The newest chunks (the last reply and `results` always among them) that fit in
    `room` tokens after the opening; None when even the last does not."""
    last = window.chunks[-1] + results
    kept = [*window.chunks[:-1], last]
    while kept and len(window.opening) + sum(map(len, kept)) > room:
        kept.pop(0)
    if not kept or kept[-1] is not last:
        return None
    return kept


async def run_episode(
    policy: TokenPolicy,
    tokenizer: Tokenizer,
    sandbox: Sandbox,
    task: Task,
    config: HarnessSection,
    sampling: SamplingParams,
    group_id: str = "",
    env_latency_s: float = 0.0,
) -> Episode:
    """Let the policy work on `task` in `sandbox` until it finishes or a budget runs out.

    `sampling` sets temperature and seed (each reply samples with a seed of its own drawn
    from it, so a seeded episode repeats; the harness sets each reply's token budget and
    stop token); `env_latency_s` (benchmarks only) waits after each turn's tools, log-normal
    with this mean (p99 ~10x the median), like slow test suites and remote tools.

    With summarisation (`config.summary_limit`), when the next turn would pass the limit
    the results of the turn are followed by the summary request, the policy's summary
    closes the segment, and the next one opens on the task and the summary; with
    `config.truncate`, the oldest turns are dropped instead (a new segment too, since the
    context is no longer an extension of the last). Each segment's prompts are prefixes
    of its final sequence."""
    start = time.monotonic()
    tools = TOOL_SPECS if config.describe_tools else None
    opening = task_prompt(task, config)
    window = _Window(encode_chat(tokenizer, opening, tools), sampling.temperature)
    limit = config.summary_limit(task.suite)
    log: list[ToolRecord] = []
    summaries: list[str] = []
    turns = sampled = tool_errors = 0
    reason = "max_turns"
    while turns < config.max_turns:
        if time.monotonic() - start > config.wall_s:
            reason = "wall_time"
            break
        budget = min(
            config.max_reply_tokens, config.max_tokens - sampled, config.max_context - len(window)
        )
        if budget < 1:
            reason = "max_tokens" if sampled >= config.max_tokens else "context_full"
            break
        params = replace(
            sampling.reseeded(turns), max_tokens=budget, stop_token_ids=[tokenizer.eos_id]
        )
        completion = await policy.generate(window.builder.segment.token_ids, params)
        window.builder.add_completion(completion)
        window.chunks.append(list(completion.token_ids))
        turns += 1
        sampled += len(completion.token_ids)
        if completion.finish_reason != "stop":  # cut off mid-reply: nothing reliable to run
            reason = "max_tokens"
            break
        reply = parse_reply(tokenizer.decode(completion.token_ids))
        if not reply.tool_calls and not reply.errors:
            reason = "no_tool_call"
            break
        outcomes, finished = await run_tool_calls(sandbox, reply.tool_calls, turns, config, log)
        tool_errors += len(reply.errors) + sum(o.error for o in outcomes)
        if env_latency_s > 0:
            await asyncio.sleep(environment_latency(env_latency_s))
        if finished:
            reason = "finish"
            break
        results = [f"error: {e}" for e in reply.errors] + [o.text for o in outcomes]
        messages = [Message("tool", neutralise_specials(r, tokenizer)) for r in results]
        ids = encode_continuation(tokenizer, messages)
        next_turn = len(window) + len(ids) + config.max_reply_tokens
        if limit is not None and next_turn > limit and len(window.closed) + 1 < config.max_segments:
            request = Message("user", config.summary_prompt)
            tail = encode_continuation(tokenizer, [*messages, request])
            if len(window) + len(tail) + config.max_summary_tokens > config.max_context:
                # Results too long to summarise beside: the policy is told they were cut.
                cut = Message("tool", CUT_RESULT)
                tail = encode_continuation(tokenizer, [cut] * len(messages) + [request])
            window.builder.add_prompt(tail)
            room = min(
                config.max_summary_tokens,
                config.max_tokens - sampled,
                config.max_context - len(window),
            )
            if room < 1:
                reason = "max_tokens" if sampled >= config.max_tokens else "context_full"
                break
            params = replace(
                sampling.reseeded(turns, "summary"),
                max_tokens=room,
                stop_token_ids=[tokenizer.eos_id],
            )
            summary = await policy.generate(window.builder.segment.token_ids, params)
            window.builder.add_completion(summary)
            sampled += len(summary.token_ids)
            text = tokenizer.decode(summary.token_ids, skip_special_tokens=True).strip()
            summaries.append(text)
            resume = Message("user", config.resume_template.format(summary=text))
            window.reopen(encode_chat(tokenizer, [*opening, resume], tools))
            continue
        if limit is None and config.truncate and next_turn > config.max_context:
            kept = _truncated(window, ids, config.max_context - config.max_reply_tokens)
            if kept is not None:
                window.reopen(window.opening, kept)
                continue
        window.builder.add_prompt(ids)
        window.chunks[-1] += ids
    trajectory = Trajectory(
        task_id=task.instance_id,
        segments=window.segments(),
        reward=0.0,
        finish_reason=reason,
        turns=turns,
        tool_calls=len(log),
        tool_errors=tool_errors,
        duration_s=time.monotonic() - start,
        failed_edits=sum(r.error for r in log if r.name == "edit_file"),
        group_id=group_id,
        summaries=summaries,
    )
    return Episode(trajectory, log)


def _openai_call(raw: dict[str, Any]) -> ToolCall | str:
    """A ToolCall from an OpenAI `tool_calls` entry, or an error message for the model."""
    function = raw.get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError as err:
        return f"tool call {name!r}: arguments are not valid JSON: {err}"
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return f"tool call {name!r}: needs a name and an arguments object"
    return ToolCall(name, arguments)


async def run_episode_openai(
    base_url: str,
    model: str,
    sandbox: Sandbox,
    task: Task,
    config: HarnessSection,
    temperature: float = 1.0,
    api_key: str = "unused",
    user: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Episode:
    """The same loop over an OpenAI-compatible chat endpoint (evaluation; no token record).

    `user`: sent as every request's `user`, the session id a recording server
    (`fleetrl serve --record`) records the episode under. `transport`: what carries the
    requests (default httpx's own), e.g. one that retries and times them
    (`fleetrl.rollout.users`)."""
    start = time.monotonic()
    messages: list[dict[str, Any]] = [
        {"role": m.role, "content": m.content} for m in task_prompt(task, config)
    ]
    tools = [{"type": "function", "function": spec} for spec in TOOL_SPECS]
    log: list[ToolRecord] = []
    turns = tool_errors = 0
    reason = "max_turns"
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=config.wall_s, transport=transport
    ) as http:
        while turns < config.max_turns:
            if time.monotonic() - start > config.wall_s:
                reason = "wall_time"
                break
            body: dict[str, Any] = {
                "model": model,
                "messages": messages,
                "max_tokens": config.max_reply_tokens,
                "temperature": temperature,
            }
            # The tools are in the prompt only where the token-level loop puts them
            # (`describe_tools`), so that the served prompt is the one the policy knows.
            if config.describe_tools:
                body["tools"] = tools
            if user is not None:
                body["user"] = user
            response = await http.post("/chat/completions", json=body)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
            turns += 1
            raw_calls = message.get("tool_calls") or []
            messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": raw_calls}
                if raw_calls
                else {"role": "assistant", "content": message.get("content") or ""}
            )
            if not raw_calls:
                reason = "no_tool_call"
                break
            parsed = [_openai_call(raw) for raw in raw_calls]
            finished = False
            for raw, call in zip(raw_calls, parsed, strict=True):
                if isinstance(call, str):
                    tool_errors += 1
                    text = f"error: {call}"
                else:
                    outcomes, finished = await run_tool_calls(sandbox, [call], turns, config, log)
                    if finished:
                        break
                    tool_errors += outcomes[0].error
                    text = outcomes[0].text
                call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:8]}"
                messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
            if finished:
                reason = "finish"
                break
    trajectory = Trajectory(
        task_id=task.instance_id,
        segments=[],
        reward=0.0,
        finish_reason=reason,
        turns=turns,
        tool_calls=len(log),
        tool_errors=tool_errors,
        duration_s=time.monotonic() - start,
        failed_edits=sum(r.error for r in log if r.name == "edit_file"),
    )
    return Episode(trajectory, log)
