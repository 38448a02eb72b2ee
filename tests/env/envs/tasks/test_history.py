"""A task's history is safe to read: neither its repository (the agent's sandbox is a copy of
it) nor a checkout holds a commit, object, ref or file that reveals the fix or the hidden
tests, for bundled tasks and for tasks generated from a repository with a history of its
own (where the unmutated function lives in every commit). The episode checks let the agent
run `git log`, `git show`, `git fsck` and read `.git`, because of this."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetrl.envs.tasks.generator import make_tasks
from fleetrl.envs.tasks.git import apply_patch, git
from fleetrl.envs.tasks.suites import get_task
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.types import Task
from tests.env.envs.tasks.test_generator import FAST, write_calc_repo


def blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def patched_files(task: Task, patch: str, scratch: Path) -> dict[str, bytes]:
    """The files `patch` writes, as they are once it is applied to the task's base tree."""
    repo = ensure_repo(task)
    paths = re.findall(r"^\+\+\+ b/(\S+)$", patch, flags=re.M)
    scratch.mkdir(parents=True)
    for path in paths:
        if (repo / path).is_file():
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_bytes((repo / path).read_bytes())
    apply_patch(scratch, patch)
    return {path: (scratch / path).read_bytes() for path in paths}


def secrets(task: Task, scratch: Path) -> dict[str, bytes]:
    """What no object may hold: each file of the gold fix and of the hidden tests."""
    gold = patched_files(task, task.patch, scratch / "gold")
    hidden = patched_files(task, task.test_patch, scratch / "hidden")
    assert gold and hidden
    return {f"gold {p}": data for p, data in gold.items()} | {
        f"hidden {p}": data for p, data in hidden.items()
    }


def assert_reveals_nothing(task: Task, where: Path, secret: dict[str, bytes]) -> None:
    """Every object git holds in `where` (loose, packed, reachable or not), every ref and
    reflog, and every file of its tree: none is a secret, nothing is compiled."""
    listing = git(where, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    objects = set(listing.split())
    assert objects, where
    for name, data in secret.items():
        assert blob_sha(data) not in objects, (where, name)
    assert git(where, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert git(where, "log", "--all", "--reflog", "--format=%H").split() == [task.base_commit]
    assert git(where, "stash", "list") == "" and git(where, "tag") == ""
    assert not (where / ".git" / "packed-refs").exists()
    assert not any((where / ".git" / name).exists() for name in ("ORIG_HEAD", "FETCH_HEAD"))
    lost = subprocess.run(
        ["git", "fsck", "--unreachable", "--no-reflogs"], cwd=where, capture_output=True
    )
    assert lost.returncode == 0 and lost.stdout.strip() == b"", lost.stdout
    tree = git(where, "ls-files").split()
    assert not [p for p in tree if "__pycache__" in p or p.endswith((".pyc", ".pyo"))], tree
    for path in tree:
        data = (where / path).read_bytes()
        for name, secret_data in secret.items():
            assert data != secret_data, (where, path, name)


@pytest.mark.parametrize(
    "task_id", ["micro-train-0000", "micro-heldout-0023", "product-train-0004"]
)
def test_a_bundled_tasks_history_reveals_nothing(task_id: str, tmp_path: Path) -> None:
    task = get_task(task_id)
    secret = secrets(task, tmp_path / "secrets")
    assert_reveals_nothing(task, ensure_repo(task), secret)
    assert_reveals_nothing(task, checkout(task, tmp_path / "ws"), secret)


def test_a_generated_tasks_history_reveals_nothing(tmp_path: Path) -> None:
    # The source repository has the unmutated code in every commit, a tag, a stash, a
    # branch, and bytecode left by its own test runs (not ignored): none of it may reach
    # a task made from it.
    source = write_calc_repo(tmp_path / "calc")
    (source / "calc" / "core.py").write_text((source / "calc" / "core.py").read_text() + "\n")
    git(source, "stash")
    git(source, "tag", "v1")
    git(source, "branch", "later")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "calc", "tests"], cwd=source, check=True
    )
    assert list(source.rglob("*.pyc"))
    tasks = make_tasks(
        source, tmp_path / "out", max_tasks=2, progress=False, jobs=2, pytest_args=FAST
    )
    assert tasks
    for i, task in enumerate(tasks):
        secret = secrets(task, tmp_path / f"secrets{i}")
        assert_reveals_nothing(task, Path(task.repo), secret)
        assert_reveals_nothing(task, checkout(task, tmp_path / f"ws{i}"), secret)
