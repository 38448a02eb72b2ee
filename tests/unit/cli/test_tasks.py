"""`fleetrl tasks`: the command surface and one-line user errors (every error is raised
before a task repository is written or pytest runs). JSON output and task folders, which
need git and pytest, are tested in tests/env/cli/test_tasks.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleetrl.cli.tasks import tasks_app

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
            "--heldout",
            "--jobs",
            "--json",
            "--kinds",
            "--max-tasks",
            "--out",
            "--progress",
            "--pytest-arg",
            "--seed",
            "--timeout",
            "--val",
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
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "afile is a file" in _error("checkout", "micro-train-0000", str(afile / "ws"))
    assert "is a file" in _error("make", str(tmp_path), "--out", str(afile))
    assert "is a file" in _error("make", str(tmp_path), "--out", str(afile / "o"))
    out = str(tmp_path / "o")
    assert "max_tasks must be >= 1" in _error(
        "make", str(tmp_path), "--out", out, "--max-tasks", "0"
    )
    assert "timeout must be > 0" in _error("make", str(tmp_path), "--out", out, "--timeout", "0")
    assert "--jobs must be >= 0" in _error("make", str(tmp_path), "--out", out, "--jobs", "-1")
    assert "sum < 1" in _error(
        "make", str(tmp_path), "--out", out, "--heldout", "0.9", "--val", "0.2"
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "tasks.jsonl").write_text("")
    assert "no tasks in" in _error("list", "--tasks", str(tmp_path / "empty"))


def test_generated_tasks_split_by_function_into_train_val_and_heldout() -> None:
    from fleetrl.envs.tasks.generator import assign_splits
    from fleetrl.types import Task

    def task(i: int, function: str) -> Task:
        return Task(f"t{i}", "r", "c", "p", "d", "t", ["f"], [], origin=f"m.py::{function}")

    tasks = [task(i, f"f{i // 3}") for i in range(60)]  # 20 functions, 3 bugs each
    split = assign_splits(tasks, seed=0, val=0.1, heldout=0.2)
    counts = {name: sum(t.split == name for t in split) for name in ("train", "val", "heldout")}
    assert counts == {"train": 42, "val": 6, "heldout": 12}
    for function in {t.origin for t in split}:
        assert len({t.split for t in split if t.origin == function}) == 1
    assert split == assign_splits(list(reversed(tasks)), seed=0, val=0.1, heldout=0.2)[::-1]
    assert split != assign_splits(tasks, seed=1, val=0.1, heldout=0.2)
