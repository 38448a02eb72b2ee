"""The `fleetrl` command line. Each command parses its options, then imports what it needs.

Errors a user can cause (a missing checkpoint, a bad option) end with a one-line message
and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fleetrl.config import RunConfig

from fleetrl.envs.tasks_cli import tasks_app

app = typer.Typer(
    help="fleetrl: asynchronous RL for specialised coding-agent models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
model_app = typer.Typer(help="Create and inspect policy checkpoints.", no_args_is_help=True)
bench_app = typer.Typer(help="Measure fleetrl's parts (results as a table or --json).")
app.add_typer(model_app, name="model")
app.add_typer(bench_app, name="bench")
run_app = typer.Typer(help="Runs that live in an object store.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(run_app, name="run")


def fail(message: str) -> typer.Exit:
    """Print a one-line error and return the exit to raise (code 2: bad input)."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=2)


ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="TOML run configuration: the same tree as `fleetrl train`."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a key, e.g. --set trainer.lr=1e-4 (repeatable)."),
]


def run_config(config_file: Path | None, sets: list[str] | None, shortcuts: dict) -> RunConfig:
    """The run configuration tree every command reads: the TOML file (or the defaults),
    then `--set` overrides, then the command's own flags (`shortcuts`: dotted key -> value,
    None where the flag was not given). A bad key or value fails with a one-line error."""
    from fleetrl.config import ConfigError, load_config, parse_overrides, set_key

    try:
        overrides = parse_overrides(sets or [])
        for key, value in shortcuts.items():
            if value is not None:
                set_key(overrides, key, value)
        return load_config(config_file, overrides)
    except ConfigError as err:
        raise fail(str(err)) from None


