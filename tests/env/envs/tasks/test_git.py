"""Git plumbing: shas computed without git match git's, diffs apply with git and patch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleetrl.envs.tasks.git import apply_patch, commit_all, flat_commit_sha, unified_diff
from fleetrl.envs.tasks.records import TaskError


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
