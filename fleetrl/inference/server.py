"""HTTP server over one Engine: an OpenAI-compatible API, token-level generation, weight updates.

    GET  /health               status, policy version and engine counters
    GET  /v1/models            the one model, in OpenAI's list format
    POST /v1/completions       OpenAI text completions (prompt: text or token ids)
    POST /v1/chat/completions  OpenAI chat completions, with tools and tool calls
    POST /generate             token ids in, Completion out: the RL path
    POST /update_weights       raw safetensors bytes in (a subset is fine); needs the admin token

With a `SessionRecorder` (`fleetrl serve --record`; `fleetrl.inference.recording`), chat
requests with a `user` are recorded as token-level sessions, and:

    GET  /v1/sessions                   the recorder's counters and the session ids held
    GET  /v1/sessions/{id}              one session's segments and turn count
    POST /v1/sessions/{id}/reward       {"reward", "task_id"?}: ends it, its trajectory is grouped
    POST /v1/feedback                   {"session_id", "reward" or "signals", "task_id"?}: the
                                        same, the signals weighted into a reward

This module is the HTTP side: the app, its routes, admin auth, request size limits, error
handling and `serve()`. What the bodies look like, the request schemas and the response
builders, is `fleetrl.inference.protocol`.

Every error is OpenAI-style JSON, `{"error": {"message", "type", "code"}}`. A client's
mistakes are 4xx: schema violations and `fleetrl.types.InvalidRequest` (raised by the engine
or the protocol) are 400s, an unknown session a 404, a second reward a 409. Anything else, a
ValueError from inside a decode step included, is the server's failure: a 500. The admin
route answers 401/403 to a caller without the admin token before it looks at anything else
(query, body size, body).

Not covered: streaming, `echo`, batched prompts, penalties and logit bias.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from fleetrl.inference.backends import RolloutEngine, open_engine
from fleetrl.inference.engine import Engine
from fleetrl.inference.journal import SessionJournal
from fleetrl.inference.protocol import (
    ChatRequest,
    CompletionRequest,
    GenerateRequest,
    as_list,
    chat_choice,
    completion_choice,
    stop_token_ids,
    to_messages,
    token_text,
    usage,
)
from fleetrl.inference.recording import (
    FeedbackRequest,
    GroupSink,
    InvalidFeedback,
    RewardRequest,
    SessionEnded,
    SessionRecorder,
    UnknownSession,
    reward_of,
)
from fleetrl.model.chat import encode_chat
from fleetrl.model.checkpoint import DTYPES, load_pretrained, read_config
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, InvalidRequest, SamplingParams

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
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

    def __init__(
        self,
        app: ASGIApp,
        default_limit: int,
        path_limits: dict[str, int],
        admin_paths: frozenset[str] = frozenset(),
        admin_token: str | None = None,
    ) -> None:
        """`admin_paths`: routes whose callers without `admin_token` pass unchecked, so that
        the route answers them 401/403 before anything about its body is revealed (it reads
        no body before checking the token)."""
        self.app = app
        self.default_limit = default_limit
        self.path_limits = path_limits
        self.admin_paths = admin_paths
        self.admin_token = admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["path"] in self.admin_paths and not is_admin(headers, self.admin_token):
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope["path"], self.default_limit)
        message = f"request body is larger than this endpoint's limit of {limit} bytes"
        declared = headers.get("content-length", "")
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


# -- the app -----------------------------------------------------------------------------


async def generate_n(
    engine: RolloutEngine, prompt_ids: list[int], params: SamplingParams, n: int
) -> list[Completion]:
    """`n` completions of one prompt, run concurrently; choice i of a seeded request uses seed + i.

    Waits for all `n` before raising the first failure, so that none is left running unseen.
    """

    def params_for(i: int) -> SamplingParams:
        seed = None if params.seed is None else params.seed + i
        return dataclasses.replace(params, seed=seed)

    jobs = [engine.generate(prompt_ids, params_for(i)) for i in range(n)]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def create_app(
    engine: RolloutEngine,
    tokenizer: Tokenizer,
    model_name: str,
    admin_token: str | None,
    max_request_bytes: int = 1 << 20,
    max_update_bytes: int = 8 << 30,
    recorder: SessionRecorder | None = None,
    background: Callable[[asyncio.Event, asyncio.Event], Awaitable[None]] | None = None,
) -> FastAPI:
    """The FastAPI app serving `engine`. The engine runs on the app's event loop and is
    closed when the app shuts down. With a `recorder`, chat sessions are recorded and the
    /v1/sessions routes exist; its expiry sweeps run while the app does. `background`
    runs beside the app until the first event it gets is set at shutdown (a weight
    follower); the app takes requests once it sets the second (or ends)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sweeps = asyncio.create_task(recorder.run()) if recorder else None
        stop = asyncio.Event()
        task = None
        if background is not None:
            ready = asyncio.Event()
            task = asyncio.create_task(background(stop, ready))
            waiting = asyncio.create_task(ready.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        yield
        if task is not None:
            stop.set()
            await task
        if sweeps is not None and recorder is not None:
            sweeps.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeps
            await recorder.flush()
            recorder.close()
        await engine.close()

    app = FastAPI(title="fleetrl", lifespan=lifespan)
    app.add_middleware(
        BodySizeLimit,
        default_limit=max_request_bytes,
        path_limits={"/update_weights": max_update_bytes},
        admin_paths=frozenset({"/update_weights"}),
        admin_token=admin_token,
    )
    eos_text = token_text(tokenizer, tokenizer.eos_id)
    started = int(time.time())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail), err.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(400, validation_message(err))

    @app.exception_handler(InvalidRequest)
    async def client_mistake(request: Request, err: InvalidRequest) -> JSONResponse:
        return error_response(400, str(err))

    @app.exception_handler(UnknownSession)
    async def unknown_session(request: Request, err: UnknownSession) -> JSONResponse:
        return error_response(404, str(err))

    @app.exception_handler(SessionEnded)
    async def session_ended(request: Request, err: SessionEnded) -> JSONResponse:
        return error_response(409, str(err))

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
            completion_choice(tokenizer, i, c, stops, request.logprobs)
            for i, c in enumerate(results)
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
        messages = to_messages(request.messages)
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
        if recorder is not None and request.user:
            if request.n != 1:
                raise HTTPException(400, "n must be 1 in a recorded session (one `user`)")
            temperature = request.temperature
            async with recorder.turn(request.user, messages, request.tools, temperature) as turn:
                prompt_ids = turn.prompt_ids
                [completion] = await generate_n(engine, prompt_ids, params, 1)
                choices = [chat_choice(tokenizer, 0, completion, stops, top_logprobs)]
                turn.record(completion, len(choices[0]["token_ids"]), choices[0]["message"])
        else:
            if recorder is not None:
                recorder.note_unrecorded()
            prompt_ids = encode_chat(tokenizer, messages, request.tools)
            results = await generate_n(engine, prompt_ids, params, request.n)
            choices = [
                chat_choice(tokenizer, i, c, stops, top_logprobs) for i, c in enumerate(results)
            ]
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
    async def update_weights(request: Request) -> dict[str, Any]:
        """Swap in new weights (safetensors bytes, any subset) between two decode steps;
        `?version=N` names them. The admin token is checked before anything else."""
        check_admin(request, admin_token)
        given = request.query_params.get("version", "")
        try:
            version = int(given)
        except ValueError:
            message = f"version: need an integer query parameter, not {given!r}"
            raise HTTPException(400, message) from None
        body = await request.body()
        try:
            state_dict = await asyncio.to_thread(safetensors.torch.load, body)
        except Exception as err:  # safetensors raises its own error types for bad bytes
            raise HTTPException(400, f"body is not a safetensors file: {err}") from err
        pause_s = await engine.update_weights(state_dict, version)
        return {"version": version, "pause_s": pause_s, "tensors": len(state_dict)}

    if recorder is not None:
        add_session_routes(app, recorder)
    return app


