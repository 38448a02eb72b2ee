"""`fleetrl tasks`: the command surface and one-line user errors (every error is raised
before a task repository is written or pytest runs). JSON output and task folders, which
need git and pytest, are tested in tests/env/envs/test_tasks_cli.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleetrl.envs.tasks_cli import tasks_app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


def _ok(*args: str) -> str:
    result = runner.invoke(tasks_app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _error(*args: str) -> str:
    """Run a command that must fail as a user error: exit 2, one line, no traceback."""
    result = runner.invoke(tasks_app, list(args))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_cli_surface_is_frozen() -> None:
    """Renaming a command or an option breaks scripts: change this test only on purpose."""
    command = typer.main.get_command(tasks_app)
    options = {
        name: sorted(opt for p in sub.params for opt in p.opts if opt.startswith("--"))
        for name, sub in command.commands.items()  # type: ignore[attr-defined]
    }
    assert options == {
        "list": ["--json", "--split", "--suite", "--tasks"],
        "show": ["--json", "--suite", "--tasks"],
        "checkout": ["--suite", "--tasks"],
        "make": [
            "--jobs",
            "--json",
            "--kinds",
            "--max-tasks",
            "--out",
            "--progress",
            "--pytest-arg",
            "--seed",
            "--timeout",
        ],
    }
    for name in options:
        assert "Usage" in _ok(name, "--help")


def test_user_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    assert "unknown task id 'micro-nope'" in _error("show", "micro-nope")
    assert "no split 'dev'" in _error("list", "--split", "dev")
    assert "not both" in _error("list", "--suite", "micro", "--tasks", str(tmp_path))
    assert "neither a task folder" in _error("list", "--tasks", str(tmp_path / "missing"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tasks.jsonl").write_text('{"instance_id": "x"}\n')
    assert "field 'repo'" in _error("list", "--tasks", str(tmp_path / "bad"))
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f").write_text("")
    assert "not an empty directory" in _error("checkout", "micro-train-0000", str(tmp_path / "ws"))
    assert "unknown mutation kinds" in _error(
        "make", str(tmp_path), "--out", str(tmp_path / "o"), "--kinds", "op_swap"
    )
    assert "not a directory" in _error("make", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
