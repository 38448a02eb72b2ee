"""`fleetrl train` (RL, the whole run on this machine or on Ray) and `fleetrl sft`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config

if TYPE_CHECKING:
    from fleetrl.config import RunConfig


def train(
    config_file: Annotated[
        Path | None,
        typer.Argument(
            help="TOML run configuration, or a shipped preset's name: `demo` is what "
            "`make demo` runs (default: built-in)."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name: writes runs/NAME.")] = None,
    steps: Annotated[int | None, typer.Option(help="Override trainer.steps.")] = None,
    sync: Annotated[
        bool, typer.Option("--sync", help="Synchronous baseline (max_staleness 0).")
    ] = False,
    regions: Annotated[int, typer.Option(help="Rollout region processes.")] = 1,
    trainer_ranks: Annotated[
        int,
        typer.Option(
            help="Trainer processes (torchrun, the model sharded with FSDP2). A stopped run "
            "continues at another number: its checkpoint reshards."
        ),
    ] = 1,
    launcher: Annotated[
        str,
        typer.Option(
            help="local: processes on this machine; ray: Ray actors (RAY_ADDRESS selects a "
            "cluster, else a local Ray starts)."
        ),
    ] = "local",
    runs_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("runs"),
    set_: SetOption = None,
) -> None:
    """Train with RL: trainer + rollout regions + store; evaluates and reports at the end."""
    shortcuts = {"name": name, "trainer.steps": steps, "trainer.max_staleness": 0 if sync else None}
    config = run_config(config_file, set_, shortcuts)
    from fleetrl.config import ConfigError, check_trainable

    try:
        check_trainable(config)
    except ConfigError as err:
        raise fail(str(err)) from None
    if regions < 1:
        raise fail("--regions must be >= 1")
    if trainer_ranks < 1:
        raise fail("--trainer-ranks must be >= 1")
    if runs_dir.exists() and not runs_dir.is_dir():
        raise fail(f"--runs-dir {runs_dir} is a file, not a folder")
    run_dir = runs_dir / config.name
    if (run_dir / "final").exists():
        raise fail(f"{run_dir} holds a finished run; choose another --name")
    from fleetrl.model.checkpoint import resolve_checkpoint

    if launcher not in ("local", "ray"):
        raise fail(f"--launcher must be local or ray, not {launcher!r}")
    from fleetrl.orchestrate.local import RunFailed, run_local
    from fleetrl.store.errors import StoreAccessError

    base = resolve_checkpoint(config.model.path)
    if not (base / "config.json").is_file():
        raise fail(f"model.path {config.model.path!r} is not a checkpoint directory")
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import configured_tasks, without_solved

    split = config.tasks.split
    try:
        tasks = configured_tasks(config.tasks, split)
        drawn = len(without_solved(tasks, config.tasks, base))
    except TaskError as err:
        raise fail(str(err)) from None
    if config.tasks.skip_solved is not None:
        total = len(tasks)
        typer.echo(
            f"RL draws from {drawn} of the {total} {split!r} tasks: the other {total - drawn} "
            f"were solved in every sample of {config.tasks.skip_solved} (tasks.skip_solved)"
        )
    try:
        if launcher == "local":
            summary = run_local(config, run_dir, regions=regions, trainer_ranks=trainer_ranks)
        else:
            summary = _train_on_ray(config, run_dir, regions, trainer_ranks)
    except (RunFailed, StoreAccessError) as err:  # StoreAccessError: the run's store refuses
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        typer.secho(
            "interrupted: the run is kept in its store; the same command resumes it",
            err=True,
        )
        raise typer.Exit(code=130) from None
    for label, result in summary.items():
        typer.echo(
            f"{label:>5}: pass@1 {result['pass_at_1']:.3f} "
            f"[{result['ci_low']:.3f}, {result['ci_high']:.3f}] over {result['episodes']} episodes"
        )
    typer.echo(f"run directory: {run_dir}  (report: {run_dir / 'report.html'})")


def sft(
    out: Annotated[Path, typer.Argument(help="Directory to write the checkpoint into.")],
    steps: Annotated[int | None, typer.Option(help="Optimizer steps \\[sft.steps].")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Episodes per step \\[sft.batch_size].")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate, AdamW \\[sft.lr].")] = None,
    warmup: Annotated[
        int | None, typer.Option(help="Linear warmup steps before the cosine \\[sft.warmup_steps].")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the initial weights and batch order \\[sft.seed].")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads \\[sft.threads].")] = None,
    bf16: Annotated[
        bool | None,
        typer.Option(
            "--bf16/--fp32",
            help="Matmuls in bfloat16 (autocast; float32 weights): about 2x faster on CPUs "
            "with AVX512-BF16, slower on CPUs without it \\[sft.bf16].",
        ),
    ] = None,
    init: Annotated[
        Path | None,
        typer.Option(
            help="Start from this checkpoint (or a shipped model: base, base-slip) and its "
            "tokenizer \\[sft.init]."
        ),
    ] = None,
    hidden: Annotated[
        int | None, typer.Option(help="Hidden size of a fresh model, 4 heads \\[sft.hidden].")
    ] = None,
    layers: Annotated[
        int | None, typer.Option(help="Decoder layers of a fresh model \\[sft.layers].")
    ] = None,
    copies: Annotated[
        int | None,
        typer.Option(help="Renamed copies per task demonstrated on top \\[sft.copies]."),
    ] = None,
    max_tasks: Annotated[
        int | None,
        typer.Option(
            help="Demonstrate only the first N training tasks (and validate on the first N "
            "validation tasks), 0: all \\[sft.max_tasks]."
        ),
    ] = None,
    save_every: Annotated[
        int | None,
        typer.Option(
            help="Also save OUT/step-NNNNNN/ every N steps, 0: only the end \\[sft.save_every]."
        ),
    ] = None,
    log_every: Annotated[
        int | None, typer.Option(help="Steps between loss lines \\[sft.log_every].")
    ] = None,
    demos_cache: Annotated[
        Path | None,
        typer.Option(help="Folder caching the demonstrations \\[sft.demos_cache]."),
    ] = None,
    val_every: Annotated[
        int | None,
        typer.Option(help="Steps between validation losses, 0: none \\[sft.val_every]."),
    ] = None,
    patience: Annotated[
        int | None,
        typer.Option(
            help="Stop after N validation losses without a new best and keep the best "
            "weights, 0: run all steps \\[sft.patience]."
        ),
    ] = None,
    max_seconds: Annotated[
        float | None,
        typer.Option(help="Stop after this much training wall time, 0: none \\[sft.max_seconds]."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write into a non-empty directory.")
    ] = False,
    config_file: ConfigOption = None,
    set_: SetOption = None,
) -> None:
    """Supervised fine-tuning on expert demonstrations of the micro training tasks.

    The expert solves each task through the real harness (read the file, edit it, run the
    example from the problem statement, finish) in real sandboxes, by each of its plans
    (graded by the verifier), then renamed copies of each task with fresh random names
    (checked by the expert's own run). The model learns the expert's replies only.
    Settings come from the run configuration tree (defaults, --config, --set); each flag
    below overrides the key in brackets after it. Ctrl-C stops after the step in progress
    and writes the checkpoint so far (a second Ctrl-C aborts at once)."""
    shortcuts = {
        "sft.steps": steps,
        "sft.batch_size": batch_size,
        "sft.lr": lr,
        "sft.warmup_steps": warmup,
        "sft.seed": seed,
        "sft.threads": threads,
        "sft.bf16": bf16,
        "sft.init": str(init) if init else None,
        "sft.hidden": hidden,
        "sft.layers": layers,
        "sft.copies": copies,
        "sft.max_tasks": max_tasks,
        "sft.save_every": save_every,
        "sft.log_every": log_every,
        "sft.demos_cache": str(demos_cache) if demos_cache else None,
        "sft.val_every": val_every,
        "sft.patience": patience,
        "sft.max_seconds": max_seconds,
    }
    config = run_config(config_file, set_, shortcuts)
    if out.exists() and not out.is_dir():
        raise fail(f"{out} is a file, not a folder to write the checkpoint into")
    if out.exists() and any(out.iterdir()) and not force:
        raise fail(f"{out} is not an empty directory (use --force to write into it)")
    cache = config.sft.demos_cache
    if cache and Path(cache).exists() and not Path(cache).is_dir():
        raise fail(f"sft.demos_cache {cache} is a file, not a folder")
    from fleetrl.orchestrate.sft import SftError, run_sft

    try:
        result = run_sft(config, out, echo=typer.echo)
    except SftError as err:
        raise fail(str(err)) from None
    if result.stopped == "interrupted":
        typer.secho(
            f"interrupted: {out} holds the weights so far; --init {out} continues", err=True
        )
        raise typer.Exit(code=130)


def _train_on_ray(config: RunConfig, run_dir: Path, regions: int, trainer_ranks: int) -> dict:
    """`fleetrl train --launcher ray`: the run created in its store, roles as Ray actors,
    then the same evaluation and report as the local launcher."""
    from fleetrl.orchestrate.local import evaluate_and_report, prepare_run
    from fleetrl.orchestrate.ray_launcher import RayMissing, run_ray

    prepare_run(config, run_dir)
    try:
        run_ray(config, run_dir, regions=regions, trainer_ranks=trainer_ranks)
    except RayMissing as err:
        raise fail(str(err)) from None
    return evaluate_and_report(config, run_dir)
