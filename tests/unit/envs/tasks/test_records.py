"""Task records: validation errors name the field and line, JSONL files and task folders."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fleetrl.envs.tasks.records import TaskError, load_task_dir, write_jsonl
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.types import Task


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


def _record(repo: str, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "instance_id": "demo__bug-1",
        "repo": repo,
        "base_commit": "a" * 40,
        "problem_statement": "`f(1)` should return 2.",
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": ["test_f.py::test_1"],
        "PASS_TO_PASS": [],
    }
    record.update(changes)
    return record


def _write(path: Path, *records: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"FAIL_TO_PASS": "not a list"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS.0"),
        ({"base_commit": "main"}, "base_commit"),
        ({"instance_id": "has space"}, "instance_id"),
        ({"problem_statement": 7}, "problem_statement"),
    ],
)
def test_malformed_record_names_the_field(
    tmp_path: Path, changes: dict[str, object], field: str
) -> None:
    path = _write(tmp_path / "tasks.jsonl", _record(str(tmp_path), **changes))
    with pytest.raises(TaskError) as err:
        load_task_dir(tmp_path)
    assert f"field '{field}'" in str(err.value)
    assert f"{path}:1" in str(err.value)


def test_missing_field_and_missing_repo_are_named(tmp_path: Path) -> None:
    record = _record(str(tmp_path))
    del record["patch"]
    _write(tmp_path / "a.jsonl", record)
    with pytest.raises(TaskError, match="field 'patch': Field required"):
        load_task_dir(tmp_path / "a.jsonl")
    _write(tmp_path / "b.jsonl", _record("no/such/dir"))
    with pytest.raises(TaskError, match=r"field 'repo'.*not a directory"):
        load_task_dir(tmp_path / "b.jsonl")


def test_bad_json_line_and_duplicates_are_reported(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps(_record(str(tmp_path))) + "\n\n{oops\n")
    with pytest.raises(TaskError, match=r"a\.jsonl:3: not valid JSON"):
        load_task_dir(tmp_path)
    _write(tmp_path / "a.jsonl", _record(str(tmp_path)), _record(str(tmp_path)))
    with pytest.raises(TaskError, match="appears twice"):
        load_task_dir(tmp_path)


def test_swebench_style_record_loads(tmp_path: Path) -> None:
    """SWE-bench stores the test lists as JSON strings and carries extra fields."""
    (tmp_path / "repos" / "r").mkdir(parents=True)
    record = _record(
        "repos/r",  # relative to the JSONL file's folder
        FAIL_TO_PASS='["tests/test_a.py::test_x"]',
        PASS_TO_PASS="[]",
        version="1.2",
        created_at="2024-01-01",
    )
    _write(tmp_path / "tasks.jsonl", record)
    (task,) = load_tasks(tasks_dir=tmp_path)
    assert task.FAIL_TO_PASS == ["tests/test_a.py::test_x"]
    assert task.PASS_TO_PASS == []
    assert task.repo == str((tmp_path / "repos" / "r").resolve())


def test_write_jsonl_round_trips_with_relative_repos(tmp_path: Path) -> None:
    (tmp_path / "repos" / "r").mkdir(parents=True)
    task = Task(**_record(str(tmp_path / "repos" / "r")))  # type: ignore[arg-type]
    write_jsonl([task], tmp_path / "tasks.jsonl")
    assert json.loads((tmp_path / "tasks.jsonl").read_text())["repo"] == "repos/r"
    moved = tmp_path.rename(tmp_path.with_name(tmp_path.name + "-moved"))
    (loaded,) = load_tasks(tasks_dir=moved)
    assert loaded.repo == str((moved / "repos" / "r").resolve())
    assert dataclasses.replace(loaded, repo=task.repo) == task