def add_session_routes(app: FastAPI, recorder: SessionRecorder) -> None:
    """The /v1/sessions routes of a recording server (`fleetrl.inference.recording`)."""

    @app.get("/v1/sessions")
    async def sessions() -> dict[str, Any]:
        """The recorder's counters (expired sessions included) and the session ids held."""
        await recorder.sweep()
        return recorder.summary()

    @app.get("/v1/sessions/{session_id}")
    async def session(session_id: str) -> JSONResponse:
        """One session's recording: segments (token_ids, loss_mask, logprobs, versions, ...)."""
        return JSONResponse(recorder.view(session_id))  # skips FastAPI's slow encoder

    @app.post("/v1/sessions/{session_id}/reward")
    async def reward(session_id: str, body: RewardRequest) -> dict[str, Any]:
        """End a session with its reward; it becomes a trajectory of its task's group."""
        return await recorder.reward(session_id, body.reward, body.task_id)

    @app.post("/v1/feedback")
    async def feedback(body: FeedbackRequest) -> dict[str, Any]:
        """A session's outcome (a reward, or signals mapped to one): ends it as /reward."""
        try:
            value = reward_of(body, recorder.signals)
        except InvalidFeedback as err:
            raise InvalidRequest(str(err)) from None
        return await recorder.reward(body.session_id, value, body.task_id)


def is_admin(headers: Headers, admin_token: str | None) -> bool:
    """Whether the request carries `Authorization: Bearer <admin_token>` (never without one)."""
    if admin_token is None:
        return False
    scheme, _, given = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), admin_token.encode())


