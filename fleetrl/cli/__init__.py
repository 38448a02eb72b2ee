"""The `fleetrl` command line. Each command parses its options, then imports what it needs.

Errors a user can cause (a missing checkpoint, a bad option) end with a one-line message
and exit code 2, never a traceback.

The commands live in one module per group: `model` (model init, serve), `train` (train,
sft), `evaluate` (eval, verify), `runs` (run create, trainer, region, status, report),
`realtime` (gate, rollback) and `bench`, `numerics`, `horizon` and `realtime_bench`
(bench …); `common` holds what they share. Below is the whole command set.
"""

from __future__ import annotations

import os

import typer

from fleetrl.cli import (
    bench,
    evaluate,
    horizon,
    model,
    numerics,
    realtime,
    realtime_bench,
    runs,
    train,
)
from fleetrl.cli.tasks import tasks_app

app = typer.Typer(
    help="fleetrl: asynchronous RL for specialised coding-agent models.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(model.model_app, name="model")
bench.bench_app.command("mismatch")(numerics.bench_mismatch_command)
bench.bench_app.command("horizon")(horizon.bench_horizon_command)
bench.bench_app.command("realtime")(realtime_bench.bench_realtime_command)
app.add_typer(bench.bench_app, name="bench")
app.add_typer(tasks_app, name="tasks")
app.add_typer(runs.run_app, name="run")
app.command()(model.serve)
app.command()(train.train)
app.command()(train.sft)
app.command("trainer")(runs.trainer_command)
app.command("region")(runs.region_command)
app.command("status")(runs.status_command)
app.command("gate")(realtime.gate_command)
app.command("rollback")(realtime.rollback_command)
app.command("eval")(evaluate.eval_command)
app.command()(evaluate.verify)
app.command()(runs.report)


def main() -> None:
    """Entry point for `python -m fleetrl.cli`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()
