"""Task repositories on disk and the agent's starting workspace.

    Task ─▶ ensure_repo: its repository at `task.repo`, at `base_commit`
              (a bundled suite's is written on first use, into the cache folder)
         ─▶ checkout: base tree + a fresh one-commit `.git` in an empty folder

`checkout` writes the agent's starting workspace: the base tree plus a fresh `.git` with a
single commit made by the same fixed identity (`fleetrl.envs.tasks.git`), so its HEAD equals
`base_commit` for every repository fleetrl wrote, and there is no other history, no
remote, no hidden test, no gold patch.

Contract: `ensure_repo` is safe to call from many threads and processes at once; a reader
never sees a half-written repository. Not covered: running tests (`fleetrl.envs.tasks.testrun`),
grading (`fleetrl.envs.verifier`), repositories that are not on local disk.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path

from fleetrl.envs.tasks.git import commit_all, git, git_env
from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import get_suite, suite_names
from fleetrl.files import file_in_the_way
from fleetrl.types import Task


def _head(repo: Path) -> str | None:
    if not (repo / ".git").exists():
        return None
    try:
        return git(repo, "rev-parse", "HEAD").strip()
    except TaskError:
        return None


_repo_locks: dict[Path, threading.Lock] = {}
_repo_locks_guard = threading.Lock()


def _repo_lock(repo: Path) -> threading.Lock:
    with _repo_locks_guard:
        return _repo_locks.setdefault(repo, threading.Lock())


def ensure_repo(task: Task) -> Path:
    """The task's repository, written first if it belongs to a bundled suite and is missing.

    A cached repository whose HEAD is not `base_commit` (a stale cache) is rewritten.
    Safe to call from many threads and processes at once (a group's episodes all ask for
    the same repository on first use).
    """
    repo = Path(task.repo)
    if _head(repo) == task.base_commit:
        return repo
    if task.suite not in suite_names():
        raise TaskError(f"{task.instance_id}: repository {repo} is missing or not at base_commit")
    suite = get_suite(task.suite)
    repo.parent.mkdir(parents=True, exist_ok=True)
    with _repo_lock(repo):  # threads of this process build it once
        if _head(repo) == task.base_commit:
            return repo
        # Build beside the target and rename into place, so a concurrent reader never sees
        # a half-written repository; between processes, whoever renames first wins.
        with tempfile.TemporaryDirectory(dir=repo.parent, prefix=".tmp-") as tmp:
            staging = Path(tmp) / "repo"
            staging.mkdir()
            suite.materialise(task, staging)
            sha = commit_all(staging)
            if sha != task.base_commit:
                raise TaskError(
                    f"{task.instance_id}: suite wrote commit {sha}, expected base_commit"
                )
            if _head(repo) == task.base_commit:  # another process was faster
                return repo
            if repo.exists():  # stale: moved aside whole, removed with the temporary folder
                repo.rename(Path(tmp) / "stale")
            try:
                staging.rename(repo)
            except OSError:
                if _head(repo) != task.base_commit:
                    raise
    return repo


def checkout(task: Task, dest: Path) -> Path:
    """Write the agent's starting workspace for `task` into `dest` (absent or empty).

    The workspace is the base tree and a fresh one-commit `.git` (same identity as every
    fleetrl commit): no hidden tests, no gold patch, no history, no remote.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TaskError(f"{dest} exists and is not an empty directory")
    if file := file_in_the_way(dest):  # not `dest` itself: that is a file, refused above
        raise TaskError(f"cannot create {dest}: {file} is a file")
    repo = ensure_repo(task)
    proc = subprocess.run(
        ["git", "archive", "--format=tar", task.base_commit],
        cwd=repo,
        capture_output=True,
        env=git_env(),
        check=False,
    )
    if proc.returncode != 0:
        raise TaskError(f"{task.instance_id}: cannot read base_commit from {repo}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
        archive.extractall(dest, filter="data")
    commit_all(dest)
    return dest
