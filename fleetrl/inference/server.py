"""HTTP server over one Engine: an OpenAI-compatible API, token-level generation, weight updates.

    GET  /health               status, policy version and engine counters
    GET  /v1/models            the one model, in OpenAI's list format
    POST /v1/completions       OpenAI text completions (prompt: text or token ids)
    POST /v1/chat/completions  OpenAI chat completions, with tools and tool calls
    POST /generate             token ids in, Completion out: the RL path
    POST /update_weights       raw safetensors bytes in (a subset is fine); needs the admin token

Both OpenAI endpoints add fleetrl fields to each choice: `token_ids` and `versions` (the
policy version of each token), plus `prompt_token_ids` at the top level; the openai client
keeps them in `model_extra`. Every error is OpenAI-style JSON, `{"error": {"message", "type",
"code"}}`: 4xx for the client's mistakes, 500 for the engine's.

Text and tokens: each token's exact bytes come from the byte-level BPE vocabulary (as in Qwen),
so logprob `bytes`, `text_offset` and cutting at stop strings are exact even where a character
spans several tokens. A stop string ends the text before it; the token fields keep every token
up to the one that completed it.

Not covered: streaming, `echo`, batched prompts, penalties and logit bias.
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import dataclasses
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import safetensors.torch
import torch
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from fleetrl.inference.engine import Engine
from fleetrl.model.chat import Message, ToolCall, encode_chat, parse_reply
from fleetrl.model.checkpoint import DTYPES, load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams

MAX_CHOICES = 8
MAX_SEED = 2**63 - 1 - MAX_CHOICES  # torch seeds are 64-bit; choice i uses seed + i
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
}

# -- errors ------------------------------------------------------------------------------


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An OpenAI-style error body, `{"error": {"message", "type", "code"}}`."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def validation_message(err: RequestValidationError) -> str:
    """One line naming each invalid field, e.g. `n: Input should be less than or equal to 8`."""
    parts = []
    for error in err.errors()[:5]:
        if error["type"] == "json_invalid":
            parts.append(f"body is not valid JSON: {error.get('ctx', {}).get('error', '')}")
            continue
        loc = [str(p) for p in error["loc"]]
        where = ".".join(loc[1:] if loc[:1] == ["body"] else loc) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


class BodySizeLimit:
    """ASGI middleware: 413 for a request body over the limit of its path.

    A Content-Length over the limit is refused before any of the body is read; a body without
    one (chunked) is counted as it arrives and refused as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, default_limit: int, path_limits: dict[str, int]) -> None:
        self.app = app
        self.default_limit = default_limit
        self.path_limits = path_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope["path"], self.default_limit)
        message = f"request body is larger than this endpoint's limit of {limit} bytes"
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await error_response(413, message)(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> ASGIMessage:
            nonlocal received
            event = await receive()
            received += len(event.get("body", b""))
            if received > limit:  # raised inside the app, answered by its 413 handler
                raise HTTPException(413, message)
            return event

        await self.app(scope, counting_receive, send)


# -- request bodies ----------------------------------------------------------------------

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


# -- tokens to text ----------------------------------------------------------------------


def _byte_level_chars() -> dict[str, int]:
    """The byte each character of a byte-level BPE vocabulary stands for (GPT-2's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    others = [b for b in range(256) if b not in printable]
    chars = {chr(b): b for b in printable}
    chars.update({chr(256 + i): b for i, b in enumerate(others)})
    return chars


@dataclasses.dataclass
class Decoded:
    """A completion's text, cut before the first stop string, and where its tokens sit in it."""

    text: str  # the generated text, without the stop string and what follows it
    n_tokens: int  # tokens kept: all, or up to the one that completed the stop string
    offsets: list[int]  # per kept token, the character offset where its text starts
    stopped: bool  # a stop string was found


class Detokenizer:
    """Token ids to text with the exact bytes of each token (byte-level BPE, as in Qwen)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        byte_of = _byte_level_chars()
        self.token_bytes = [b""] * tokenizer.vocab_size
        for token, token_id in tokenizer.backend.get_vocab(with_added_tokens=False).items():
            if all(ch in byte_of for ch in token):
                self.token_bytes[token_id] = bytes(byte_of[ch] for ch in token)
            else:  # not a byte-level vocabulary
                self.token_bytes[token_id] = tokenizer.decode([token_id]).encode()
        for token_id, added in tokenizer.backend.get_added_tokens_decoder().items():
            self.token_bytes[token_id] = added.content.encode()

    def bytes_of(self, token_id: int) -> bytes:
        """The bytes of one token (empty for ids past the tokenizer's vocabulary)."""
        return self.token_bytes[token_id] if token_id < len(self.token_bytes) else b""

    def piece(self, token_id: int) -> str:
        """One token as text; a token holding part of a character shows as U+FFFD."""
        return self.bytes_of(token_id).decode("utf-8", errors="replace")

    def decode(self, token_ids: list[int], stops: list[str]) -> Decoded:
        """The text of `token_ids` (special tokens included), cut at the earliest stop string."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        parts: list[str] = []
        ends: list[int] = []  # ends[i]: text length once token i is decoded
        length = 0
        for token_id in token_ids:
            parts.append(decoder.decode(self.bytes_of(token_id)))
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


def stop_token_ids(tokenizer: Tokenizer, stops: list[str]) -> list[int]:
    """Stop strings that are one token of the vocabulary: the engine can stop right there."""
    ids = [tokenizer.encode(stop) for stop in stops]
    return [i[0] for i in ids if len(i) == 1]


def as_list(stop: str | list[str] | None) -> list[str]:
    """OpenAI's `stop` (a string, a list or nothing) as a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else stop


# -- responses ---------------------------------------------------------------------------


def completion_choice(
    detok: Detokenizer, index: int, completion: Completion, stops: list[str], logprobs: int | None
) -> dict[str, Any]:
    """One choice of a /v1/completions response, with OpenAI's legacy logprobs object."""
    decoded = detok.decode(completion.token_ids, stops)
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
            "tokens": [detok.piece(t) for t in ids],
            "token_logprobs": completion.logprobs[:n],
            "top_logprobs": [{detok.piece(t): lp for t, lp in alt.items()} for alt in top[:n]],
            "text_offset": decoded.offsets,
        }
    return choice


def chat_choice(
    detok: Detokenizer,
    index: int,
    completion: Completion,
    stops: list[str],
    top_logprobs: int | None,
) -> dict[str, Any]:
    """One choice of a /v1/chat/completions response; tool calls become OpenAI tool_calls.

    `stops` must include the end-of-turn token's text. `top_logprobs=None`: no logprobs.
    """
    decoded = detok.decode(completion.token_ids, stops)
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
                    **logprob_entry(detok, token_id, logprob),
                    "top_logprobs": [logprob_entry(detok, t, lp) for t, lp in alt.items()],
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


def logprob_entry(detok: Detokenizer, token_id: int, logprob: float) -> dict[str, Any]:
    """A token of chat logprobs: its text, logprob and exact UTF-8 bytes."""
    return {
        "token": detok.piece(token_id),
        "logprob": logprob,
        "bytes": list(detok.bytes_of(token_id)),
    }


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """A parsed tool call in OpenAI's format (arguments as a JSON string, a fresh id)."""
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    function = {"name": call.name, "arguments": arguments}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def to_messages(messages: list[ChatMessage]) -> list[Message]:
    """OpenAI messages as fleetrl chat Messages; 400 for tool-call arguments that are no object."""
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
                raise HTTPException(400, f"tool call arguments are not JSON: {err}") from err
            if not isinstance(arguments, dict):
                raise HTTPException(400, "tool call arguments must be a JSON object")
            calls.append(ToolCall(call.function.name, arguments))
        out.append(Message(m.role, content, calls))
    return out


def usage(prompt_ids: list[int], choices: list[dict[str, Any]]) -> dict[str, int]:
    """OpenAI's usage block: the prompt once, plus every choice's tokens."""
    generated = sum(len(choice["token_ids"]) for choice in choices)
    total = len(prompt_ids) + generated
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": generated, "total_tokens": total}


async def generate_n(
    engine: Engine, prompt_ids: list[int], params: SamplingParams, n: int
) -> list[Completion]:
    """`n` completions of one prompt, run concurrently; choice i of a seeded request uses seed + i.

    The engine's ValueErrors (prompt too long, ids out of the vocabulary, ...) become 400s.
    """

    def params_for(i: int) -> SamplingParams:
        seed = None if params.seed is None else params.seed + i
        return dataclasses.replace(params, seed=seed)

    jobs = [engine.generate(prompt_ids, params_for(i)) for i in range(n)]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        if isinstance(result, ValueError):
            raise HTTPException(400, str(result)) from result
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


# -- the app -----------------------------------------------------------------------------


def create_app(
    engine: Engine,
    tokenizer: Tokenizer,
    model_name: str,
    admin_token: str | None,
    max_request_bytes: int = 1 << 20,
    max_update_bytes: int = 8 << 30,
) -> FastAPI:
    """The FastAPI app serving `engine`. The engine runs on the app's event loop and is
    closed when the app shuts down."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.close()

    app = FastAPI(title="fleetrl", lifespan=lifespan)
    app.add_middleware(
        BodySizeLimit,
        default_limit=max_request_bytes,
        path_limits={"/update_weights": max_update_bytes},
    )
    detok = Detokenizer(tokenizer)
    eos_text = detok.piece(tokenizer.eos_id)
    started = int(time.time())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail), err.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(400, validation_message(err))

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> JSONResponse:
        return error_response(500, f"internal error: {type(err).__name__}: {err}")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness plus what an operator watches: policy version and engine load."""
        stats = engine.stats
        return {
            "status": "ok",
            "model": model_name,
            "version": engine.version,
            "running": stats.running,
            "waiting": stats.waiting,
            "generated_tokens": stats.generated_tokens,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The one served model, in OpenAI's list format."""
        card = {
            "id": model_name,
            "object": "model",
            "created": started,
            "owned_by": "fleetrl",
            "max_model_len": engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.post("/generate")
    async def generate(request: GenerateRequest) -> JSONResponse:
        """Token ids in, the engine's Completion out (minus the echoed prompt)."""
        [completion] = await generate_n(engine, request.prompt_ids, request.sampling, 1)
        body = dataclasses.asdict(completion)
        del body["prompt_ids"]
        return JSONResponse(body)  # skips FastAPI's slow encoder: routed experts are big

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> dict[str, Any]:
        """OpenAI text completions."""
        if request.stream:
            raise HTTPException(400, "streaming is not supported; send stream=false")
        if request.echo:
            raise HTTPException(400, "echo is not supported; send echo=false")
        prompt = request.prompt
        prompt_ids = tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        stops = [*as_list(request.stop), eos_text]
        params = SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            max_tokens=request.max_tokens,
            stop_token_ids=[tokenizer.eos_id, *stop_token_ids(tokenizer, stops)],
            seed=request.seed,
            top_logprobs=request.logprobs or 0,
        )
        results = await generate_n(engine, prompt_ids, params, request.n)
        choices = [
            completion_choice(detok, i, c, stops, request.logprobs) for i, c in enumerate(results)
        ]
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage(prompt_ids, choices),
            "prompt_token_ids": prompt_ids,
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatRequest) -> dict[str, Any]:
        """OpenAI chat completions: the chat template in, content and tool calls out."""
        if request.stream:
            raise HTTPException(400, "streaming is not supported; send stream=false")
        prompt_ids = encode_chat(tokenizer, to_messages(request.messages), request.tools)
        stops = [*as_list(request.stop), eos_text]
        top_logprobs = (request.top_logprobs or 0) if request.logprobs else None
        params = SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            max_tokens=request.max_completion_tokens or request.max_tokens or engine.max_model_len,
            stop_token_ids=[tokenizer.eos_id, *stop_token_ids(tokenizer, stops)],
            seed=request.seed,
            top_logprobs=top_logprobs or 0,
        )
        results = await generate_n(engine, prompt_ids, params, request.n)
        choices = [chat_choice(detok, i, c, stops, top_logprobs) for i, c in enumerate(results)]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage(prompt_ids, choices),
            "prompt_token_ids": prompt_ids,
        }

    @app.post("/update_weights")
    async def update_weights(request: Request, version: int) -> dict[str, Any]:
        """Swap in new weights (safetensors bytes, any subset) between two decode steps."""
        check_admin(request, admin_token)
        body = await request.body()
        try:
            state_dict = await asyncio.to_thread(safetensors.torch.load, body)
        except Exception as err:  # safetensors raises its own error types for bad bytes
            raise HTTPException(400, f"body is not a safetensors file: {err}") from err
        try:
            pause_s = await engine.update_weights(state_dict, version)
        except ValueError as err:
            raise HTTPException(400, str(err)) from err
        return {"version": version, "pause_s": pause_s, "tensors": len(state_dict)}

    return app


