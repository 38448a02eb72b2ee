"""`fleetrl bench realtime`: one online run of real processes served to simulated users,
measured (`fleetrl.bench.realtime`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config

PRESET = Path("demo")  # the shipped preset the benchmark reads by default


def bench_realtime_command(
    sessions: Annotated[int, typer.Option(help="Simulated users, one session each.")] = 200,
    rate: Annotated[
        float, typer.Option(help="Users' mean arrival rate per second (Poisson arrivals).")
    ] = 0.2,
    concurrency: Annotated[int, typer.Option(help="Users working at once, at most.")] = 4,
    heldout_tasks: Annotated[
        int, typer.Option(help="Held-out pass@1 on the first N tasks of eval.split.")
    ] = 100,
    latency_requests: Annotated[
        int, typer.Option(help="Chat requests in each latency phase (no swap, swaps).")
    ] = 40,
    faults: Annotated[
        bool,
        typer.Option(
            "--faults",
            help="Kill the trainer a third into the users' arrivals and the serving process "
            "two thirds in (SIGKILL), each started again in its folder; nothing may be lost.",
        ),
    ] = False,
    task_pool: Annotated[
        int | None,
        typer.Option(
            help="Users go through this many train tasks in rounds, each round in a new "
            "order (a population whose tasks recur); the served reward is then binned by "
            "round and compared task by task. SESSIONS must be a multiple of it, two rounds "
            "at least. Default: each user draws any train task.",
        ),
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where the run folder is made.")] = Path("runs"),
    name: Annotated[
        str, typer.Option(help="The run's name and folder (RUNS_DIR/NAME, a new one).")
    ] = "realtime",
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Real-time RL end to end: served reward, held-out gain, latency during swaps, ledger.

    One online run (default: the `demo` preset, turned to trainer.mode = online, its steps
    set to train every session) as real processes: `fleetrl trainer`, `fleetrl gate` and
    `fleetrl serve` on a free port, logging into RUNS_DIR/NAME/logs/. SESSIONS simulated
    users arrive at RATE per second on the train tasks, each working one task through the
    micro harness against the served model and sending the verifier's verdict as feedback.
    Once the trainer has trained the sessions and the gate judged its last version:

    - reward of the sessions over time (8 bins in arrival order, or one per round through
    --task-pool) and the versions that answered each, the last bin's less the first's with
    its interval;
    - serving latency p50/p99 of short chat requests, with no swap and while the served
    version toggles every second, their p99 ratio and failed requests (goals: none failed,
    ratio <= 1.5);
    - greedy held-out pass@1 of the first (0) and last served versions with 95% intervals,
    and their paired gain;
    - sessions per version, feedback age and staleness at training, the gate's verdicts;
    - where each answered session went (trained, skipped, dropped as too stale, pending,
    unread) and how many were lost: none should be, also with --faults.

    Settings start from the run configuration tree (--config, --set); the flags set the
    workload. The figures' meanings are in `fleetrl/bench/realtime.py`."""
    for option, value, least in (
        ("--sessions", sessions, 1),
        ("--concurrency", concurrency, 1),
        ("--heldout-tasks", heldout_tasks, 1),
        ("--latency-requests", latency_requests, 1),
    ):
        if value < least:
            raise fail(f"{option} must be >= {least}, got {value}")
    if not rate > 0:
        raise fail(f"--rate must be > 0 users per second, got {rate}")
    if task_pool is not None and (
        task_pool < 1 or sessions % task_pool or sessions < 2 * task_pool
    ):
        raise fail(
            f"--task-pool {task_pool}: --sessions ({sessions}) must be a multiple of it, "
            "two rounds through the pool at least"
        )
    from fleetrl.config import RUN_NAME

    if not re.fullmatch(RUN_NAME, name):
        raise fail(f"--name {name!r}: use letters, digits, '.', '-' and '_' (one folder name)")
    run_dir = runs_dir / name
    if run_dir.exists():
        raise fail(f"--name {name}: {run_dir} exists already (choose another --name or --runs-dir)")
    base = run_config(config_file if config_file is not None else PRESET, set_, {})
    from fleetrl.bench.realtime import RealtimeBenchError, RealtimeWorkload, run_realtime_bench
    from fleetrl.config import ConfigError
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.model.checkpoint import CheckpointError, resolve_checkpoint

    if not (resolve_checkpoint(base.model.path) / "config.json").is_file():
        raise fail(f"model.path {base.model.path} is not a checkpoint directory")
    workload = RealtimeWorkload(
        sessions, rate, concurrency, heldout_tasks, latency_requests, faults, task_pool
    )
    echo = None if as_json else lambda line: typer.echo(line, err=True)
    try:
        document = run_realtime_bench(base, workload, run_dir, echo)
    except (RealtimeBenchError, ConfigError, TaskError, CheckpointError) as err:
        raise fail(str(err)) from None
    from fleetrl.cli.bench import print_figures

    if as_json:
        print_figures(document, "", as_json=True)
        return
    verdicts = document.pop("verdicts")
    flat = flatten(document) | {
        "verdicts": ", ".join(
            f"v{v['version']} {'passed' if v['passed'] else 'rejected'}" for v in verdicts
        )
    }
    print_figures(flat, f"real-time RL: {run_dir}", as_json=False)


def flatten(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested document as one row per leaf: dotted keys, list items by index (lists of
    plain values kept whole, as text)."""
    rows: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows |= flatten(value, f"{name}.")
        elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
            rows |= flatten(dict(enumerate(value)), f"{name}.")
        elif isinstance(value, list):
            rows[name] = ", ".join(map(str, value))
        else:
            rows[name] = value
    return rows
