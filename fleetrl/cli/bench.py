"""`fleetrl bench …`: measure fleetrl's parts, each as a table or --json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config

bench_app = typer.Typer(
    help="Measure fleetrl's parts (results as a table or --json).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@bench_app.command("engine")
def bench_engine(
    requests: Annotated[int, typer.Option(help="Requests in the workload.")] = 64,
    min_tokens: Annotated[int, typer.Option(help="Shortest max_tokens.")] = 16,
    max_tokens: Annotated[int, typer.Option(help="Longest max_tokens.")] = 256,
    batch_size: Annotated[int, typer.Option(help="Engine slots = transformers batch.")] = 64,
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 2,
    rounds: Annotated[int, typer.Option(help="Alternating timed runs; medians reported.")] = 3,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
    vllm: Annotated[
        bool,
        typer.Option(
            "--vllm", help="Also time vLLM (the vllm extra) on the same weights and workload."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Useful tokens/s of the engine vs transformers `generate` (and vLLM with --vllm).

    Same weights and workload, the rounds alternating in one run; per side request
    latencies (p50/p99) and the pause of a weight swap made halfway."""
    if not 1 <= min_tokens <= max_tokens:
        raise fail("need 1 <= --min-tokens <= --max-tokens")
    if min(requests, batch_size, threads, rounds) < 1:
        raise fail("--requests, --batch-size, --threads and --rounds must be >= 1")
    from fleetrl.bench.engine import EngineBenchConfig, run_engine_bench
    from fleetrl.inference.vllm_engine import vllm_available

    if vllm and not vllm_available():
        raise fail("--vllm needs vLLM: pip install 'fleetrl[vllm]' (docs/engines.md)")

    config = EngineBenchConfig(
        requests=requests,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        batch_size=batch_size,
        threads=threads,
        rounds=rounds,
        seed=seed,
        vllm=vllm,
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
    if base_dir is not None and not base_dir.is_dir():
        raise fail(f"--base-dir: {base_dir} is not a directory")
    from fleetrl.bench.sandbox import run_sandbox_bench
    from fleetrl.envs.sandbox import SandboxError

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
    """Weight-delta size against the entropy floor, codec speed, engine pause on apply.

    With --from-run, the same on the versions a run actually published."""
    try:
        rates = [float(x) for x in lrs.split(",") if x.strip()]
    except ValueError:
        raise fail(f"--lrs must be comma-separated numbers, got {lrs!r}") from None
    if not rates or not all(math.isfinite(rate) and rate > 0 for rate in rates):
        raise fail(f"--lrs must be learning rates > 0, got {lrs!r}")
    for option, value, least in (
        ("--steps", steps, 1),
        ("--synthetic-params", synthetic_params, 0),
        ("--threads", threads, 1),
        ("--decode-batch", decode_batch, 1),
    ):
        if value < least:
            raise fail(f"{option} must be >= {least}, got {value}")
    if not 1 <= zstd_level <= 22:
        raise fail(f"--zstd-level must be in 1..22, got {zstd_level}")
    if from_run:
        check_published_run(from_run)
    from fleetrl.bench.weights import (
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


@bench_app.command("trainer")
def bench_trainer(
    config_file: ConfigOption = None,
    layouts: Annotated[
        str,
        typer.Option(
            help="Comma-separated RANKSxTHREADS layouts of the trainer, measured side by "
            "side (2x1: two processes of one torch thread each)."
        ),
    ] = "1x1,1x2,2x1",
    steps: Annotated[int, typer.Option(help="Measured steps per layout (after one warm-up).")] = 3,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt tokens per episode.")] = 384,
    completion_tokens: Annotated[
        int, typer.Option(help="Sampled (trained) tokens per episode.")
    ] = 256,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """The trainer at 1 and N ranks on one batch: step, publish, memory per rank.

    FSDP2 over gloo, on the run configuration's model and global batch (groups_per_step x
    group_size episodes): step and publish time, peak memory and model state per rank,
    bytes per version, each layout (RANKSxTHREADS) side by side."""
    config = run_config(config_file, set_, {})
    from fleetrl.bench.trainer import flat_figures, parse_layouts, run_trainer_bench

    try:
        chosen = parse_layouts(layouts)
    except ValueError as err:
        raise fail(f"--layouts: {err}") from None
    for option, value in (
        ("--steps", steps),
        ("--prompt-tokens", prompt_tokens),
        ("--completion-tokens", completion_tokens),
    ):
        if value < 1:
            raise fail(f"{option} must be >= 1, got {value}")
    tokens = prompt_tokens + completion_tokens
    if tokens > config.harness.max_context:
        raise fail(f"an episode of {tokens} tokens exceeds harness.max_context")
    from fleetrl.model.checkpoint import resolve_checkpoint

    if not (resolve_checkpoint(config.model.path) / "config.json").is_file():
        raise fail(f"model.path {config.model.path!r} is not a checkpoint directory")
    result = run_trainer_bench(config, chosen, steps, prompt_tokens, completion_tokens)
    print_figures(result if as_json else flat_figures(result), "trainer benchmark", as_json)


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
    from fleetrl.bench.pipeline import PipelineWorkload, run_pipeline_bench
    from fleetrl.model.checkpoint import resolve_checkpoint

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
    """A trainer and three regions over throttled links, with none lost and one killed.

    One region is slow; each sits behind a throttled link to its own weight store.

    Two legs on one workload, as real processes over fresh local-folder stores: all three
    regions to the end, then region-1 killed (SIGKILL) halfway, once it has served a trained
    version, and not restarted. Measures cross-region bytes per version (per region and
    total, against the trainer's delta),
    the time from each publish until each region and until every region serves it (p50 /
    p95 over versions), the trainer's idle fraction, the staleness histogram, samples/s
    between the first and last optimizer step, and samples/s killed / none. Settings start
    from the run configuration tree (defaults, --config, --set); the flags set the
    workload."""
    if steps < 2 or groups_per_step < 1 or group_size < 2:
        raise fail("need --steps >= 2, --groups-per-step >= 1, --group-size >= 2")
    if max_staleness < 0:
        raise fail(f"--max-staleness must be >= 0, got {max_staleness}")
    if link_mbps <= 0 or slow_latency < 0:
        raise fail("need --link-mbps > 0 and --slow-latency >= 0")
    base = run_config(config_file, set_, {"model.path": model})
    from fleetrl.bench.fleet import FleetWorkload, run_fleet_bench
    from fleetrl.model.checkpoint import resolve_checkpoint
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
    """RL against equal-compute SFT from one SFT-plateaued base, on held-out and templates.

    RL runs at the run configuration's budget (`fleetrl train`); SFT continues on the same
    demonstrations for RL's wall time. The configuration defaults to the `demo` preset:
    what `make demo` runs.

    Base, RL and SFT-more are each evaluated on heldout and heldout-templates at their
    temperature chosen on val (pass@1 with CI, greedy, pass@8, recovery); the goals, the
    base's SFT curves and the budgets go with them into runs/NAME/learning.json."""
    import re
    import time

    from fleetrl.config import RUN_NAME

    if name is not None and not re.match(RUN_NAME, name):
        raise fail(f"--name {name!r}: use letters, digits, '.', '-' and '_' (one folder)")
    config_file = config_file or Path("demo")
    config = run_config(config_file, set_, {"model.path": base, "eval.max_tasks": max_tasks})
    run_dir = runs_dir / (name or f"learning-{time.strftime('%Y%m%d-%H%M%S')}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise fail(f"{run_dir} is not empty; choose another --name")
    from fleetrl.bench.learning import (
        LearningBenchError,
        learning_rows,
        run_learning_bench,
    )
    from fleetrl.model.checkpoint import resolve_checkpoint
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
    met_on = result["goals"]["met_on"]
    typer.echo(
        f"budget: RL {budget['rl_wall_s']:.0f} s, SFT-more {budget['sft_more_wall_s']:.0f} s "
        f"({budget['sft_more_steps']} steps); all goals met on held-out: "
        f"{met_on['heldout']}, on held-out-templates: {met_on['heldout_templates']}"
    )


@bench_app.command("record")
def bench_record(
    model: Annotated[
        str | None,
        typer.Option(
            help="Checkpoint served: a folder, or a shipped name (default: base-slip; with "
            "--harness mini-swe-agent, the run configuration's model.path)."
        ),
    ] = None,
    sessions: Annotated[int, typer.Option(help="Concurrent chat sessions per round.")] = 16,
    turns: Annotated[int, typer.Option(help="Chat requests per session.")] = 4,
    rounds: Annotated[int, typer.Option(help="Timed rounds per server, alternating.")] = 3,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per reply.")] = 64,
    rewrite_share: Annotated[
        float,
        typer.Option(
            help="Share of sessions whose harness edits its history halfway (the recorder "
            "must start a new segment and count it), 0..1."
        ),
    ] = 0.0,
    temperature: Annotated[
        float,
        typer.Option(
            help="Sampling temperature of the replies; 0 (greedy) gives both servers the "
            "same replies, so the latencies compare equal work."
        ),
    ] = 0.0,
    threads: Annotated[
        int,
        typer.Option(
            help="torch CPU threads of each server (more than the free cores makes both "
            "servers' latencies measure thread contention)."
        ),
    ] = 1,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    harness: Annotated[
        str,
        typer.Option(
            help="`scripted`: the timed workload above. `mini-swe-agent`: --tasks real "
            "mini-swe-agent episodes (the mswe extra) through one recording server, "
            "--sessions at once: bytes per session and rewrites, no latency."
        ),
    ] = "scripted",
    tasks: Annotated[
        int, typer.Option(help="With --harness mini-swe-agent: episodes, one per val task.")
    ] = 16,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Latency of `fleetrl serve` with and without --record, and the bytes it records.

    Two `fleetrl serve` processes on one checkpoint, one with --record, one without, up
    together; concurrent multi-turn sessions (the official openai client, the whole chat
    sent back each turn with `user` set, tool results after each reply, greedy replies by
    default) run against each in alternating rounds. Reports p50/p99 request latency per
    server and record/plain ratios from this one run; bytes per recorded session (GET
    /v1/sessions/ID and as the trajectory channel stores it); and the share of sessions
    whose history the harness
    rewrote, from the recorder's counters (--rewrite-share sets how many do).

    With --harness mini-swe-agent, real mini-swe-agent episodes on the run configuration's
    val tasks (--config, --set: the harness budgets) instead: bytes per session and the
    share of sessions it rewrote (it drops replies its parser refuses from its history)."""
    for option, value in (
        ("--sessions", sessions),
        ("--turns", turns),
        ("--rounds", rounds),
        ("--max-tokens", max_tokens),
        ("--threads", threads),
    ):
        if value < 1:
            raise fail(f"{option} must be >= 1, got {value}")
    if not 0 <= rewrite_share <= 1:
        raise fail(f"--rewrite-share must be in 0..1, got {rewrite_share}")
    if not 0 <= temperature <= 10:
        raise fail(f"--temperature must be in 0..10, got {temperature}")
    if rewrite_share > 0 and turns < 2:
        raise fail("--rewrite-share needs --turns >= 2 (history is edited before a later turn)")
    if harness == "mini-swe-agent":
        bench_record_mswe(model, tasks, sessions, threads, seed, config_file, set_, as_json)
        return
    if harness != "scripted":
        raise fail(f"--harness must be scripted or mini-swe-agent, not {harness!r}")
    if config_file is not None or set_:
        raise fail("--config and --set go with --harness mini-swe-agent (its harness budgets)")
    model = model or "base-slip"
    check_checkpoint(model)
    from fleetrl.bench.record import RecordBenchConfig, RecordBenchError, run_record_bench

    config = RecordBenchConfig(
        model=model,
        sessions=sessions,
        turns=turns,
        rounds=rounds,
        max_tokens=max_tokens,
        rewrite_share=rewrite_share,
        temperature=temperature,
        threads=threads,
        seed=seed,
    )
    try:
        result = run_record_bench(config, progress=not as_json)
    except RecordBenchError as err:
        raise fail(str(err)) from None
    title = f"recording benchmark ({sessions} sessions x {turns} turns, {rounds} rounds)"
    print_figures(result, title, as_json)


def check_checkpoint(model: str) -> None:
    """Fail unless `model` (--model, or the configuration's model.path) is a checkpoint."""
    from fleetrl.model.checkpoint import resolve_checkpoint

    if not (resolve_checkpoint(model) / "config.json").is_file():
        raise fail(f"model {model}: not a checkpoint directory (no config.json); pass --model")


def bench_record_mswe(
    model: str | None,
    tasks: int,
    sessions: int,
    threads: int,
    seed: int,
    config_file: Path | None,
    sets: list[str] | None,
    as_json: bool,
) -> None:
    """`fleetrl bench record --harness mini-swe-agent`: the `mini-swe-agent` preset unless
    --config names another configuration."""
    if tasks < 1:
        raise fail(f"--tasks must be >= 1, got {tasks}")
    sets = [*(sets or []), "rollout.harness=mini-swe-agent"]
    run = run_config(config_file or Path("mini-swe-agent"), sets, {"model.path": model})
    model = str(run.model.path)
    check_checkpoint(model)
    try:
        from fleetrl.bench.record_mswe import MsweRecordConfig, run_mswe_record_bench
    except ImportError as err:
        raise fail(
            f"mini-swe-agent is not installed (pip install 'fleetrl[mswe]'): {err}"
        ) from None
    from fleetrl.bench.record import RecordBenchError
    from fleetrl.envs.sandbox import SandboxError
    from fleetrl.envs.tasks.records import TaskError

    config = MsweRecordConfig(model, tasks, min(sessions, tasks), threads=threads, seed=seed)
    try:
        result = run_mswe_record_bench(config, run, progress=not as_json)
    except (RecordBenchError, SandboxError, TaskError) as err:
        raise fail(str(err)) from None
    print_figures(result, f"recording in mini-swe-agent ({tasks} episodes)", as_json)


def check_published_run(source: str) -> None:
    """Fail unless `source` (--from-run) holds two or more published versions (the codec is
    measured between consecutive ones), read the way the weights benchmark reads it: a run
    directory's `store` folder, else a store URL or folder. Checked before the benchmark so
    that a wrong path does not cost a whole run first."""
    from fleetrl.bench.weights import published_versions
    from fleetrl.store.errors import WeightStoreError
    from fleetrl.store.weights import WeightStore

    run_store = Path(source) / "store"
    if run_store.is_dir():
        url = str(run_store)
    elif "://" in source or Path(source).is_dir():
        url = source
    else:
        raise fail(f"--from-run: {source} is not a run directory (runs/NAME) or a store URL")
    try:
        published = published_versions(WeightStore(url))
    except (OSError, WeightStoreError) as err:
        raise fail(f"--from-run: {err}") from None
    if not published:
        raise fail(f"--from-run: {url} holds no published versions")
    if len(published) == 1:
        raise fail(
            f"--from-run: {url} holds one published version (v{published[0]}); the codec is "
            "measured between two consecutive versions"
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
        shown = "n/a" if value is None else str(value)
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else shown)
    Console().print(table)
