"""`fleetrl sft`: train a model on expert demonstrations of the micro training split.

Wired into the main CLI as `app.command()(sft)`. The command makes (or loads from its
cache) the demonstrations (`fleetrl.trainer.demos`), builds a fresh model of the base shape
or loads `--init`, runs `fleetrl.trainer.sft.train_sft`, and writes a Hugging Face
checkpoint with its tokenizer. Errors a user can cause (a bad option, a non-empty output
folder, a missing checkpoint, no sandbox) end with a one-line message and exit code 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer


def _fail(message: str) -> typer.Exit:
    """Print a one-line error and return the exit to raise (code 2: bad input)."""
    first = message.strip().splitlines()[0] if message.strip() else "error"
    typer.secho(f"error: {first}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=2)


def sft(
    out: Annotated[Path, typer.Argument(help="Directory to write the checkpoint into.")],
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 800,
    batch_size: Annotated[int, typer.Option(help="Episodes per step.")] = 32,
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 1e-3,
    warmup: Annotated[int, typer.Option(help="Linear warmup steps before the cosine.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the initial weights and batch order.")] = 0,
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 2,
    bf16: Annotated[
        bool,
        typer.Option(
            "--bf16/--fp32",
            help="Matmuls in bfloat16 (autocast; float32 weights): about 2x faster on CPUs "
            "with AVX512-BF16, slower on CPUs without it.",
        ),
    ] = False,
    init: Annotated[
        Path | None,
        typer.Option(help="Start from this checkpoint (and its tokenizer) instead of scratch."),
    ] = None,
    hidden: Annotated[int, typer.Option(help="Hidden size of a fresh model (4 heads).")] = 256,
    layers: Annotated[int, typer.Option(help="Decoder layers of a fresh model.")] = 4,
    copies: Annotated[
        int, typer.Option(help="Renamed copies per task demonstrated on top (fresh names).")
    ] = 16,
    max_tasks: Annotated[
        int, typer.Option(help="Demonstrate only the first N training tasks (0: all 440).")
    ] = 0,
    save_every: Annotated[
        int, typer.Option(help="Also save OUT/step-NNNNNN/ every N steps (0: only the end).")
    ] = 0,
    log_every: Annotated[int, typer.Option(help="Steps between loss lines.")] = 25,
    demos_cache: Annotated[
        Path | None,
        typer.Option(help="Folder caching the demonstrations (default: the fleetrl cache)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write into a non-empty directory.")
    ] = False,
) -> None:
    """Supervised fine-tuning on expert demonstrations of the micro training tasks.

    The expert solves each task through the real harness (read the file, edit it, run the
    example from the problem statement, finish) in real sandboxes, by each of its plans
    (graded by the verifier), then renamed copies of each task with fresh random names
    (checked by the expert's own run). The model learns the expert's replies only.
    """
    if min(steps, batch_size, threads, log_every) < 1:
        raise _fail("--steps, --batch-size, --threads and --log-every must be >= 1")
    if not lr > 0 or min(warmup, copies, max_tasks, save_every) < 0:
        raise _fail("need --lr > 0 and --warmup, --copies, --max-tasks, --save-every >= 0")
    if hidden < 8 or hidden % 8 or layers < 1:
        raise _fail("--hidden must be a multiple of 8 (4 heads, even head size), --layers >= 1")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise _fail(f"{out} is not an empty directory (use --force to write into it)")
    if init is not None and not (init / "config.json").is_file():
        raise _fail(f"--init {init} is not a checkpoint directory (no config.json)")

    import torch

    from fleetrl.envs.sandbox import SandboxError
    from fleetrl.envs.tasks import load_tasks
    from fleetrl.model import CheckpointError, Tokenizer, bundled_tokenizer, init_model
    from fleetrl.model.checkpoint import load_pretrained
    from fleetrl.trainer.demos import load_or_generate_demos
    from fleetrl.trainer.sft import SFTConfig, model_config, train_sft

    torch.set_num_threads(threads)
    try:
        if init is not None:
            model = load_pretrained(init, dtype=torch.float32)
            tokenizer = Tokenizer.from_pretrained(init)
        else:
            tokenizer = bundled_tokenizer()
            model = init_model(model_config(tokenizer, hidden, layers), seed=seed)
    except (CheckpointError, FileNotFoundError) as err:
        raise _fail(str(err)) from None
    if model.config.vocab_size < tokenizer.vocab_size:
        raise _fail(f"--init {init}: the model's vocabulary is smaller than its tokenizer's")

    tasks = load_tasks(suite="micro", split="train")
    tasks = tasks[:max_tasks] if max_tasks else tasks
    typer.echo(
        f"demonstrations of {len(tasks)} training tasks and {copies} renamed copies of each "
        "(cached after the first run)"
    )
    start = time.monotonic()
    try:
        demos, stats = load_or_generate_demos(tasks, tokenizer, copies=copies, cache=demos_cache)
    except SandboxError as err:
        raise _fail(f"cannot run sandboxes: {err}") from None
    typer.echo(
        f"{stats.kept} demonstrations kept of {stats.episodes} ({stats.graded} graded by the "
        f"verifier, {len(stats.dropped)} dropped), "
        f"{stats.mean_tokens:.0f} tokens each, {stats.mean_reply_tokens:.0f} of them replies "
        f"({time.monotonic() - start:.0f} s)"
    )
    for episode, reason in stats.dropped.items():
        typer.echo(f"  dropped {episode}: {reason}")
    if not demos:
        raise _fail("no demonstration passed its checks; nothing to train on")

    config = SFTConfig(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=min(warmup, steps - 1),
        seed=seed,
        bf16=bf16,
        log_every=log_every,
        save_every=save_every,
    )
    about = {
        "init": str(init) if init else None,
        "hidden": model.config.hidden_size,
        "layers": model.config.num_hidden_layers,
        "threads": threads,
        "tasks": len(tasks),
        "demos": {k: v for k, v in vars(stats).items() if k != "dropped"},
    }
    result = train_sft(model, demos, tokenizer, out, config, about=about, echo=typer.echo)
    typer.echo(
        f"trained {result.steps} steps in {result.duration_s:.0f} s, final loss "
        f"{result.final_loss:.4f}; wrote {out}"
    )
