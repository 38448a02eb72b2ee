"""`fleetrl tasks`: the command surface, JSON output, task folders, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleetrl.envs.git import git
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


def test_list_show_and_checkout_a_micro_task(tmp_path: Path) -> None:
    train = json.loads(_ok("list", "--suite", "micro", "--split", "train", "--json"))
    assert len(train) == 440 and train[0] == "micro-train-0000"
    assert len(_ok("list").splitlines()) == 540
    record = json.loads(_ok("show", "micro-heldout-0003", "--json"))
    assert record["split"] == "heldout" and record["patch"] and record["test_patch"]
    assert Path(record["repo"]).is_dir()  # written on demand
    text = _ok("show", "micro-heldout-0003")
    assert record["problem_statement"] in text and record["patch"] not in text
    _ok("checkout", "micro-heldout-0003", str(tmp_path / "ws"))
    assert git(tmp_path / "ws", "rev-parse", "HEAD").strip() == record["base_commit"]
    assert not (tmp_path / "ws" / record["test_files"][0]).exists()


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


def test_make_then_work_on_the_task_folder(tmp_path: Path) -> None:
    repo = tmp_path / "lib"
    repo.mkdir()
    (repo / "lib.py").write_text("def double(x):\n    return x * 2\n")
    (repo / "test_lib.py").write_text(
        "from lib import double\n\n\ndef test_double():\n    assert double(3) == 6\n"
    )
    out = tmp_path / "tasks"
    report = json.loads(
        _ok(
            "make",
            str(repo),
            "--out",
            str(out),
            "--kinds",
            "operator_swap",
            "--max-tasks",
            "1",
            "--json",
            "--no-progress",
            "--pytest-arg=-p",
            "--pytest-arg=no:hypothesispytest",
        )
    )
    assert report["by_kind"] == {"operator_swap": {"tried": 1, "kept": 1}}
    (task_id,) = json.loads(_ok("list", "--tasks", str(out), "--json"))
    record = json.loads(_ok("show", task_id, "--tasks", str(out), "--json"))
    assert record["FAIL_TO_PASS"] == ["test_lib.py::test_double"]
    assert "x + 2" in (Path(record["repo"]) / "lib.py").read_text()
    _ok("checkout", task_id, str(tmp_path / "ws"), "--tasks", str(out))
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == [".git", "lib.py"]
    assert "unknown task id" in _error("show", "micro-train-0000", "--tasks", str(out))
