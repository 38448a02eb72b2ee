"""Engine: continuous-batching generation that returns exactly what RL training needs.

Per generated token the engine records the token id, its behaviour logprob (see
SamplingParams for the convention), the policy version that sampled it, and for MoE
models the experts the token was routed to. Requests join and leave between decode
steps; weights are swapped between two decode steps, so a request in flight keeps its KV
cache and its later tokens carry the new version (a completion may span versions).

    generate() ─▶ waiting ─▶ prefill into a free cache slot ─▶ running ─┐
                                                                       │ one decode step
          update_weights() ─▶ applied here, between steps ◀────────────┘ for all running
                                                                       │
                         finished ─▶ future resolved ◀─────────────────┘

The model runs on the event loop's own thread, one step at a time, yielding to the loop
between steps so an HTTP server on it keeps answering. (A worker thread was measured 1.5-2x
slower on 2 CPU cores: every thread calling into torch brings its own OpenMP team, and the
teams' spinning threads fight over the cores.) A step holds the loop for its duration.

Routing of the last generated token of an MoE request: the token is fed through the model
in one extra step (a "flush") so its experts are known too.

Prefix cache: a finished request's keys and values are parked in a spare cache slot. A
later prompt that starts with the same tokens (an agent's next turn repeats the whole
conversation so far) copies the shared prefix from there and prefills only the rest. A
weight update empties the parked slots, so a reused prefix was computed by the weights
that now sample. A prompt that continues a parked request whole frees its slot (the
request parks again when it finishes); otherwise the least recently used slot is
overwritten first. Park at least as many slots as sessions run at once.

Failures stay with the requests that cause them. A prefill or decode step that raises is
run again for each of its requests alone, and only the requests that raise alone fail; the
others keep their place and go on (a transient error fails nobody). A request's state
changes only after its step has sampled, so a step that raised left nothing to undo. A
weight update that raises fails that update's caller. Whatever fails, the engine goes on
serving.

Not covered: paged attention, speculative decoding, tensor parallelism.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fleetrl.inference.sampling import sample
from fleetrl.model.kv_cache import KVCache
from fleetrl.model.qwen3 import Qwen3
from fleetrl.types import Completion, InvalidRequest, SamplingParams


@dataclass
class EngineStats:
    """Counters an operator (or the /health endpoint) reads."""

    version: int = 0  # policy version now loaded
    running: int = 0  # requests in the decode batch
    waiting: int = 0  # requests queued for a slot
    generated_tokens: int = 0  # tokens sampled since start
    decode_steps: int = 0
    weight_updates: int = 0
    last_update_pause_s: float = 0.0  # decoding stood still this long for the last swap
    prompt_tokens: int = 0  # prompt tokens of admitted requests
    prefix_hit_tokens: int = 0  # of those, copied from the prefix cache instead of computed


# What one sampling call returns: token ids, their logprobs, top logprobs per request.
_Draws = tuple[list[int], list[float], list[dict[int, float]]]


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[Completion]
    generator: torch.Generator | None
    max_new: int  # max_tokens, capped by the context left
    out: Completion
    length: int = 0  # positions held in the KV cache
    finished: bool = False  # sampling is over; an MoE request still flushes once
    reuse_slot: int = -1  # parked slot its prompt's first `reuse` positions are copied from
    reuse: int = 0
    reuse_routed: list[list[list[int]]] | None = None  # MoE routing of those positions

    def needs_input(self) -> bool:
        """Whether the last sampled token still has to go through the model."""
        return self.length < len(self.prompt_ids) + len(self.out.token_ids)


@dataclass
class _Parked:
    """A finished request's cache slot, kept for prompts that repeat its tokens."""

    tokens: list[int]  # the tokens whose keys/values the slot holds, position by position
    routed: list[list[list[int]]] | None  # MoE routing of those positions
    last_used: int


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix (list slices compare in C; binary search)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass
class _WeightUpdate:
    state_dict: dict[str, torch.Tensor]
    version: int
    future: asyncio.Future[float]


@dataclass
class _Queues:
    waiting: list[_Request] = field(default_factory=list)
    running: list[_Request] = field(default_factory=list)  # index == KV cache slot
    updates: list[_WeightUpdate] = field(default_factory=list)


