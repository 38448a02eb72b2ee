"""vLLM as the rollout engine, behind the same seam as fleetrl's own `Engine`.

    harness / recording endpoint ── generate(prompt ids, SamplingParams) ──▶ VllmEngine
        vLLM AsyncLLM (engine core and worker in their own processes)
        token ids in; token ids, each one's logprob at the sampling temperature
        (logprobs_mode = processed_logprobs) and its weight version out
    WeightFollower ── update_weights(changed tensors, v) ──▶ VllmEngine
        the host copy of every tensor takes the change (what the follower diffs against)
        pause (requests kept) ─▶ collective_rpc: all tensors as one safetensors buffer,
        loaded in place by `fleetrl.inference.vllm_worker.WeightLoader` ─▶ version v
        ─▶ resume: requests in flight go on, their cache recomputed with version v

The pause clears vLLM's caches: a request in flight keeps its tokens and recomputes its
cache under the new weights, and no later request reuses a prefix computed by the old
ones. Every token carries the version of the weights that sampled it (vLLM's weight
version spans), exact across swaps.

vLLM stops only at the request's stop tokens (`ignore_eos`), as the built-in engine does,
and both count the stop token as generated. MoE routing comes back where vLLM can return
it (its routed-experts output, GPU); on CPU it cannot: the engine says so once and its
completions carry no routes, so the trainer does not replay them.

Not covered: tensor or pipeline parallelism (one worker), LoRA, vLLM's own HTTP server
(`fleetrl serve --engine vllm` serves this engine through fleetrl's).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save

from fleetrl.inference.engine import EngineStats, check_prompt, check_update
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.types import Completion, SamplingParams

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = logging.getLogger(__name__)

WORKER_EXTENSION = "fleetrl.inference.vllm_worker.WeightLoader"
_BLOCK = 16  # vLLM's KV cache block, in tokens


def vllm_available() -> bool:
    """Whether vLLM is installed here (the `vllm` extra)."""
    return importlib.util.find_spec("vllm") is not None


class VllmEngine:
    """A vLLM engine serving a fleetrl checkpoint, with the built-in Engine's interface:
    `generate`, `state_dict`, `update_weights`, `close`, `version`, `stats`,
    `max_model_len`."""

    def __init__(
        self,
        checkpoint: str | Path,
        max_batch_size: int = 64,
        max_model_len: int = 4096,
        dtype: str = "bfloat16",
        seed: int = 0,
        threads: int | None = None,
        version: int = 0,
    ) -> None:
        """Start vLLM on `checkpoint` (a folder in Hugging Face layout, as fleetrl writes
        it), serving in `dtype` ("bfloat16" or "float32"); `threads` CPU cores for its
        worker (None: vLLM's choice). Takes tens of seconds: vLLM starts its processes."""
        # vLLM logs every start-up step at INFO, to stdout; its warnings and errors still
        # show, on stderr, so that a command's --json output stays JSON.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.checkpoint = Path(checkpoint)
        model = load_pretrained(self.checkpoint)
        self.config = model.config
        self.max_model_len = max_model_len
        self.max_batch_size = max_batch_size
        self.dtype = dtype
        self.version = version
        self._start_version = version  # what vLLM's unlabelled ("default") tokens are
        self.stats = EngineStats(version=version)
        # The follower's view: every tensor of the version served, as the store gave it.
        self._weights = {name: tensor.detach() for name, tensor in model.state_dict().items()}
        if self.config.tie_word_embeddings:
            self._weights.pop("lm_head.weight", None)
        on_gpu = torch.cuda.is_available()
        if threads is not None and not on_gpu:
            cores = sorted(os.sched_getaffinity(0))[:threads]
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
        args = AsyncEngineArgs(
            model=str(self.checkpoint),
            tokenizer=str(self.checkpoint),
            dtype=dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_batch_size,
            seed=seed,
            logprobs_mode="processed_logprobs",  # at the sampling temperature, as we train
            worker_extension_cls=WORKER_EXTENSION,
            enforce_eager=not on_gpu,
            enable_return_routed_experts=self.config.is_moe and on_gpu,
            gpu_memory_utilization=0.9 if on_gpu else 0.05,
            kv_cache_memory_bytes=None if on_gpu else self._kv_bytes(),
            # On CPU a seeded request whose prefill is split over steps kills the engine
            # (vLLM rewinds its generator's offset, which CPU generators lack): whole
            # prefills only, so a step takes at least one full prompt.
            enable_chunked_prefill=on_gpu,
            max_num_batched_tokens=None if on_gpu else max(max_model_len, 2048),
            disable_log_stats=True,
        )
        if self.config.is_moe and not on_gpu:
            log.warning(
                "vLLM returns no MoE routing on CPU: completions carry no routed experts, "
                "and the trainer will not replay routing for them"
            )
        self._llm: AsyncLLM | None = AsyncLLM.from_engine_args(args)
        self._ids = itertools.count()
        self._swap = asyncio.Lock()

    def _vllm(self) -> AsyncLLM:
        if self._llm is None:
            raise RuntimeError("engine closed")
        return self._llm

    def _kv_bytes(self) -> int:
        """KV cache for every sequence at full length, in whole blocks, at the serving dtype."""
        c = self.config
        blocks = self.max_batch_size * -(-self.max_model_len // _BLOCK) + 1
        per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim
        itemsize = torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()
        return max(blocks * _BLOCK * per_token * itemsize, 16 * 2**20)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        """One completion of `prompt_ids`; raises InvalidRequest for bad input."""
        from vllm import SamplingParams as VllmSampling
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = params or SamplingParams()
        params.validate()
        check_prompt(prompt_ids, self.max_model_len, self.config.vocab_size)
        sampling = VllmSampling(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_tokens=min(params.max_tokens, self.max_model_len - len(prompt_ids)),
            stop_token_ids=list(params.stop_token_ids),
            ignore_eos=True,
            seed=params.seed,
            logprobs=params.top_logprobs,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        request = f"fleetrl-{next(self._ids)}"
        self.stats.running += 1
        try:
            stream = self._vllm().generate(
                TokensPrompt(prompt_token_ids=list(prompt_ids)), sampling, request_id=request
            )
            outputs = [output async for output in stream]  # FINAL_ONLY: one, the whole
        finally:
            self.stats.running -= 1
        out = outputs[-1].outputs[0]
        tokens = list(out.token_ids)
        self.stats.generated_tokens += len(tokens)
        self.stats.prompt_tokens += len(prompt_ids)
        logprobs = [step[token].logprob for step, token in zip(out.logprobs, tokens, strict=True)]
        top = None
        if params.top_logprobs:
            top = [
                {t: lp.logprob for t, lp in step.items() if lp.rank <= params.top_logprobs}
                for step in out.logprobs
            ]
        routed, prompt_routed = None, None
        if out.routed_experts is not None:
            routed, prompt_routed = split_routes(out.routed_experts, len(prompt_ids), len(tokens))
        return Completion(
            prompt_ids=list(prompt_ids),
            token_ids=tokens,
            logprobs=logprobs,
            versions=token_versions(out.weight_versions, len(tokens), self._start_version),
            finish_reason="length" if out.finish_reason == "length" else "stop",
            routed_experts=routed,
            prompt_routed_experts=prompt_routed,
            top_logprobs=top,
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights served now, by name (what a weight follower diffs against)."""
        return self._weights

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Load a new version into the running engine; returns the decoding pause in
        seconds. `state_dict` may hold a subset (only what changed); unknown names or
        wrong shapes raise InvalidRequest and nothing is changed."""
        tied = self.config.tie_word_embeddings
        changed = {n: t for n, t in state_dict.items() if not (tied and n == "lm_head.weight")}
        check_update(changed, self._weights)
        async with self._swap:
            for name, tensor in changed.items():
                self._weights[name] = tensor.detach().to("cpu", copy=True)
            serving = getattr(torch, self.dtype)
            blob = await asyncio.to_thread(
                save, {n: t.to(serving).contiguous() for n, t in self._weights.items()}
            )
            start = time.perf_counter()
            await self._vllm().pause_generation(mode="keep", clear_cache=True)
            try:
                await self._vllm().collective_rpc("fleetrl_load_weights", args=(blob,))
                await self._vllm().update_weight_version(str(version))
            finally:
                await self._vllm().resume_generation()
            pause = time.perf_counter() - start
        self.version = version
        self.stats.version = version
        self.stats.weight_updates += 1
        self.stats.last_update_pause_s = pause
        return pause

    async def close(self) -> None:
        """Stop vLLM's processes; requests still running fail."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        # Its output handler first: it would log the engine's exit as a failure.
        if llm.output_handler is not None:
            llm.output_handler.cancel()
            await asyncio.gather(llm.output_handler, return_exceptions=True)
            llm.output_handler = None
        await asyncio.to_thread(llm.shutdown)


def token_versions(spans: list | None, n: int, default: int) -> list[int]:
    """Each output token's policy version from vLLM's weight version spans ([start, end)
    labelled with the version string it was given); tokens before any label (the
    checkpoint loaded at start) are `default`."""
    versions = [default] * n
    for span in spans or []:
        if span.version.isdigit():
            versions[span.start : span.end] = [int(span.version)] * (span.end - span.start)
    return versions


def split_routes(
    routes: object, prompt_len: int, generated: int
) -> tuple[list[list[list[int]]], list[list[list[int]]]]:
    """vLLM's routed experts of one sequence, [position, moe_layer, top_k] over the inputs
    it computed, as (generated tokens', prompt positions') in the Completion's form (the
    built-in engine's: the experts each token was routed to as an input). vLLM never feeds
    the last sampled token; its entry is -1 throughout, the shape of the others: the
    trainer replays routing for every position but a segment's last, and a later turn's
    prompt routes cover it. ValueError where vLLM's table is shorter than the inputs."""
    table = [[[int(e) for e in layer] for layer in position] for position in routes]  # type: ignore[attr-defined]
    inputs = prompt_len + generated - 1
    if len(table) < inputs or not table:
        raise ValueError(f"vLLM returned routes for {len(table)} positions of {inputs} inputs")
    prompt, rest = table[:prompt_len], table[prompt_len : prompt_len + generated]
    if len(rest) < generated:
        rest.append([[-1] * len(layer) for layer in table[0]])
    return rest, prompt