def check_admin(request: Request, admin_token: str | None) -> None:
    """403 when the server has no admin token, 401 unless the bearer token matches it."""
    if admin_token is None:
        raise HTTPException(403, "weight updates are disabled: start the server with --admin-token")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), admin_token.encode()):
        raise HTTPException(
            401, "missing or wrong admin token", headers={"WWW-Authenticate": "Bearer"}
        )


def serve(
    checkpoint: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    admin_token: str | None = None,
    max_batch_size: int = 64,
    max_model_len: int = 2048,
    dtype: str = "auto",
    threads: int = 0,
) -> None:
    """Load a checkpoint and its tokenizer and serve them until interrupted (`fleetrl serve`).

    `dtype="auto"` keeps the checkpoint's dtype; `threads=0` leaves torch's default. The model
    runs on the GPU when there is one.
    """
    if threads > 0:
        torch.set_num_threads(threads)
    model = load_pretrained(checkpoint, dtype=None if dtype == "auto" else DTYPES[dtype])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    engine = Engine(model, max_batch_size=max_batch_size, max_model_len=max_model_len)
    name = checkpoint.resolve().name
    app = create_app(engine, tokenizer, model_name=name, admin_token=admin_token)
    updates = "enabled" if admin_token else "disabled"
    print(
        f"fleetrl: serving {name} on http://{host}:{port} ({device}, "
        f"max_model_len {engine.max_model_len}, weight updates {updates})",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
