"""`fleetrl bench horizon`: no compaction, truncation, the base model's summaries and the
trained policy's, side by side on held-out long tasks (`fleetrl.bench.horizon`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config

PRESET = Path("long")  # the shipped preset the benchmark reads by default


def bench_horizon_command(
    trained: Annotated[
        str,
        typer.Option(
            help="The RL-trained policy: a checkpoint directory, or a run directory "
            "(runs/NAME, whose final/ checkpoint is read)."
        ),
    ],
    base: Annotated[
        str | None,
        typer.Option(
            help="The base model of the prompted arm: a checkpoint directory or a shipped "
            "name \\[model.path: base-long in the long preset]."
        ),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Split to report \\[eval.split].")] = None,
    samples: Annotated[int, typer.Option(min=1, help="Samples per task and arm.")] = 1,
    max_tasks: Annotated[
        int | None,
        typer.Option(min=0, help="Use only each split's first N tasks, 0: all \\[eval.max_tasks]."),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Every arm at this temperature. Default: each arm's own, chosen on "
            "eval.val_split under its harness (as `fleetrl eval --best-temperature`).",
        ),
    ] = None,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON document here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Long horizons: what self-summarisation buys, at one token budget.

    Four arms on the held-out tasks of a suite with facts (default: the `long` preset):
    none (the trained policy, no compaction: the episode ends when the context is full),
    truncate (the trained policy, oldest turns dropped), prompted (the base model writing
    its own summaries, untrained) and trained (the trained policy summarising). Per arm:
    pass@1 with a 95% bootstrap interval over tasks, compaction error (the share of a
    task's facts missing from an episode's summaries), tokens per solved episode, tokens
    per summary, how episodes ended; and the paired gains of trained over truncate and
    over prompted, in points. The metrics are in docs/evaluation.md."""
    shortcuts = {"eval.max_tasks": max_tasks}
    config = run_config(config_file if config_file is not None else PRESET, set_, shortcuts)
    from fleetrl.config import ConfigError

    try:
        config.rollout.check_installed()
    except ConfigError as err:
        raise fail(str(err)) from None
    if config.rollout.harness != "fleetrl":
        raise fail(
            f"bench horizon runs fleetrl's own harness, which summarises: not "
            f"{config.rollout.harness} (--set rollout.harness=fleetrl)"
        )
    if out is not None and not out.parent.is_dir():
        raise fail(f"--out: no directory {out.parent}")
    if out is not None and out.is_dir():
        raise fail(f"--out: {out} is a directory, give a file path")
    trained_path = checkpoint_dir(trained, "--trained")
    base_path = checkpoint_dir(base or config.model.path, "--base" if base else "model.path")
    split = split or config.eval.split
    from fleetrl.bench.horizon import HorizonBenchError, bench_horizon
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.model.checkpoint import CheckpointError
    from fleetrl.rollout.stats import EvalError

    try:
        if as_json:
            document = bench_horizon(config, base_path, trained_path, split, samples, temperature)
        else:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
            columns += [TextColumn("pass {task.fields[passed]}"), TimeElapsedColumn()]
            with Progress(*columns, console=Console(stderr=True)) as bar:
                document = bench_horizon(
                    config, base_path, trained_path, split, samples, temperature, bar
                )
    except (
        HorizonBenchError,
        TaskError,
        CheckpointError,
        EvalError,
        ConfigError,
        FileNotFoundError,
        PermissionError,
    ) as err:
        raise fail(str(err)) from None
    text = json.dumps(document, indent=2)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    if as_json:
        typer.echo(text)
        return
    _print(document)


def checkpoint_dir(name: str, option: str) -> Path:
    """The checkpoint a model option names: a shipped name, a checkpoint directory, or a
    run directory holding final/ (what `fleetrl train` writes); a one-line error else."""
    from fleetrl.model.checkpoint import resolve_checkpoint

    path = resolve_checkpoint(name)
    if (path / "config.json").is_file():
        return path
    if (path / "final" / "config.json").is_file():
        return path / "final"
    if not path.exists():
        raise fail(f"{option} {name}: no such checkpoint (a checkpoint or run directory)")
    raise fail(f"{option} {name}: not a checkpoint directory (no config.json, no final/)")


def _print(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from fleetrl.bench.horizon import ARMS

    arms = {name: document[name] for name in ARMS}
    models = document["models"]
    table = Table(
        title=f"long horizons: {document['split']}, {arms['trained']['tasks']} tasks "
        f"(trained {models['trained']}, base {models['base']})"
    )
    columns = ["arm", "T", "pass@1", "95% CI", "compaction error", "tokens/solved",
               "summary tokens", "summaries", "episodes", "finish reasons"]  # fmt: skip
    for column in columns:
        table.add_column(column)
    for name, arm in arms.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(arm["finish_reasons"].items()))
        table.add_row(
            name,
            f"{arm['temperature']:g}",
            f"{arm['pass_at_1']:.3f}",
            f"[{arm['ci_low']:.3f}, {arm['ci_high']:.3f}]",
            _cell(arm["compaction_error"], ".3f"),
            _cell(arm["tokens_per_solved"], ".0f"),
            _cell(arm["summary_tokens"], ".1f"),
            str(arm["summaries"]),
            str(arm["episodes"]),
            reasons,
        )
    console = Console()
    console.print(table)
    for name, gain in document["gains"].items():
        console.print(
            f"{name.replace('_', ' ')}: {gain['points']:+.1f} points "
            f"(95% CI [{gain['ci_low']:+.1f}, {gain['ci_high']:+.1f}], paired over tasks)"
        )


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
