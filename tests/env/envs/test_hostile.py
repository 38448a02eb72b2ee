"""Hostile but legal workspaces: each gets a verdict, never an exception, and nothing on the
host outside the workspace is read (docs/cheats.md lists them).

Most cases sit on top of the task's gold fix, so the hidden tests pass: a reward of 0 must
then come with a flag saying why. The rest (the module deleted or replaced) fix nothing.
"""

from __future__ import annotations

import os
import secrets
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.envs.verifier import (
    OutcomeCache,
    VerifyResult,
    cache,
    sandbox_changes,
    verify,
    verify_workspace,
    workspace_changes,
)
from tests.env.envs.cheat_tools import Target, module_file, target

# The links out are checked on a train and a held-out task; the rest is about the grader, not
# the task, and runs on one (20 000 files take a while).
TASKS = ("micro-train-0000", "micro-heldout-0023")
FLAGGED = "<any flag>"
VERDICT = "<a verdict>"  # legal content: reward 1, or 0 with a flag


@pytest.fixture(autouse=True)
def fresh_outcomes(monkeypatch):
    """Every case is graded for real: no outcome is carried over from another test."""
    monkeypatch.setattr(cache, "OUTCOMES", OutcomeCache())


@pytest.fixture
def t() -> Target:
    return target(TASKS[0])


@pytest.fixture
def fixed(t: Target, tmp_path: Path) -> Path:
    """A workspace holding the task's gold fix."""
    workspace = checkout(t.task, tmp_path / "ws")
    apply_patch(workspace, t.task.patch)
    return workspace


def assert_explained(result: VerifyResult) -> None:
    """A verdict whose 0, if it is one, says why."""
    assert isinstance(result, VerifyResult)
    assert result.reward == 1 or result.flags, result


def write(path: str, data: bytes) -> Callable[[Path, Target], None]:
    """Write one file (a `str` path may hold `{hidden}`, the hidden test's path)."""

    def make(workspace: Path, t: Target) -> None:
        file = workspace / path.format(hidden=t.hidden_test)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data)

    return make


def non_utf8_name(workspace: Path, t: Target) -> None:
    with open(os.path.join(os.fsencode(workspace), b"caf\xe9-\xff.txt"), "wb") as f:
        f.write(b"notes\n")


def many_small_files(workspace: Path, t: Target) -> None:
    for i in range(20_000):
        (workspace / "data" / f"{i // 1000:02d}").mkdir(parents=True, exist_ok=True)
        (workspace / "data" / f"{i // 1000:02d}" / f"{i}.txt").write_bytes(b"%d\n" % i)


def link_to_shadow(workspace: Path, t: Target) -> None:
    (workspace / "shadow.txt").symlink_to("/etc/shadow")


def fifo(workspace: Path, t: Target) -> None:
    os.mkfifo(workspace / "pipe")


def hidden_test_as_directory(workspace: Path, t: Target) -> None:
    (workspace / t.hidden_test).mkdir()
    (workspace / t.hidden_test / "notes.txt").write_text("a directory, not a test file\n")


DEEP = {
    "parentheses": b"x = " + b"(" * 200_000 + b")" * 200_000 + b"\n",
    "lists": b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "additions": b"x = " + b"1 + " * 100_000 + b"1\n",
    "unary minus": b"x = " + b"-" * 100_000 + b"1\n",
}

# (name, what is done on top of the gold fix, what it must get)
ON_A_FIX = [
    ("a non-UTF-8 file name", non_utf8_name, VERDICT),
    ("a file name with a newline", write("notes\nmore.txt", b"notes\n"), VERDICT),
    ("20 000 small files", many_small_files, VERDICT),
    ("a link to /etc/shadow", link_to_shadow, "special_file"),
    ("a FIFO", fifo, "special_file"),
    ("a directory where the hidden test goes", hidden_test_as_directory, FLAGGED),
    *[(f"{kind} nested 100k deep", write("deep.py", code), FLAGGED) for kind, code in DEEP.items()],
]  # fmt: skip


