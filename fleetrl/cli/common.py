"""What the command modules share: the one-line error and the run configuration options."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fleetrl.config import RunConfig


def fail(message: str) -> typer.Exit:
    """Print a one-line error (the message's first line: a tool's output may follow it)
    and return the exit to raise (code 2: bad input)."""
    first = message.strip().splitlines()[0] if message.strip() else "error"
    typer.secho(f"error: {first}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=2)


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML run configuration (the same tree as `fleetrl train`), or a shipped "
        "preset's name: `demo`, `mini-swe-agent`.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a key, e.g. --set trainer.lr=1e-4 (repeatable)."),
]


def run_config(config_file: Path | None, sets: list[str] | None, shortcuts: dict) -> RunConfig:
    """The run configuration tree every command reads: the TOML file (or the defaults),
    then `--set` overrides, then the command's own flags (`shortcuts`: dotted key -> value,
    None where the flag was not given). A bad key or value fails with a one-line error."""
    from fleetrl.config import ConfigError
    from fleetrl.config_files import load_config, parse_overrides, set_key

    try:
        overrides = parse_overrides(sets or [])
        for key, value in shortcuts.items():
            if value is not None:
                set_key(overrides, key, value)
        return load_config(config_file, overrides)
    except ConfigError as err:
        raise fail(str(err)) from None
