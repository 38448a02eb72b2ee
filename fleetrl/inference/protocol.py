"""The wire format: request schemas and response builders for the OpenAI-compatible and token APIs.

Requests are pydantic models: `GenerateRequest` (POST /generate, token ids in), and
`CompletionRequest` and `ChatRequest` (OpenAI's /v1/completions and /v1/chat/completions).
Unknown fields are ignored, as OpenAI clients send many; out-of-range values fail validation.
A client mistake found past validation (e.g. tool-call arguments that are not a JSON object)
raises `fleetrl.types.InvalidRequest`.

Responses are built as plain dicts from the engine's `Completion`s. Both OpenAI choice
builders add fleetrl fields, `token_ids` and `versions` (the policy version of each token),
which the openai client keeps in `model_extra`.

Text and tokens: each token's exact bytes come from `Tokenizer.token_bytes`, so logprob
`bytes`, `text_offset` and cutting at stop strings are exact even where a character spans
several tokens. A stop string ends the text before it; the token fields keep every token up
to the one that completed it.

Not covered here: HTTP itself (routes, status codes, error bodies, auth, size limits) lives in
`fleetrl.inference.server`; sampling lives in the engine.
"""

from __future__ import annotations

import bisect
import codecs
import dataclasses
import json
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from fleetrl.model.chat import Message, ToolCall, parse_reply
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, InvalidRequest, SamplingParams

MAX_CHOICES = 8
MAX_SEED = 2**63 - 1 - MAX_CHOICES  # torch seeds are 64-bit; choice i uses seed + i

# -- requests ----------------------------------------------------------------------------

StopString = Annotated[str, Field(min_length=1)]


class GenerateRequest(BaseModel):
    """POST /generate: the token-level request of the RL rollout workers."""

    prompt_ids: list[int]  # the prompt, already tokenised (e.g. by encode_chat)
    sampling: SamplingParams = Field(default_factory=SamplingParams)  # see fleetrl.types


class CompletionRequest(BaseModel):
    """POST /v1/completions (OpenAI legacy completions); unknown fields are ignored."""

    model: str | None = None  # accepted and ignored: the server runs one model
    prompt: str | list[int]  # text, or token ids
    max_tokens: int = Field(16, ge=1)  # generated tokens at most
    temperature: float = Field(1.0, ge=0)  # 0 = greedy
    top_p: float = Field(1.0, gt=0, le=1)  # nucleus sampling mass
    top_k: int = Field(0, ge=0)  # fleetrl extension: keep the k most likely tokens; 0 = off
    seed: int | None = Field(None, ge=0, le=MAX_SEED)  # same seed, same output
    stop: StopString | list[StopString] | None = None  # the text ends before any of these
    n: int = Field(1, ge=1, le=MAX_CHOICES)  # completions of the prompt, sampled concurrently
    logprobs: int | None = Field(None, ge=0, le=20)  # return logprobs with this many alternatives
    echo: bool = False  # must be false: echoing the prompt is not supported
    stream: bool = False  # must be false: streaming is not supported


class FunctionCall(BaseModel):
    """The function part of an OpenAI tool call."""

    name: str  # function name
    arguments: str  # the arguments as a JSON-encoded object


class ToolCallIn(BaseModel):
    """A tool call an earlier assistant message made, in OpenAI's format."""

    id: str | None = None  # call id; not shown to the model
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(BaseModel):
    """One part of a list-valued message content; only text parts are supported."""

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One message of the conversation, in OpenAI's format."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None  # text, or text parts joined by newlines
    tool_calls: list[ToolCallIn] | None = None  # assistant messages only
    tool_call_id: str | None = None  # tool messages: accepted, not shown to the model
    name: str | None = None  # accepted, not shown to the model