@pytest.mark.timeout(120)  # a FIFO read on the host would block forever
@pytest.mark.parametrize(("name", "make", "expected"), ON_A_FIX, ids=[c[0] for c in ON_A_FIX])
def test_hostile_workspace_gets_a_verdict(t, fixed, name, make, expected):
    make(fixed, t)
    result = verify_workspace(t.task, fixed)
    assert_explained(result)
    if expected == FLAGGED:
        assert result.reward == 0 and result.flags, (name, result)
    elif expected != VERDICT:
        assert result.reward == 0 and expected in result.flags, (name, result)


@pytest.mark.parametrize("t", [target(task_id) for task_id in TASKS], ids=TASKS)
def test_a_link_to_a_host_file_is_never_read(t, fixed, tmp_path):
    # The module fails its import if the grading copy holds the host file's content.
    marker = secrets.token_hex(16)
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text(marker)
    (fixed / "leak.txt").symlink_to(host_file)
    path = module_file(fixed, t)
    path.write_text(
        path.read_text() + "\n\ntry:\n    _LEAK = open('leak.txt').read()\n"
        "except OSError:\n    _LEAK = ''\n"
        f"if {marker[:8]!r} + {marker[8:]!r} in _LEAK:\n    raise ImportError('host read')\n"
    )
    changes = workspace_changes(ensure_repo(t.task), fixed)
    assert all(marker.encode() not in (new or b"") for _, new in changes.values())
    result = verify_workspace(t.task, fixed)
    assert result.reward == 0 and "special_file" in result.flags, result
    assert set(result.tests.values()) == {"passed"}, result
    assert marker not in repr(result)


@pytest.mark.parametrize("t", [target(task_id) for task_id in TASKS], ids=TASKS)
def test_a_link_out_of_the_agent_sandbox(t):
    repo = ensure_repo(t.task)
    with open_sandbox(repo) as sandbox:
        sandbox.write_file(".fix.patch", t.task.patch)
        assert sandbox.exec(["git", "apply", ".fix.patch"]).ok
        assert sandbox.exec(["rm", ".fix.patch"]).ok
        assert sandbox.exec(["ln", "-s", "/etc/passwd", "passwd.txt"]).ok
        assert sandbox.exec(["ln", "-s", "/", "root"]).ok
        changes = sandbox_changes(sandbox, repo)
    result = verify(t.task, changes)
    assert result.reward == 0 and "special_file" in result.flags, result
    assert set(result.tests.values()) == {"passed"}, result


def test_a_64_mib_file_is_not_read_whole(t, fixed):
    with open(fixed / "blob.bin", "wb") as f:
        chunk = secrets.token_bytes(1 << 20)
        for _ in range(64):
            f.write(chunk)
    tracemalloc.start()
    try:
        result = verify_workspace(t.task, fixed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.reward == 0 and "oversized_file" in result.flags, result
    assert peak < 32 << 20, f"peak {peak / 2**20:.1f} MiB while grading a 64 MiB file"


# These fix nothing: the tests fail, and the verdict still comes.
def replace_module_by_directory(workspace: Path, t: Target) -> None:
    module_file(workspace, t).unlink()
    module_file(workspace, t).mkdir()
    (module_file(workspace, t) / "x.txt").write_text("not a module\n")


def delete_module(workspace: Path, t: Target) -> None:
    module_file(workspace, t).unlink()


@pytest.mark.parametrize("make", [replace_module_by_directory, delete_module])
def test_module_gone_gets_a_failing_verdict(t, tmp_path, make):
    workspace = checkout(t.task, tmp_path / "ws")
    make(workspace, t)
    result = verify_workspace(t.task, workspace)
    assert isinstance(result, VerifyResult)
    assert result.reward == 0 and "passed" not in {
        result.tests[test] for test in t.task.FAIL_TO_PASS
    }, result
