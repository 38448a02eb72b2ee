"""Repositories and workspaces: written once, repaired when stale, safe from many threads;
a checkout is the base tree with one commit and nothing hidden."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fleetrl.envs.tasks.git import apply_patch, git
from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import get_task
from fleetrl.envs.tasks.workspace import checkout, ensure_repo


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


def test_ensure_repo_writes_once_and_repairs_a_stale_cache() -> None:
    task = get_task("micro-train-0005")
    repo = ensure_repo(task)
    assert repo == Path(task.repo)
    assert git(repo, "rev-parse", "HEAD").strip() == task.base_commit
    (repo / "junk.txt").write_text("left by someone")
    assert ensure_repo(task) == repo  # HEAD still matches: kept as is
    git(repo, "commit", "-q", "--allow-empty", "-m", "later history")
    ensure_repo(task)  # HEAD moved: rewritten from scratch
    assert git(repo, "log", "--format=%H").split() == [task.base_commit]
    assert not (repo / "junk.txt").exists()


def test_ensure_repo_from_many_threads_at_first_use() -> None:
    # A group's episodes all ask for their task's repository at once on a fresh machine.
    task = get_task("micro-train-0006")
    shutil.rmtree(task.repo, ignore_errors=True)

    def use() -> str:
        repo = ensure_repo(task)
        return git(repo, "rev-parse", "HEAD").strip()

    with ThreadPoolExecutor(8) as pool:
        heads = list(pool.map(lambda _: use(), range(16)))
    assert heads == [task.base_commit] * 16
    assert [p.name for p in Path(task.repo).parent.iterdir() if p.name.startswith(".tmp-")] == []


def test_checkout_is_the_base_tree_with_one_commit_and_nothing_hidden(tmp_path: Path) -> None:
    task = get_task("micro-train-0011")
    dest = checkout(task, tmp_path / "ws")
    module = task.test_files[0].removeprefix("test_")  # micro: test_<f>.py tests <f>.py
    assert sorted(p.name for p in dest.iterdir()) == [".git", module]
    assert git(dest, "log", "--all", "--format=%H").split() == [task.base_commit]
    assert git(dest, "remote").strip() == ""
    assert git(dest, "status", "--porcelain").strip() == ""
    apply_patch(dest, task.patch)  # the gold patch fits the workspace as checked out
    with pytest.raises(TaskError, match="not an empty directory"):
        checkout(task, dest)