class ChatRequest(BaseModel):
    """POST /v1/chat/completions (OpenAI chat completions); unknown fields are ignored."""

    model: str | None = None  # accepted and ignored: the server runs one model
    messages: list[ChatMessage] = Field(min_length=1)  # the conversation so far
    tools: list[dict[str, Any]] | None = None  # OpenAI function specs, shown in the prompt
    max_tokens: int | None = Field(None, ge=1)  # generated tokens at most; default: context
    max_completion_tokens: int | None = Field(None, ge=1)  # newer name of max_tokens; wins
    temperature: float = Field(1.0, ge=0)  # 0 = greedy
    top_p: float = Field(1.0, gt=0, le=1)  # nucleus sampling mass
    top_k: int = Field(0, ge=0)  # fleetrl extension: keep the k most likely tokens; 0 = off
    seed: int | None = Field(None, ge=0, le=MAX_SEED)  # same seed, same output
    stop: StopString | list[StopString] | None = None  # the reply ends before any of these
    n: int = Field(1, ge=1, le=MAX_CHOICES)  # replies, sampled concurrently
    logprobs: bool = False  # return the logprob of each generated token
    top_logprobs: int | None = Field(None, ge=0, le=20)  # with logprobs: alternatives per token
    stream: bool = False  # must be false: streaming is not supported
    # End-user id; with `fleetrl serve --record` the session the turn is recorded in.
    user: str | None = Field(None, max_length=256)


def to_messages(messages: list[ChatMessage]) -> list[Message]:
    """OpenAI messages as fleetrl chat Messages, ready for `encode_chat`.

    Raises InvalidRequest for tool-call arguments that are not a JSON object, since the chat
    template renders them as one.
    """
    out = []
    for m in messages:
        content = m.content or ""
        if isinstance(content, list):
            content = "\n".join(part.text for part in content)
        calls = []
        for call in m.tool_calls or []:
            try:
                arguments = json.loads(call.function.arguments)
            except json.JSONDecodeError as err:
                raise InvalidRequest(f"tool call arguments are not JSON: {err}") from err
            if not isinstance(arguments, dict):
                raise InvalidRequest("tool call arguments must be a JSON object")
            calls.append(ToolCall(call.function.name, arguments))
        out.append(Message(m.role, content, calls))
    return out


def as_list(stop: str | list[str] | None) -> list[str]:
    """OpenAI's `stop` (a string, a list or nothing) as a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else stop


def stop_token_ids(tokenizer: Tokenizer, stops: list[str]) -> list[int]:
    """Stop strings that are one token of the vocabulary: the engine can stop right there.

    Longer stop strings are found in the text afterwards (`decode_until_stop`).
    """
    ids = [tokenizer.encode(stop) for stop in stops]
    return [i[0] for i in ids if len(i) == 1]


# -- tokens to text ----------------------------------------------------------------------


def token_text(tokenizer: Tokenizer, token_id: int) -> str:
    """One token as text; a token holding part of a character shows as U+FFFD."""
    return tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")


@dataclasses.dataclass
class Decoded:
    """A completion's text, cut before the first stop string, and where its tokens sit in it."""

    text: str  # the generated text, without the stop string and what follows it
    n_tokens: int  # tokens kept: all, or up to the one that completed the stop string
    offsets: list[int]  # per kept token, the character offset where its text starts
    stopped: bool  # a stop string was found