def check_prompt(prompt_ids: list[int], max_model_len: int, vocab_size: int) -> None:
    """Raise InvalidRequest for a prompt no engine can serve: empty, filling the context
    (no room for one token), or holding ids outside the vocabulary."""
    if not prompt_ids:
        raise InvalidRequest("prompt_ids is empty")
    if len(prompt_ids) >= max_model_len:
        raise InvalidRequest(
            f"prompt of {len(prompt_ids)} tokens leaves no room in the context of "
            f"{max_model_len} tokens"
        )
    if min(prompt_ids) < 0 or max(prompt_ids) >= vocab_size:
        raise InvalidRequest(f"prompt_ids must be token ids in [0, {vocab_size})")


def check_update(state_dict: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> None:
    """Raise InvalidRequest unless every tensor of a weight update names one of `own`
    (the weights served) with its shape."""
    for name, tensor in state_dict.items():
        if name not in own:
            raise InvalidRequest(f"unknown parameter {name!r}")
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise InvalidRequest(f"{name}: shape {tuple(tensor.shape)} != {tuple(own[name].shape)}")


class Engine:
    """Batched, KV-cached generation over a fleetrl model, driven from asyncio."""

    def __init__(
        self,
        model: Qwen3,
        max_batch_size: int = 64,
        max_model_len: int | None = None,
        version: int = 0,
        seed: int = 0,
        max_prefill_tokens: int = 4096,
        prefix_cache_slots: int | None = None,
    ) -> None:
        """`prefix_cache_slots`: finished requests kept for prefix reuse (default: as many
        as `max_batch_size`; 0 turns the prefix cache off)."""
        self.model = model.eval()
        self.config = model.config
        self.max_batch_size = max_batch_size
        self.prefix_cache_slots = (
            max_batch_size if prefix_cache_slots is None else prefix_cache_slots
        )
        self.max_prefill_tokens = max_prefill_tokens  # padded prompt tokens per prefill
        self.max_model_len = max_model_len or min(self.config.max_position_embeddings, 4096)
        self.version = version
        param = next(model.parameters())
        self.device = param.device
        # One spare position so the last token of a full-length request can still be flushed.
        self.cache = KVCache(
            self.config.num_hidden_layers,
            max_batch_size + self.prefix_cache_slots,
            self.config.num_key_value_heads,
            self.max_model_len + 1,
            self.config.head_dim,
            dtype=param.dtype,
            device=self.device,
        )
        self.stats = EngineStats(version=version)
        self._shared_rng = torch.Generator(device=self.device).manual_seed(seed)
        self._queues = _Queues()
        self._parked: dict[int, _Parked] = {}  # by cache slot, past the running slots
        self._clock = itertools.count()
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        """Generate one completion of `prompt_ids`; raises InvalidRequest for bad input."""
        params = params or SamplingParams()
        params.validate()
        prompt_ids = list(prompt_ids)
        check_prompt(prompt_ids, self.max_model_len, self.config.vocab_size)
        generator = None
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        moe = self.config.is_moe
        request = _Request(
            prompt_ids=prompt_ids,
            params=params,
            future=asyncio.get_running_loop().create_future(),
            generator=generator,
            max_new=min(params.max_tokens, self.max_model_len - len(prompt_ids)),
            out=Completion(
                prompt_ids=prompt_ids,
                token_ids=[],
                logprobs=[],
                versions=[],
                finish_reason="length",
                routed_experts=[] if moe else None,
                top_logprobs=[] if params.top_logprobs else None,
            ),
        )
        self._queues.waiting.append(request)
        self._ensure_loop()
        return await request.future

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights served now, by name (what a weight follower diffs against)."""
        return self.model.state_dict()

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Load new weights between two decode steps; returns the decoding pause in seconds.

        `state_dict` may hold a subset of the parameters (only what changed). Unknown names
        or wrong shapes raise InvalidRequest and nothing is changed.
        """
        check_update(state_dict, self.model.state_dict())
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._queues.updates.append(_WeightUpdate(state_dict, version, future))
        self._ensure_loop()
        return await future

    async def close(self) -> None:
        """Stop the background loop; requests still queued fail with RuntimeError."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        self._fail_all(RuntimeError("engine closed"))

    # -- the loop ---------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._wake = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())
        assert self._wake is not None
        self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        q = self._queues
        while True:
            if not (q.waiting or q.running or q.updates):
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                self._step()
            except Exception as err:  # outside any step (a bug): trust nothing in flight
                self._fail_all(err)
            self.stats.running, self.stats.waiting = len(q.running), len(q.waiting)
            await asyncio.sleep(0)  # let the loop serve I/O between steps

    def _step(self) -> None:
        """Pending weight updates, then a prefill of newcomers, then one decode step."""
        q = self._queues
        while q.updates:
            self._apply_update(q.updates.pop(0))
        admitted = self._admit()
        if admitted:
            self._isolated(admitted, lambda a, b: self._prefill(admitted[a:b]))
        if q.running:
            self._isolated(list(q.running), self._decode_step)
        self._retire()

    def _isolated(self, requests: list[_Request], step: Callable[[int, int], None]) -> None:
        """Run `step(0, n)` over a batch of `n` requests; if it raises, run `step(i, i + 1)`
        for each request alone and fail only those that raise alone.

        Retrying one by one costs `n` small steps, and only when a step failed; halving
        would take fewer when one request is at fault, but a failure is rare enough that
        the simplest rule wins."""
        try:
            step(0, len(requests))
            return
        except Exception as err:
            if len(requests) == 1:
                self._fail(requests[0], err)
                return
        for i, request in enumerate(requests):
            try:
                step(i, i + 1)
            except Exception as err:
                self._fail(request, err)

    def _fail(self, request: _Request, err: Exception) -> None:
        """Fail one request; `_retire` frees its slot if it was running."""
        if not request.future.done():
            request.future.set_exception(err)

    def _fail_all(self, err: Exception) -> None:
        q = self._queues
        for item in [*q.waiting, *q.running, *q.updates]:
            if not item.future.done():
                item.future.set_exception(err)
        q.waiting.clear()
        q.running.clear()
        q.updates.clear()
        self._parked.clear()

    def _apply_update(self, update: _WeightUpdate) -> None:
        """Apply one queued weight update and answer its caller (its error, if it raised)."""
        try:
            pause = self._apply_weights(update)
        except Exception as err:
            if not update.future.done():
                update.future.set_exception(err)
            return
        if not update.future.done():
            update.future.set_result(pause)

    @torch.inference_mode()
    def _apply_weights(self, update: _WeightUpdate) -> float:
        start = time.perf_counter()
        params = self.model.state_dict()
        for name, tensor in update.state_dict.items():
            params[name].copy_(tensor)
        self._parked.clear()
        self.version = update.version
        pause = time.perf_counter() - start
        self.stats.version = update.version
        self.stats.weight_updates += 1
        self.stats.last_update_pause_s = pause
        return pause

    def _admit(self) -> list[_Request]:
        """Take waiting requests for the free slots, up to one prefill's token budget."""
        q = self._queues
        admitted: list[_Request] = []
        width = start = 0  # the prefill's padded width and its rows' largest start
        while q.waiting and len(q.running) + len(admitted) < self.max_batch_size:
            request = q.waiting[0]
            if request.future.done():  # cancelled by its caller
                q.waiting.pop(0)
                continue
            self._find_prefix(request)
            new_width = max(width, len(request.prompt_ids) - request.reuse)
            new_start = max(start, request.reuse)
            if admitted and (
                new_width * (len(admitted) + 1) > self.max_prefill_tokens
                or new_start + new_width > self.cache.max_len  # padding must fit every slot
            ):
                break
            admitted.append(q.waiting.pop(0))
            width, start = new_width, new_start
        return admitted

    def _find_prefix(self, request: _Request) -> None:
        """Point `request` at the parked slot sharing the longest prefix with its prompt."""
        request.reuse_slot, request.reuse, request.reuse_routed = -1, 0, None
        for slot, parked in self._parked.items():
            # At least one prompt token is computed: its logits sample the first token.
            shared = min(
                _common_prefix(parked.tokens, request.prompt_ids), len(request.prompt_ids) - 1
            )
            if shared > request.reuse:
                request.reuse_slot, request.reuse = slot, shared
                request.reuse_routed = parked.routed[:shared] if parked.routed else None

    def _park(self, slot: int, request: _Request) -> None:
        """Keep a finished request's slot for prefix reuse (overwriting the least recent)."""
        if not self.prefix_cache_slots:
            return
        spare = range(self.max_batch_size, self.max_batch_size + self.prefix_cache_slots)
        free = [s for s in spare if s not in self._parked]
        target = free[0] if free else min(self._parked, key=lambda s: self._parked[s].last_used)
        self.cache.copy(slot, target, request.length)
        out = request.out
        routed = None
        if out.routed_experts is not None:
            routed = [*(out.prompt_routed_experts or []), *out.routed_experts][: request.length]
        tokens = [*request.prompt_ids, *out.token_ids][: request.length]
        self._parked[target] = _Parked(tokens, routed, next(self._clock))

    @torch.inference_mode()
    def _prefill(self, requests: list[_Request]) -> None:
        """Run the prompts, right-padded, into the next free cache slots; sample first tokens;
        the requests join the running ones.

        Padding positions land in the cache past each prompt's end, where the mask hides
        them until the request's own tokens overwrite them. Until the step has sampled it
        writes only into the free slots, so a failed step can simply run again.
        """
        first = len(self._queues.running)
        for i, request in enumerate(requests):
            if request.reuse:
                self.cache.copy(request.reuse_slot, first + i, request.reuse)
        rest = [r.prompt_ids[r.reuse :] for r in requests]
        lengths = [len(ids) for ids in rest]
        width = max(lengths)
        ids = torch.tensor([ids + [0] * (width - len(ids)) for ids in rest], device=self.device)
        starts = torch.tensor([r.reuse for r in requests], device=self.device)
        self.cache.begin(slice(first, first + len(requests)), starts, width)
        out = self.model(ids, kv_cache=self.cache, return_routed_experts=self.config.is_moe)
        last = torch.tensor([n - 1 for n in lengths], device=self.device)
        rows = torch.arange(len(requests), device=self.device)
        draws = self._sample(requests, out.logits[rows, last])
        for i, request in enumerate(requests):
            parked = self._parked.get(request.reuse_slot) if request.reuse else None
            if parked is not None and request.reuse == len(parked.tokens):
                del self._parked[request.reuse_slot]  # continued: it parks again at the end
            elif parked is not None:
                parked.last_used = next(self._clock)
            self.stats.prompt_tokens += len(request.prompt_ids)
            self.stats.prefix_hit_tokens += request.reuse
            request.length = len(request.prompt_ids)
            if out.routed_experts is not None:
                request.out.prompt_routed_experts = [
                    *(request.reuse_routed or []),
                    *out.routed_experts[i, : lengths[i]].tolist(),
                ]
        self._record(requests, draws)
        self._queues.running.extend(requests)

    @torch.inference_mode()
    def _decode_step(self, start: int, stop: int) -> None:
        """Feed the last token of the running requests in slots `start..stop-1` through the
        model; sample the next. Requests change only once the step has sampled."""
        batch = self._queues.running[start:stop]
        ids = torch.tensor([r.out.token_ids[-1] for r in batch], device=self.device)[:, None]
        starts = torch.tensor([r.length for r in batch], device=self.device)
        self.cache.begin(slice(start, stop), starts, 1)
        out = self.model(ids, kv_cache=self.cache, return_routed_experts=self.config.is_moe)
        sampling = [i for i, r in enumerate(batch) if not r.finished]
        draws = self._sample([batch[i] for i in sampling], out.logits[sampling, -1])
        for i, request in enumerate(batch):
            request.length += 1
            if out.routed_experts is not None:
                request.out.routed_experts.append(out.routed_experts[i, 0].tolist())
        self._record([batch[i] for i in sampling], draws)
        self.stats.decode_steps += 1

    def _sample(self, requests: list[_Request], logits: torch.Tensor) -> _Draws:
        """Next tokens, their logprobs and top logprobs for `requests` (rows of `logits`)."""
        if not requests:
            return [], [], []
        return sample(
            logits,
            [r.params for r in requests],
            [r.generator for r in requests],
            self._shared_rng,
        )

    def _record(self, requests: list[_Request], draws: _Draws) -> None:
        """Append sampled tokens to their requests and mark those that are done."""
        for request, token, logprob, top_i in zip(requests, *draws, strict=True):
            out = request.out
            out.token_ids.append(token)
            out.logprobs.append(logprob)
            out.versions.append(self.version)
            if out.top_logprobs is not None:
                out.top_logprobs.append(top_i)
            if token in request.params.stop_token_ids:
                out.finish_reason = "stop"
                request.finished = True
            elif len(out.token_ids) >= request.max_new:
                request.finished = True
        self.stats.generated_tokens += len(requests)

    def _retire(self) -> None:
        """Resolve finished requests and keep the running ones packed in slots 0..B-1."""
        running = self._queues.running
        i = 0
        while i < len(running):
            request = running[i]
            done = request.finished and not (self.config.is_moe and request.needs_input())
            if not (done or request.future.done()):
                i += 1
                continue
            if not request.future.done():
                self._park(i, request)
                request.future.set_result(request.out)
            last = len(running) - 1
            if i != last:
                self.cache.copy(last, i, running[last].length)
                running[i] = running[last]
            running.pop()
