"""Task records: validation errors name the field, loading, suites, repositories, checkout."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fleetrl.envs import tasks as tasks_mod
from fleetrl.envs.tasks import (
    TaskError,
    apply_patch,
    checkout,
    commit_all,
    ensure_repo,
    flat_commit_sha,
    get_task,
    load_task_dir,
    load_tasks,
    unified_diff,
    write_jsonl,
)
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


def test_flat_commit_sha_is_the_sha_git_makes(tmp_path: Path) -> None:
    files = {"b.py": b"x = 1\n", "a.py": "print('é')\n".encode(), "A.txt": b""}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert commit_all(tmp_path) == flat_commit_sha(files)


def test_unified_diff_applies_with_git_and_with_patch(tmp_path: Path) -> None:
    old, new = "a = 1\nb = 2\nc = 3\n", "a = 1\nb = 20\nc = 3\n"
    change = unified_diff("m.py", old, new) + unified_diff("t.py", None, "def test():\n    pass\n")
    for tool in ("git", "patch"):
        work = tmp_path / tool
        work.mkdir()
        (work / "m.py").write_text(old)
        if tool == "git":
            apply_patch(work, change)
        else:
            subprocess.run(["patch", "-p1", "-s"], cwd=work, input=change.encode(), check=True)
        assert (work / "m.py").read_text() == new
        assert (work / "t.py").read_text() == "def test():\n    pass\n"


def test_apply_patch_that_does_not_fit_raises(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("something else\n")
    with pytest.raises(TaskError, match="git apply failed"):
        apply_patch(tmp_path, unified_diff("m.py", "a = 1\n", "a = 2\n"))


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


def test_load_tasks_resolves_suites_and_splits(tmp_path: Path) -> None:
    assert len(load_tasks(suite="micro", split="heldout")) == 100
    with pytest.raises(TaskError, match="exactly one"):
        load_tasks()
    with pytest.raises(TaskError, match="exactly one"):
        load_tasks(suite="micro", tasks_dir=tmp_path)
    with pytest.raises(TaskError, match=r"unknown suite 'nope'.*micro"):
        load_tasks(suite="nope")
    with pytest.raises(TaskError, match=r"no split 'dev'.*heldout, train"):
        load_tasks(suite="micro", split="dev")
    with pytest.raises(TaskError, match="neither a task folder nor a JSONL file"):
        load_tasks(tasks_dir=tmp_path / "missing")


def test_get_task_finds_bundled_ids_and_suggests_close_ones() -> None:
    assert get_task("micro-heldout-0007").split == "heldout"
    with pytest.raises(TaskError, match=r"unknown task id 'micro-heldout-07'.*did you mean"):
        get_task("micro-heldout-07")


def test_ensure_repo_writes_once_and_repairs_a_stale_cache() -> None:
    task = get_task("micro-train-0005")
    repo = ensure_repo(task)
    assert repo == Path(task.repo)
    assert tasks_mod.git(repo, "rev-parse", "HEAD").strip() == task.base_commit
    (repo / "junk.txt").write_text("left by someone")
    assert ensure_repo(task) == repo  # HEAD still matches: kept as is
    tasks_mod.git(repo, "commit", "-q", "--allow-empty", "-m", "later history")
    ensure_repo(task)  # HEAD moved: rewritten from scratch
    assert tasks_mod.git(repo, "log", "--format=%H").split() == [task.base_commit]
    assert not (repo / "junk.txt").exists()


def test_ensure_repo_from_many_threads_at_first_use() -> None:
    # A group's episodes all ask for their task's repository at once on a fresh machine.
    task = get_task("micro-train-0006")
    shutil.rmtree(task.repo, ignore_errors=True)

    def use() -> str:
        repo = ensure_repo(task)
        return tasks_mod.git(repo, "rev-parse", "HEAD").strip()

    with ThreadPoolExecutor(8) as pool:
        heads = list(pool.map(lambda _: use(), range(16)))
    assert heads == [task.base_commit] * 16
    assert [p.name for p in Path(task.repo).parent.iterdir() if p.name.startswith(".tmp-")] == []


def test_checkout_is_the_base_tree_with_one_commit_and_nothing_hidden(tmp_path: Path) -> None:
    task = get_task("micro-train-0011")
    dest = checkout(task, tmp_path / "ws")
    module = task.test_files[0].removeprefix("test_")  # micro: test_<f>.py tests <f>.py
    assert sorted(p.name for p in dest.iterdir()) == [".git", module]
    assert tasks_mod.git(dest, "log", "--all", "--format=%H").split() == [task.base_commit]
    assert tasks_mod.git(dest, "remote").strip() == ""
    assert tasks_mod.git(dest, "status", "--porcelain").strip() == ""
    apply_patch(dest, task.patch)  # the gold patch fits the workspace as checked out
    with pytest.raises(TaskError, match="not an empty directory"):
        checkout(task, dest)
