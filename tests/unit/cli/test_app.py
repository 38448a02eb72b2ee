"""The command line as a whole: its frozen set of commands and their groups."""

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def command_names(typer_app) -> set[str]:
    import typer.main

    group = typer.main.get_command(typer_app)
    return set(group.commands)


def test_cli_surface_is_frozen():
    # Adding a command is a deliberate act: update this list and the README together.
    assert command_names(app) == {
        "model",
        "serve",
        "bench",
        "report",
        "tasks",
        "verify",
        "eval",
        "train",
        "sft",
        "run",
        "trainer",
        "region",
        "status",
    }
    result = runner.invoke(app, ["model", "--help"])
    assert result.exit_code == 0 and "init" in result.output
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "engine" in result.output
