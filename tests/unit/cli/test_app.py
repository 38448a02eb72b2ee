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
        "gate",
        "rollback",
    }
    result = runner.invoke(app, ["model", "--help"])
    assert result.exit_code == 0 and "init" in result.output
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "engine" in result.output


def test_every_command_has_a_one_line_summary():
    # A command list shows each command's first paragraph with its line breaks kept, so a
    # summary spread over two lines breaks mid-sentence in `fleetrl --help`.
    import inspect

    import typer.main

    def summaries(group, path):
        for name, command in getattr(group, "commands", {}).items():
            first = inspect.cleandoc(command.help or "").split("\n\n")[0]
            yield " ".join([*path, name]), first
            yield from summaries(command, [*path, name])

    found = dict(summaries(typer.main.get_command(app), []))
    assert len(found) > 20
    assert {name: s for name, s in found.items() if not s or "\n" in s} == {}


def test_help_text_is_rewrapped_to_the_terminal():
    # Docstrings are wrapped at 100 columns in the source; only the markdown mode joins
    # their lines again, so that an 80-column `--help` never breaks mid-sentence.
    import typer.main

    def modes(group):
        yield group.rich_markup_mode
        for command in getattr(group, "commands", {}).values():
            yield from modes(command)

    assert set(modes(typer.main.get_command(app))) == {"markdown"}