def decode_until_stop(tokenizer: Tokenizer, token_ids: list[int], stops: list[str]) -> Decoded:
    """The text of `token_ids` (special tokens included), cut at the earliest stop string.

    The bytes are decoded incrementally to learn where each token's text ends: a token that
    completes a character split over several tokens is the one its text is credited to.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []
    ends: list[int] = []  # ends[i]: text length once token i is decoded
    length = 0
    for token_id in token_ids:
        parts.append(decoder.decode(tokenizer.token_bytes(token_id)))
        length += len(parts[-1])
        ends.append(length)
    parts.append(decoder.decode(b"", final=True))
    text = "".join(parts)
    if ends:
        ends[-1] = len(text)
    hits = [(i, stop) for stop in stops if (i := text.find(stop)) >= 0]
    if not hits:
        return Decoded(text, len(token_ids), [0, *ends[:-1]], stopped=False)
    index, stop = min(hits)
    n_tokens = bisect.bisect_left(ends, index + len(stop)) + 1
    return Decoded(text[:index], n_tokens, [0, *ends[: n_tokens - 1]], stopped=True)


# -- responses ---------------------------------------------------------------------------


def completion_choice(
    tokenizer: Tokenizer,
    index: int,
    completion: Completion,
    stops: list[str],
    logprobs: int | None,
) -> dict[str, Any]:
    """One choice of a /v1/completions response, with OpenAI's legacy logprobs object.

    `logprobs=None`: no logprobs object (the request did not ask for one).
    """
    decoded = decode_until_stop(tokenizer, completion.token_ids, stops)
    n = decoded.n_tokens
    ids = completion.token_ids[:n]
    choice = {
        "index": index,
        "text": decoded.text,
        "logprobs": None,
        "finish_reason": finish_reason(completion, decoded),
        "token_ids": ids,
        "versions": completion.versions[:n],
    }
    if logprobs is not None:
        top = completion.top_logprobs or [{} for _ in ids]
        choice["logprobs"] = {
            "tokens": [token_text(tokenizer, t) for t in ids],
            "token_logprobs": completion.logprobs[:n],
            "top_logprobs": [
                {token_text(tokenizer, t): lp for t, lp in alt.items()} for alt in top[:n]
            ],
            "text_offset": decoded.offsets,
        }
    return choice


def chat_choice(
    tokenizer: Tokenizer,
    index: int,
    completion: Completion,
    stops: list[str],
    top_logprobs: int | None,
) -> dict[str, Any]:
    """One choice of a /v1/chat/completions response; tool calls become OpenAI tool_calls.

    `stops` must include the end-of-turn token's text. `top_logprobs=None`: no logprobs.
    """
    decoded = decode_until_stop(tokenizer, completion.token_ids, stops)
    n = decoded.n_tokens
    message: dict[str, Any] = {"role": "assistant", "content": decoded.text}
    reason = finish_reason(completion, decoded)
    parsed = parse_reply(decoded.text)
    if parsed.tool_calls:
        message["content"] = parsed.content or None
        message["tool_calls"] = [openai_tool_call(call) for call in parsed.tool_calls]
        reason = "tool_calls"
    logprobs = None
    if top_logprobs is not None:
        top = completion.top_logprobs or [{} for _ in range(n)]
        logprobs = {
            "content": [
                {
                    **logprob_entry(tokenizer, token_id, logprob),
                    "top_logprobs": [logprob_entry(tokenizer, t, lp) for t, lp in alt.items()],
                }
                for token_id, logprob, alt in zip(
                    completion.token_ids[:n], completion.logprobs[:n], top[:n], strict=True
                )
            ]
        }
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": reason,
        "token_ids": completion.token_ids[:n],
        "versions": completion.versions[:n],
    }


def finish_reason(completion: Completion, decoded: Decoded) -> str:
    """OpenAI's finish_reason: "stop" at a stop token or string, else "length"."""
    return "stop" if decoded.stopped or completion.finish_reason == "stop" else "length"


def logprob_entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> dict[str, Any]:
    """A token of chat logprobs: its text, logprob and exact UTF-8 bytes."""
    return {
        "token": token_text(tokenizer, token_id),
        "logprob": logprob,
        "bytes": list(tokenizer.token_bytes(token_id)),
    }


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """A parsed tool call in OpenAI's format (arguments as a JSON string, a fresh id)."""
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    function = {"name": call.name, "arguments": arguments}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def usage(prompt_ids: list[int], choices: list[dict[str, Any]]) -> dict[str, int]:
    """OpenAI's usage block: the prompt once, plus every choice's tokens."""
    generated = sum(len(choice["token_ids"]) for choice in choices)
    total = len(prompt_ids) + generated
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": generated, "total_tokens": total}
