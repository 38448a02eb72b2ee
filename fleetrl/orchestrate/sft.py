"""The job of `fleetrl sft`: expert demonstrations in, a fine-tuned checkpoint out.

    config.tasks ─▶ the scripted expert through the rollout worker ─▶ demos (cached)
    sft.val_split ─▶ the same, originals only ─▶ validation demos (when sft.val_every > 0)
    sft.init, or a fresh model of sft.hidden x sft.layers (and the bundled tokenizer)
        ─▶ train_sft(config.sft) ─▶ OUT: Hugging Face checkpoint + tokenizer + sft.json

Demos follow the run's harness and sandbox settings (`config.harness`, `config.rollout`),
so the model learns exactly the prompts and tool results it meets at RL time; with
`rollout.harness = mini-swe-agent` they are the expert's episodes inside that package as
its recording endpoint records them (`fleetrl.rollout.mswe_demos`: one per task, no
copies, `sft.plans` not used). Errors a
user can cause (a missing checkpoint, tasks the expert cannot solve, no sandbox, no demo
kept) raise SftError with a one-line message. Not covered: several processes, resuming.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.envs.micro.expert import PLANS
from fleetrl.envs.sandbox import SandboxError
from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import configured_tasks, guide_for
from fleetrl.model.checkpoint import (
    CheckpointError,
    init_model,
    load_pretrained,
    resolve_checkpoint,
    upcycle,
)
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.rollout.demos import DemoStats, load_or_generate_demos
from fleetrl.trainer.sft import SFTResult, model_config, train_sft
from fleetrl.types import Demo, Task


class SftError(RuntimeError):
    """An SFT run cannot start or has nothing to train on; the message says why."""


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _model(config: RunConfig) -> tuple[Qwen3, Tokenizer]:
    """The model to fine-tune, with its tokenizer: `sft.init`, or a fresh one."""
    sft = config.sft
    try:
        if sft.init is not None:
            init = resolve_checkpoint(sft.init)
            if not (init / "config.json").is_file():
                raise SftError(
                    f"sft.init {sft.init} is not a checkpoint directory (no config.json)"
                )
            model = load_pretrained(init, dtype=torch.float32)
            tokenizer = Tokenizer.from_pretrained(init)
        else:
            tokenizer = bundled_tokenizer()
            model = init_model(model_config(tokenizer, sft.hidden, sft.layers), seed=sft.seed)
    except (CheckpointError, FileNotFoundError) as err:
        raise SftError(_first_line(err)) from None
    if model.config.vocab_size < tokenizer.vocab_size:
        raise SftError(
            f"sft.init {sft.init}: the model's vocabulary is smaller than its tokenizer's"
        )
    if sft.experts:
        if sft.experts < 2:
            raise SftError(f"sft.experts = {sft.experts}: a top-2 mixture needs 2 or more")
        if model.config.is_moe:
            raise SftError(f"sft.experts: sft.init {sft.init} is already a mixture of experts")
        model = upcycle(model, sft.experts, top_k=2, seed=sft.seed)
    return model, tokenizer


def _tasks(config: RunConfig, split: str) -> list[Task]:
    """The tasks of `split` to demonstrate, the first `sft.max_tasks` of it."""
    try:
        tasks = configured_tasks(config.tasks, split)
    except TaskError as err:
        raise SftError(_first_line(err)) from None
    tasks = tasks[: config.sft.max_tasks] if config.sft.max_tasks else tasks
    for task in tasks:
        guide = guide_for(task)
        if guide is None:
            raise SftError(f"{task.instance_id}: no scripted expert serves the task")
        for plan in config.sft.plans:
            try:
                guide.steps(task, plan)
            except ValueError as err:
                raise SftError(f"sft.plans: {err}") from None
    return tasks


def run_sft(
    config: RunConfig, out: Path, echo: Callable[[str], None] = print, progress: bool = True
) -> SFTResult:
    """Make (or load from the cache) the demonstrations, fine-tune, write `out`; the
    progress lines go to `echo`."""
    sft = config.sft
    mini = config.rollout.harness != "fleetrl"
    if not mini and not sft.plans:
        raise SftError(f"sft.plans is empty: choose one or more of {', '.join(PLANS)}")
    torch.set_num_threads(sft.threads)
    model, tokenizer = _model(config)
    tasks = _tasks(config, config.tasks.split)
    val_tasks = _tasks(config, sft.val_split) if sft.val_every else []
    copies = 0 if mini else sft.copies
    inside = f" inside {config.rollout.harness}" if mini else ""
    echo(
        f"demonstrations of {len(tasks)} training tasks{inside} and {copies} renamed copies of "
        "each (cached after the first run)"
    )
    start = time.monotonic()
    cache = Path(sft.demos_cache) if sft.demos_cache else None

    def demos_of(tasks: list[Task], copies: int) -> tuple[list[Demo], DemoStats]:
        if mini:
            from fleetrl.rollout.mswe_demos import load_or_generate_mswe_demos

            return load_or_generate_mswe_demos(
                tasks, model, tokenizer, config.harness, config.rollout, cache, progress
            )
        return load_or_generate_demos(
            tasks,
            tokenizer,
            config.harness,
            config.rollout,
            plans=sft.plans,
            copies=copies,
            cache=cache,
            progress=progress,
        )

    try:
        demos, stats = demos_of(tasks, copies)
        val_demos, val_stats = demos_of(val_tasks, 0) if val_tasks else ([], None)
    except SandboxError as err:
        raise SftError(f"cannot run sandboxes: {_first_line(err)}") from None
    echo(
        f"{stats.kept} demonstrations (one per context window) from {stats.episodes} "
        f"episodes ({stats.graded} graded by the verifier, {len(stats.dropped)} dropped), "
        f"{stats.mean_tokens:.0f} tokens each, {stats.mean_reply_tokens:.0f} of them replies "
        f"({time.monotonic() - start:.0f} s)"
    )
    for episode, reason in stats.dropped.items():
        echo(f"  dropped {episode}: {reason}")
    if val_stats is not None:
        echo(
            f"{val_stats.kept} validation demonstrations of {len(val_tasks)} {sft.val_split} tasks"
        )
    if not demos:
        raise SftError("no demonstration passed its checks; nothing to train on")
    about = {
        "init": sft.init,
        "hidden": model.config.hidden_size,
        "layers": model.config.num_hidden_layers,
        "threads": sft.threads,
        "rollout_harness": config.rollout.harness,
        "harness": config.harness.model_dump(),
        "tasks": len(tasks),
        "tasks_source": config.tasks.model_dump(),
        "demos": {k: v for k, v in vars(stats).items() if k != "dropped"},
        "val_tasks": len(val_tasks),
        "val_demos": len(val_demos),
    }
    result = train_sft(
        model,
        demos,
        tokenizer,
        out,
        sft,
        about=about,
        progress=progress,
        echo=echo,
        val_demos=val_demos,
    )
    best = f", best validation loss at step {result.best_step}" if result.val_losses else ""
    best += f", weights of step {result.kept_step} kept"
    echo(
        f"trained {result.steps} steps in {result.duration_s:.0f} s (stopped: {result.stopped}), "
        f"final loss {result.final_loss:.4f}{best}; wrote {out}"
    )
    return result
