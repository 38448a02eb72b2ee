"""What every command shares: the one-line error, the run configuration options and the
figures printer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fleetrl.config import RunConfig


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
