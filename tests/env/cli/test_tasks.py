"""`fleetrl tasks` on real task folders: JSON output, `show` writing the task repository,
`checkout` (git), and `make` (pytest and git in subprocesses). The command surface and the
user errors are tested in tests/unit/cli/test_tasks.py, whose helpers this file uses."""

from __future__ import annotations

import json
from pathlib import Path

from fleetrl.envs.tasks.git import git
from tests.unit.cli.test_tasks import _cache, _error, _ok  # noqa: F401  (_cache: autouse)


def test_list_show_and_checkout_a_micro_task(tmp_path: Path) -> None:
    train = json.loads(_ok("list", "--suite", "micro", "--split", "train", "--json"))
    assert len(train) == 440 and train[0] == "micro-train-0000"
    assert len(_ok("list").splitlines()) == 1120
    record = json.loads(_ok("show", "micro-heldout-0003", "--json"))
    assert record["split"] == "heldout" and record["patch"] and record["test_patch"]
    assert Path(record["repo"]).is_dir()  # written on demand
    text = _ok("show", "micro-heldout-0003")
    assert record["problem_statement"] in text and record["patch"] not in text
    _ok("checkout", "micro-heldout-0003", str(tmp_path / "ws"))
    assert git(tmp_path / "ws", "rev-parse", "HEAD").strip() == record["base_commit"]
    assert not (tmp_path / "ws" / record["test_files"][0]).exists()


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