@model_app.command("init")
def model_init(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the checkpoint into.")],
    moe: Annotated[bool, typer.Option("--moe", help="Qwen3-MoE variant instead of dense.")] = False,
    layers: Annotated[int, typer.Option(help="Decoder layers.")] = 4,
    hidden: Annotated[int, typer.Option(help="Hidden size.")] = 256,
    heads: Annotated[int, typer.Option(help="Attention heads (head_dim = hidden / heads).")] = 4,
    kv_heads: Annotated[int, typer.Option(help="Key/value heads (grouped-query attention).")] = 2,
    experts: Annotated[int, typer.Option(help="Experts per MoE layer (with --moe).")] = 8,
    seed: Annotated[int, typer.Option(help="Random seed of the weights.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite a non-empty directory.")
    ] = False,
) -> None:
    """Write a small random Qwen3 model with the project tokenizer, in Hugging Face layout."""
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise fail(f"{out_dir} is not empty (use --force to overwrite)")
    if hidden % heads or heads % kv_heads:
        raise fail("--hidden must be divisible by --heads, and --heads by --kv-heads")
    from fleetrl.model.checkpoint import init_model, save_pretrained
    from fleetrl.model.config import ModelConfig
    from fleetrl.model.tokenizer import bundled_tokenizer

    tokenizer = bundled_tokenizer()
    config = ModelConfig.small(
        tokenizer.vocab_size,
        hidden,
        layers,
        heads=heads,
        num_key_value_heads=kv_heads,
        num_experts=experts if moe else 0,
        moe_intermediate_size=hidden,
        eos_token_id=tokenizer.eos_id,
    )
    model = init_model(config, seed=seed)
    save_pretrained(model, out_dir)
    tokenizer.save(out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    typer.echo(f"wrote {config.model_type} model ({n_params / 1e6:.2f} M parameters) to {out_dir}")


@app.command()
def serve(
    checkpoint: Annotated[Path, typer.Argument(help="Hugging Face checkpoint directory.")],
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="FLEETRL_ADMIN_TOKEN",
            help="Bearer token for POST /update_weights; without one, updates are refused.",
        ),
    ] = None,
    max_batch_size: Annotated[int, typer.Option(help="Requests decoded together.")] = 64,
    max_model_len: Annotated[int, typer.Option(help="Context length (prompt + output).")] = 2048,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16 or auto.")] = "auto",
    threads: Annotated[int, typer.Option(help="torch CPU threads (0: torch's default).")] = 0,
) -> None:
    """Serve a checkpoint: OpenAI-compatible API, token-level /generate, weight updates."""
    if not (checkpoint / "config.json").is_file():
        raise fail(f"{checkpoint} is not a checkpoint directory (no config.json)")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise fail(f"--dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
    from fleetrl.inference.server import serve as run_server
    from fleetrl.model.checkpoint import CheckpointError

    try:
        run_server(
            checkpoint,
            host=host,
            port=port,
            admin_token=admin_token,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
            dtype=dtype,
            threads=threads,
        )
    except (CheckpointError, FileNotFoundError) as err:
        raise fail(str(err)) from None


@bench_app.command("engine")
def bench_engine(
    requests: Annotated[int, typer.Option(help="Requests in the workload.")] = 64,
    min_tokens: Annotated[int, typer.Option(help="Shortest max_tokens.")] = 16,
    max_tokens: Annotated[int, typer.Option(help="Longest max_tokens.")] = 256,
    batch_size: Annotated[int, typer.Option(help="Engine slots = transformers batch.")] = 64,
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 2,
    rounds: Annotated[int, typer.Option(help="Alternating timed runs; medians reported.")] = 3,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Useful tokens/s of the engine vs transformers `generate`, same weights, one run."""
    if not 1 <= min_tokens <= max_tokens:
        raise fail("need 1 <= --min-tokens <= --max-tokens")
    if min(requests, batch_size, threads, rounds) < 1:
        raise fail("--requests, --batch-size, --threads and --rounds must be >= 1")
    from fleetrl.inference.bench import EngineBenchConfig, run_engine_bench

    config = EngineBenchConfig(
        requests=requests,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        batch_size=batch_size,
        threads=threads,
        rounds=rounds,
        seed=seed,
    )
    result = run_engine_bench(config, progress=not as_json)
    print_figures(result, f"engine benchmark ({requests} requests, {threads} threads)", as_json)


@bench_app.command("sandbox")
def bench_sandbox(
    n: Annotated[int, typer.Option(help="Sandboxes timed for p50/p99.")] = 200,
    burst: Annotated[int, typer.Option(help="Sandboxes started at once.")] = 100,
    max_concurrent: Annotated[int, typer.Option(help="Cap of the peak-concurrency probe.")] = 256,
    pool_size: Annotated[int, typer.Option(help="Warm sandboxes in the pool phase.")] = 8,
    base_dir: Annotated[
        Path | None, typer.Option(help="Repository to sandbox (default: synthetic, 1,000 files).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Sandbox start-up latency (p50/p99), a burst of 100, peak concurrency, memory each."""
    if min(n, burst, max_concurrent, pool_size) < 1:
        raise fail("--n, --burst, --max-concurrent and --pool-size must be >= 1")
    from fleetrl.envs.sandbox import SandboxError
    from fleetrl.envs.sandbox.bench import run_sandbox_bench

    try:
        result = run_sandbox_bench(
            n=n,
            burst=burst,
            max_concurrent=max_concurrent,
            pool_size=pool_size,
            base_dir=str(base_dir) if base_dir else None,
            progress=not as_json,
        )
    except (SandboxError, FileNotFoundError, ValueError) as err:
        raise fail(str(err)) from None
    print_figures(result, f"sandbox benchmark ({n} sandboxes)", as_json)


@bench_app.command("weights")
def bench_weights(
    steps: Annotated[int, typer.Option(help="Optimizer steps (versions) per learning rate.")] = 8,
    lrs: Annotated[str, typer.Option(help="Comma-separated learning rates.")] = "1e-6,1e-5",
    synthetic_params: Annotated[
        int, typer.Option(help="Size of the synthetic state dict for throughput (0: skip).")
    ] = 1_000_000_000,
    zstd_level: Annotated[int, typer.Option(help="zstd level of the dense codec.")] = 3,
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 2,
    decode_batch: Annotated[int, typer.Option(help="Requests decoding during the swap.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    from_run: Annotated[
        str,
        typer.Option(
            "--from-run",
            help="Also measure the codec on a real run's versions: a run directory "
            "(runs/NAME) or its store URL.",
        ),
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Delta size vs the entropy floor, codec GB/s per core, engine pause on apply; with
    --from-run, the same on the versions a run actually published."""
    try:
        rates = [float(x) for x in lrs.split(",") if x.strip()]
    except ValueError:
        raise fail(f"--lrs must be comma-separated numbers, got {lrs!r}") from None
    if not rates or steps < 1 or synthetic_params < 0 or threads < 1 or decode_batch < 1:
        raise fail("need --lrs, --steps >= 1, --synthetic-params >= 0, --threads >= 1")
    from fleetrl.orchestrate.weights_bench import (
        WeightsBenchConfig,
        flat_figures,
        run_weights_bench,
    )

    config = WeightsBenchConfig(
        steps=steps,
        lrs=rates,
        synthetic_params=synthetic_params,
        zstd_level=zstd_level,
        threads=threads,
        decode_batch=decode_batch,
        seed=seed,
        from_run=from_run,
    )
    result = run_weights_bench(config, progress=not as_json)
    print_figures(result if as_json else flat_figures(result), "weight sync benchmark", as_json)


@bench_app.command("pipeline")
def bench_pipeline(
    steps: Annotated[int, typer.Option(help="Optimizer steps per mode.")] = 8,
    groups_per_step: Annotated[int, typer.Option(help="Groups per step (P).")] = 4,
    group_size: Annotated[int, typer.Option(help="Samples per group (G).")] = 8,
    max_staleness: Annotated[int, typer.Option(help="Staleness bound of the async run.")] = 2,
    model: Annotated[
        str | None, typer.Option(help="Checkpoint directory, or `base` \\[model.path].")
    ] = None,
    env_latency: Annotated[
        float,
        typer.Option(
            help="Mean simulated environment wait per tool turn in seconds (log-normal, "
            "p99 ~10x the median): the long tail of production episodes. 0: none."
        ),
    ] = 1.0,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Synchronous vs asynchronous RL loop on one workload: samples/s, idle, staleness.

    Both runs start from the run configuration tree (defaults, --config, --set); the
    benchmark's own flags then set the workload of each mode."""
    if min(steps, groups_per_step) < 2 or group_size < 2 or max_staleness < 1:
        raise fail(
            "need --steps >= 2, --groups-per-step >= 2, --group-size >= 2, --max-staleness >= 1"
        )
    if env_latency < 0:
        raise fail("need --env-latency >= 0")
    base = run_config(config_file, set_, {"model.path": model})
    from fleetrl.model.checkpoint import resolve_checkpoint
    from fleetrl.orchestrate.bench import PipelineWorkload, run_pipeline_bench

    if not (resolve_checkpoint(base.model.path) / "config.json").is_file():
        raise fail(f"{base.model.path} is not a checkpoint directory")
    workload = PipelineWorkload(steps, groups_per_step, group_size, max_staleness, env_latency)
    result = run_pipeline_bench(base, workload, progress=not as_json)
    flat = {f"{mode}_{k}": v for mode in ("sync", "async") for k, v in result[mode].items()}
    print_figures(
        result if as_json else flat | {"speedup": result["speedup"]}, "pipeline benchmark", as_json
    )


@bench_app.command("fleet")
def bench_fleet(
    steps: Annotated[int, typer.Option(help="Optimizer steps per leg.")] = 8,
    groups_per_step: Annotated[int, typer.Option(help="Groups per step (P).")] = 4,
    group_size: Annotated[int, typer.Option(help="Samples per group (G).")] = 4,
    max_staleness: Annotated[int, typer.Option(help="The trainer's staleness bound.")] = 2,
    link_mbps: Annotated[
        float, typer.Option(help="Each region's link from the run's store, megabits/s.")
    ] = 32.0,
    slow_latency: Annotated[
        float,
        typer.Option(help="The slow region's mean extra environment wait per tool turn, s."),
    ] = 2.0,
    model: Annotated[
        str | None, typer.Option(help="Checkpoint directory, or `base` \\[model.path].")
    ] = None,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A trainer and three regions (one slow, each behind a throttled link to its own
    weight store), with no region lost and with one killed mid-run.

    Two legs on one workload, as real processes over fresh local-folder stores: all three
    regions to the end, then region-1 killed (SIGKILL) halfway, once it has served a trained
    version, and not restarted. Measures cross-region bytes per version (per region and
    total, against the trainer's delta),
    the time from each publish until each region and until every region serves it (p50 /
    p95 over versions), the trainer's idle fraction, the staleness histogram, samples/s
    between the first and last optimizer step, and samples/s killed / none. Settings start
    from the run configuration tree (defaults, --config, --set); the flags set the
    workload."""
    if steps < 2 or groups_per_step < 1 or group_size < 2 or max_staleness < 0:
        raise fail("need --steps >= 2, --groups-per-step >= 1, --group-size >= 2")
    if link_mbps <= 0 or slow_latency < 0:
        raise fail("need --link-mbps > 0 and --slow-latency >= 0")
    base = run_config(config_file, set_, {"model.path": model})
    from fleetrl.model.checkpoint import resolve_checkpoint
    from fleetrl.orchestrate.fleet_bench import FleetWorkload, run_fleet_bench
    from fleetrl.orchestrate.local import RunFailed

    if not (resolve_checkpoint(base.model.path) / "config.json").is_file():
        raise fail(f"{base.model.path} is not a checkpoint directory")
    workload = FleetWorkload(
        steps, groups_per_step, group_size, max_staleness, 3, link_mbps, slow_latency
    )
    try:
        result = run_fleet_bench(base, workload, echo=not as_json)
    except RunFailed as err:
        raise fail(str(err)) from None
    flat = {
        f"{leg}_{k}": v
        for leg in ("none", "killed")
        for k, v in result[leg].items()
        if k != "regions"
    }
    for leg in ("none", "killed"):
        for region, figures in result[leg]["regions"].items():
            for key in ("hold_s_p50", "cross_region_bytes_per_version"):
                flat[f"{leg}_{region}_{key}"] = figures[key]
    print_figures(
        result if as_json else flat | {"killed_vs_none": result["killed_vs_none"]},
        "fleet benchmark",
        as_json,
    )


@bench_app.command("learning")
def bench_learning(
    base: Annotated[
        str | None,
        typer.Option(help="SFT checkpoint to start from, or `base` \\[model.path]."),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Run name: writes runs/NAME (default learning-TIME).")
    ] = None,
    max_tasks: Annotated[
        int | None,
        typer.Option(help="Evaluate on each split's first N tasks, 0: all \\[eval.max_tasks]."),
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("runs"),
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """From one SFT-plateaued base: RL at the run configuration's budget (`fleetrl train`)
    against SFT continued on the same demonstrations for RL's wall time.

    Base, RL and SFT-more are each evaluated on heldout and heldout-templates at their
    temperature chosen on val (pass@1 with CI, greedy, pass@8, recovery); the goals, the
    base's SFT curves and the budgets go with them into runs/NAME/learning.json."""
    import time

    config = run_config(config_file, set_, {"model.path": base, "eval.max_tasks": max_tasks})
    run_dir = runs_dir / (name or f"learning-{time.strftime('%Y%m%d-%H%M%S')}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise fail(f"{run_dir} is not empty; choose another --name")
    from fleetrl.model.checkpoint import resolve_checkpoint
    from fleetrl.orchestrate.learning_bench import (
        LearningBenchError,
        learning_rows,
        run_learning_bench,
    )
    from fleetrl.orchestrate.local import RunFailed
    from fleetrl.orchestrate.sft import SftError

    checkpoint = resolve_checkpoint(config.model.path)
    if not (checkpoint / "config.json").is_file():
        raise fail(f"{config.model.path} is not a checkpoint directory (no config.json)")
    from rich.console import Console

    console = Console()
    echo = None if as_json else lambda line: console.print(line, markup=False, highlight=False)
    try:
        result = run_learning_bench(config, checkpoint, run_dir, echo)
    except (LearningBenchError, RunFailed, SftError) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"learning benchmark ({run_dir / 'learning.json'})")
    for column in ("model", "split", "pass@1 [95% CI] @T", "greedy", "pass@8"):
        table.add_column(column, justify="left" if column in ("model", "split") else "right")
    for row in learning_rows(result):
        table.add_row(*row)
    console.print(table)
    budget = result["budget"]
    typer.echo(
        f"budget: RL {budget['rl_wall_s']:.0f} s, SFT-more {budget['sft_more_wall_s']:.0f} s "
        f"({budget['sft_more_steps']} steps); all goals met: {result['goals']['all_met']}"
    )


def print_figures(result: dict, title: str, as_json: bool) -> None:
    """A benchmark's figures as JSON or as a two-column table."""
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    Console().print(table)


@app.command()
def train(
    config_file: Annotated[
        Path | None, typer.Argument(help="TOML run configuration (default: built-in).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name: writes runs/NAME.")] = None,
    steps: Annotated[int | None, typer.Option(help="Override trainer.steps.")] = None,
    sync: Annotated[
        bool, typer.Option("--sync", help="Synchronous baseline (max_staleness 0).")
    ] = False,
    regions: Annotated[int, typer.Option(help="Rollout region processes.")] = 1,
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
    if regions < 1:
        raise fail("--regions must be >= 1")
    run_dir = runs_dir / config.name
    if (run_dir / "final").exists():
        raise fail(f"{run_dir} holds a finished run; choose another --name")
    from fleetrl.model.checkpoint import resolve_checkpoint

    if launcher not in ("local", "ray"):
        raise fail(f"--launcher must be local or ray, not {launcher!r}")
    from fleetrl.orchestrate.local import RunFailed, run_local

    if not (resolve_checkpoint(config.model.path) / "config.json").is_file():
        raise fail(f"model.path {config.model.path!r} is not a checkpoint directory")
    try:
        if launcher == "local":
            summary = run_local(config, run_dir, regions=regions)
        else:
            summary = _train_on_ray(config, run_dir, regions)
    except RunFailed as err:
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


@app.command()
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
        typer.Option(help="Start from this checkpoint and its tokenizer \\[sft.init]."),
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
        typer.Option(help="Demonstrate only the first N training tasks, 0: all \\[sft.max_tasks]."),
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
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise fail(f"{out} is not an empty directory (use --force to write into it)")
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


StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        help="The run's object store: a folder or s3://bucket/prefix (credentials and "
        "endpoint from the AWS_* variables).",
    ),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option(help="Local work folder (default: runs/NAME, or runs/NAME/regions/REGION)."),
]


@run_app.command("create")
def run_create(
    config_file: Annotated[
        Path | None, typer.Argument(help="TOML run configuration (default: built-in).")
    ] = None,
    store: StoreOption = "",
    set_: SetOption = None,
) -> None:
    """Write a run into a store: config, base checkpoint, tasks, base weights as version 0.

    Then `fleetrl trainer --store URL` and `fleetrl region --store URL --name NAME`, on
    any machines that reach the store, run it."""
    if not store:
        raise fail("--store is required (a folder or s3://bucket/prefix)")
    config = run_config(config_file, set_, {})
    from fleetrl.model.checkpoint import resolve_checkpoint
    from fleetrl.orchestrate.run import RunExists, create_run

    if not (resolve_checkpoint(config.model.path) / "config.json").is_file():
        raise fail(f"model.path {config.model.path!r} is not a checkpoint directory")
    try:
        create_run(config, store)
    except (RunExists, OSError) as err:
        raise fail(str(err)) from None
    typer.echo(f"created run {config.name!r} in {store}")


@app.command("trainer")
def trainer_command(store: StoreOption = "", workdir: WorkdirOption = None) -> None:
    """The trainer of a run in a store; exits 0 when the run's steps are done.

    Exit code 3: a newer trainer of the same run has started (this one was fenced off)."""
    if not store:
        raise fail("--store is required")
    from fleetrl.orchestrate.roles import trainer_role
    from fleetrl.store.run import RunNotFound

    try:
        code = trainer_role(store, workdir)
    except RunNotFound as err:
        raise fail(str(err)) from None
    raise typer.Exit(code)


@app.command("region")
def region_command(
    store: StoreOption = "",
    name: Annotated[str, typer.Option(help="Region name, unique in the run.")] = "",
    workdir: WorkdirOption = None,
    regional_store: Annotated[
        str | None,
        typer.Option(
            help="The region's own weight store (e.g. a bucket in its region): a relay "
            "copies each version into it once and the engine follows it there."
        ),
    ] = None,
    link_mbps: Annotated[
        float | None,
        typer.Option(
            help="Simulate a cross-region link of this many megabits/s between the run's "
            "store and --regional-store: the relay's copy of each version takes its "
            "size / bandwidth (benchmarks)."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override this region's own rollout settings, e.g. --set "
            "rollout.env_latency_s=2 (repeatable; rollout.* only).",
        ),
    ] = None,
) -> None:
    """A rollout region of a run in a store: exits 0 after the trainer's stop signal."""
    if not store or not name:
        raise fail("--store and --name are required")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise fail(f"--name {name!r}: use letters, digits, '-' and '_'")
    if link_mbps is not None and (link_mbps <= 0 or not regional_store):
        raise fail("--link-mbps needs --regional-store and a bandwidth > 0")
    from fleetrl.config import ConfigError, parse_overrides
    from fleetrl.orchestrate.roles import region_role
    from fleetrl.store.run import RunNotFound

    link = link_mbps * 1e6 / 8 if link_mbps is not None else None
    try:
        overrides = parse_overrides(set_ or [])
        code = region_role(store, name, workdir, regional_store, overrides, link)
    except (RunNotFound, ConfigError) as err:
        raise fail(str(err)) from None
    raise typer.Exit(code)


@app.command("status")
def status_command(
    store: StoreOption = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Where a run stands: the trainer's version and step, each region's version, groups
    in flight, last heartbeat and staleness; read from the store alone."""
    if not store:
        raise fail("--store is required")
    from fleetrl.orchestrate.status import as_json as status_json
    from fleetrl.orchestrate.status import run_status
    from fleetrl.store.objectstore import open_store
    from fleetrl.store.run import read_config_text

    opened = open_store(store)
    try:
        read_config_text(opened)
    except LookupError as err:
        raise fail(str(err)) from None
    status = run_status(opened)
    if as_json:
        typer.echo(json.dumps(status_json(status), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    waiting = f", waiting {status.waiting_s:.0f} s" if status.waiting_s else ""
    typer.echo(
        f"trainer: version {status.trainer_version} (latest published "
        f"{status.latest_version}), step {status.step}, incarnation {status.incarnation}, "
        f"{status.trained_samples} samples trained, {status.dropped_samples} dropped{waiting}"
        + (" — run finished" if status.stopped else "")
    )
    table = Table(title="regions")
    for column in ("region", "held", "staleness", "in flight", "handed in", "granted"):
        table.add_column(column, justify="right")
    table.add_column("failed", justify="right")
    table.add_column("heartbeat", justify="right")
    for r in status.regions:
        table.add_row(
            r.name,
            str(r.held),
            str(r.staleness),
            str(r.in_flight),
            str(r.submitted),
            str(r.granted),
            str(r.failed_episodes),
            f"{r.heartbeat_age_s:.0f} s ago",
        )
    Console().print(table)


def _train_on_ray(config: RunConfig, run_dir: Path, regions: int) -> dict:
    """`fleetrl train --launcher ray`: the run created in its store, roles as Ray actors,
    then the same evaluation and report as the local launcher."""
    from fleetrl.orchestrate.local import evaluate_and_report, prepare_run
    from fleetrl.orchestrate.ray_launcher import RayMissing, run_ray

    prepare_run(config, run_dir)
    try:
        run_ray(config, run_dir, regions=regions)
    except RayMissing as err:
        raise fail(str(err)) from None
    return evaluate_and_report(config, run_dir)


@app.command("eval")
def eval_command(
    checkpoint: Annotated[str, typer.Argument(help="Checkpoint directory, or `base`.")] = "base",
    split: Annotated[str | None, typer.Option(help="Split to report \\[eval.split].")] = None,
    best_temperature: Annotated[
        bool,
        typer.Option(
            "--best-temperature/--no-best-temperature",
            help="Choose the temperature on eval.val_split first (eval.temperatures), then "
            "report the split at it; off: at --temperature.",
        ),
    ] = False,
    suite: Annotated[str | None, typer.Option(help="Bundled task suite \\[tasks.suite].")] = None,
    tasks: Annotated[
        Path | None, typer.Option(help="A generated task folder instead \\[tasks.tasks_dir].")
    ] = None,
    samples: Annotated[
        int | None, typer.Option(min=1, help="Samples per task on the split \\[eval.samples].")
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option(min=1, help="Or: at least N episodes on the split, tasks x samples."),
    ] = None,
    max_tasks: Annotated[
        int | None,
        typer.Option(help="Use only each split's first N tasks, 0: all \\[eval.max_tasks]."),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature, 0: greedy \\[rollout.temperature].")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed \\[trainer.seed].")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads \\[eval.threads].")] = None,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """pass@1 of a checkpoint on a task split at one temperature, with a 95% bootstrap
    interval over tasks; also greedy pass@1, pass@8 and recovery from failed edits.

    Settings come from the run configuration tree (defaults, --config, --set); each flag
    below overrides the key in brackets after it. The protocol is in docs/evaluation.md."""
    shortcuts = {
        "tasks.suite": suite,
        "tasks.tasks_dir": str(tasks) if tasks else None,
        "eval.samples": samples,
        "eval.max_tasks": max_tasks,
        "rollout.temperature": temperature,
        "trainer.seed": seed,
        "eval.threads": threads,
    }
    config = run_config(config_file, set_, shortcuts)
    split = split or config.eval.split
    if best_temperature and temperature is not None:
        raise fail("--best-temperature chooses the temperature: drop --temperature")
    if best_temperature and split == config.eval.val_split:
        raise fail(
            f"--best-temperature chooses the temperature on {split!r} (eval.val_split): "
            "report another --split"
        )
    if samples is not None and episodes is not None:
        raise fail("give --samples or --episodes, not both")
    import math
    import time

    from fleetrl.envs.records import TaskError
    from fleetrl.model.checkpoint import CheckpointError, resolve_checkpoint
    from fleetrl.rollout.evaluate import EvalError, describe, protocol_report, split_tasks

    path = resolve_checkpoint(checkpoint)
    if not (path / "config.json").is_file():
        raise fail(f"{checkpoint} is not a checkpoint directory (no config.json)")
    import torch

    torch.set_num_threads(config.eval.threads)
    start = time.monotonic()
    try:
        per_task = math.ceil(episodes / len(split_tasks(config, split))) if episodes else None
        chosen = None if best_temperature else config.rollout.temperature
        document = protocol_report(path, config, split, chosen, not as_json, per_task)
    except (TaskError, CheckpointError, EvalError, FileNotFoundError) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(document, indent=2))
        return
    for line in describe(document):
        typer.echo(line)
    typer.echo(f"({time.monotonic() - start:.0f} s)")


@app.command()
def verify(
    task_id: Annotated[str, typer.Argument(help="Task instance id.")],
    workspace: Annotated[Path, typer.Option(help="The agent's workspace directory.")],
    suite: Annotated[str | None, typer.Option(help="Bundled suite (default: any).")] = None,
    tasks: Annotated[Path | None, typer.Option(help="A generated task folder.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds the hidden tests may run.")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Grade a workspace: its non-test changes, hidden tests, anti-cheat flags -> reward."""
    from fleetrl.envs.records import TaskError
    from fleetrl.envs.suites import get_task
    from fleetrl.envs.verifier import verify_workspace

    try:
        task = get_task(task_id, suite=suite, tasks_dir=tasks)
        result = verify_workspace(task, workspace, timeout=timeout)
    except (TaskError, FileNotFoundError) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    for test, outcome in result.tests.items():
        typer.echo(f"{outcome:>8}  {test}")
    flags = ", ".join(result.flags) or "none"
    typer.echo(f"reward {result.reward:g}  (flags: {flags}; {result.duration_s:.2f} s)")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (runs/NAME).")],
) -> None:
    """Write RUN_DIR/report.html: plots of reward, staleness, sync, mismatch, throughput,
    and each region's own metrics from the run's store (wherever the regions ran)."""
    if not run_dir.is_dir():
        raise fail(f"{run_dir} is not a directory")
    from fleetrl.observe import write_report
    from fleetrl.store.region_metrics import read_run_region_metrics

    typer.echo(f"wrote {write_report(run_dir, read_run_region_metrics(run_dir))}")


def main() -> None:
    """Entry point for `python -m fleetrl.cli`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":
    main()