def check_admin(request: Request, admin_token: str | None) -> None:
    """403 when the server has no admin token, 401 unless the bearer token matches it."""
    if admin_token is None:
        raise HTTPException(403, "weight updates are disabled: start the server with --admin-token")
    if not is_admin(request.headers, admin_token):
        raise HTTPException(
            401, "missing or wrong admin token", headers={"WWW-Authenticate": "Bearer"}
        )


class ListenError(Exception):
    """The server cannot listen where it was asked to: an unknown host, a port in use, a
    port it may not bind."""


def host_port(host: str, port: int) -> str:
    """`host:port` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to `port` on every address `host` resolves to, as uvicorn's own
    `loop.create_server(host, port)` would bind them. Bound before the model loads so that a
    bad host or a port in use is reported at once, as a ListenError, not after loading."""
    where = host_port(host, port)
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, OverflowError) as err:  # OverflowError: a port outside 0..65535
        reason = getattr(err, "strerror", None) or err
        raise ListenError(f"cannot listen on {where}: {reason}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(addresses):  # once each
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # the IPv4 address, if any, has its own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as err:
        for sock in sockets:
            sock.close()
        raise ListenError(f"cannot listen on {where}: {err.strerror or err}") from None
    return sockets


def serve(
    checkpoint: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    admin_token: str | None = None,
    max_batch_size: int = 64,
    max_model_len: int = 2048,
    dtype: str = "auto",
    threads: int | None = None,
    record: bool = False,
    session_ttl_s: float = 3600.0,
    backend: str = "fleetrl",
    group_size: int = 8,
    sink: GroupSink | None = None,
    region: str = "serve",
    signals: dict[str, float] | None = None,
    follow: Callable[[RolloutEngine, asyncio.Event, asyncio.Event], Awaitable[None]] | None = None,
    journal: Path | None = None,
) -> None:
    """Load a checkpoint and its tokenizer and serve them until interrupted (`fleetrl serve`).

    `dtype="auto"` keeps the checkpoint's dtype; `threads=None` leaves torch's default;
    `max_model_len=0` is the model's own maximum (at most 4096). The model runs on the GPU
    when there is one. `backend="vllm"` samples with vLLM instead (`open_engine`; auto:
    bfloat16), served by this same app. Raises ListenError, before loading anything, when
    it cannot listen.
    With `record`, chat sessions are recorded (`SessionRecorder`: `session_ttl_s`,
    `group_size`, the feedback `signals`' weights; groups go to `sink`, named after
    `region`; with a `journal` folder, kept on disk and recovered at the next start).
    `follow(engine, stop, ready)` runs beside the server until shutdown: the caller's
    weight follower, which swaps versions into the engine in flight; requests are taken
    once it sets `ready` (it holds the version to serve).
    """
    if max_batch_size < 1 or max_model_len < 0 or (threads is not None and threads < 1):
        raise ValueError(
            "need max_batch_size >= 1, max_model_len >= 0 (0: the model's own) and threads >= 1"
        )
    sockets = listen_sockets(host, port)
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        tokenizer = Tokenizer.from_pretrained(checkpoint)
        engine: RolloutEngine
        if backend == "vllm":
            length = max_model_len or min(read_config(checkpoint).max_position_embeddings, 4096)
            engine = open_engine("vllm", checkpoint, max_batch_size, length, dtype, 0, threads)
            device = f"vLLM, {device}"
        else:
            model = load_pretrained(checkpoint, dtype=None if dtype == "auto" else DTYPES[dtype])
            model = model.to(device)
            engine = Engine(model, max_batch_size=max_batch_size, max_model_len=max_model_len)
        name = checkpoint.resolve().name
        recorder = None
        if record:
            recorder = SessionRecorder(
                tokenizer,
                session_ttl_s,
                group_size,
                sink,
                region,
                signals=signals,
                journal=SessionJournal(journal) if journal is not None else None,
            )
        background = None
        if follow is not None:
            served = engine

            async def background(stop: asyncio.Event, ready: asyncio.Event) -> None:
                await follow(served, stop, ready)

        app = create_app(
            engine,
            tokenizer,
            model_name=name,
            admin_token=admin_token,
            recorder=recorder,
            background=background,
        )
        updates = "weight updates " + ("enabled" if admin_token else "disabled")
        if follow is not None:
            updates = "following the served version"
        recording = "" if recorder is None else f", recording sessions ({where_to(sink)})"
        bound = sockets[0].getsockname()[1]  # the port picked when `port` is 0
        print(
            f"fleetrl: serving {name} on http://{host_port(host, bound)} ({device}, "
            f"max_model_len {engine.max_model_len}, {updates}{recording})",
            flush=True,
        )
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        # uvicorn re-raises the Ctrl-C it handled once it has shut down; that is the end.
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()


def where_to(sink: GroupSink | None) -> str:
    """Where rewarded groups go, for the start-up line."""
    return "rewarded groups to the store" if sink else "no store: rewarded groups are not sent"
