"""The agent's changes from hostile but legal workspaces and live sandboxes: names that are
not UTF-8, links, FIFOs, links out of the sandbox and oversized files each get a verdict,
never an exception, and nothing is followed or applied that should not be."""

import os

from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify, workspace_changes
from fleetrl.envs.verifier.changes import MAX_FILE_BYTES


def test_verify_from_a_live_sandbox(task):
    repo = ensure_repo(task)
    with open_sandbox(repo) as sandbox:
        text = sandbox.read_file("nkims.py").decode()
        sandbox.write_file("nkims.py", text.replace("xut = 1", "xut = 0"))
        changes = sandbox_changes(sandbox, repo)
    assert list(changes) == ["nkims.py"]
    assert verify(task, changes, tool_calls=[("read_file", {"path": "nkims.py"})]).reward == 1


# Hostile but legal workspaces: each gets a verdict, never an exception.
def test_a_name_that_is_not_utf8_gets_a_verdict(task, workspace):
    apply_patch(workspace, task.patch)
    name = os.fsdecode(b"caf\xe9.py")
    (workspace / name).write_bytes(b"VALUE = 1\n")
    changes = workspace_changes(ensure_repo(task), workspace)
    assert changes[name] == (None, b"VALUE = 1\n")
    result = verify(task, changes)
    assert name in result.applied and set(result.tests.values()) == {"passed"}
    assert "grader_error" not in result.flags


def test_links_and_special_files_are_never_followed_or_applied(task, workspace, tmp_path):
    apply_patch(workspace, task.patch)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    (workspace / "leak.py").symlink_to(secret)
    (workspace / "zero.py").symlink_to("/dev/zero")  # read whole, it would never end
    os.mkfifo(workspace / "pipe.py")  # opened blocking, the grader would hang
    changes = workspace_changes(ensure_repo(task), workspace)
    assert changes.skipped == dict.fromkeys(["leak.py", "pipe.py", "zero.py"], "special_file")
    assert all(b"host secret" not in (new or b"") for _, new in changes.values())
    result = verify(task, changes)
    assert result.reward == 0 and "special_file" in result.flags
    assert result.applied == ["nkims.py"]


def test_a_link_out_of_the_agents_sandbox_gets_a_verdict(task):
    repo = ensure_repo(task)
    with open_sandbox(repo) as sandbox:
        text = sandbox.read_file("nkims.py").decode()
        sandbox.write_file("nkims.py", text.replace("xut = 1", "xut = 0"))
        sandbox.exec("ln -s /etc/hostname out.py && ln -s /proc/self/environ env.py")
        changes = sandbox_changes(sandbox, repo)
    assert changes.skipped == {"env.py": "special_file", "out.py": "special_file"}
    result = verify(task, changes)
    assert result.reward == 0 and result.flags == ["special_file"], result.flags
    assert set(result.tests.values()) == {"passed"}


def test_an_oversized_file_is_neither_read_nor_applied(task, workspace):
    apply_patch(workspace, task.patch)
    with open(workspace / "data.bin", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk
    changes = workspace_changes(ensure_repo(task), workspace)
    assert "data.bin" not in changes and changes.skipped == {"data.bin": "oversized_file"}
    result = verify(task, changes)
    assert result.reward == 0 and result.flags == ["oversized_file"]
