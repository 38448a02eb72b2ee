"""The agent's changes from hostile but legal workspaces and live sandboxes: names that are
not UTF-8, links, FIFOs, links out of the sandbox, oversized files, folders nested thousands
deep and hard links to host files each get a verdict, never an exception, and nothing is
followed or applied that should not be."""

import os
import secrets
import sys
import tempfile
from pathlib import Path

import pytest

from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify, workspace_changes
from fleetrl.envs.verifier.changes import MAX_FILE_BYTES
from tests.env.envs.verifier.nkims_task import append, module_path


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


def _nest(top: Path, depth: int) -> str:
    """Folders `d/d/...` `depth` deep under `top` with `deep.txt` at the bottom (made with
    descriptors: the path soon passes PATH_MAX); returns the file's relative path."""
    fd = os.open(top, os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_DIRECTORY, dir_fd=fd), fd
        os.close(parent)
    with open(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as f:
        f.write("at the bottom\n")
    os.close(fd)
    return "d/" * depth + "deep.txt"


def _unnest(top: Path) -> None:
    """Remove a folder tree of any depth: pytest's and shutil's rmtree recurse, and a tree
    they cannot remove ends the whole session when pytest cleans its old folders."""
    hold, todo, n = tempfile.mkdtemp(dir=top.parent), [str(top)], 0
    while todo:
        folder = todo.pop()
        with os.scandir(folder) as entries:
            found = list(entries)
        for entry in found:
            if entry.is_dir(follow_symlinks=False):
                todo.append(os.path.join(hold, str(n)))  # moved up: paths stay short
                os.rename(entry.path, todo[-1])
                n += 1
            else:
                os.unlink(entry.path)
        os.rmdir(folder)
    os.rmdir(hold)


# 1,100 levels (2,208 bytes) can still be named in a grading copy, 3,000 cannot.
@pytest.mark.parametrize(("depth", "carried"), [(1100, True), (3000, False)])
def test_a_folder_nested_thousands_deep_gets_a_verdict(task, workspace, depth, carried):
    apply_patch(workspace, task.patch)
    deep = _nest(workspace, depth)
    try:
        changes = workspace_changes(ensure_repo(task), workspace)
    finally:
        _unnest(workspace / "d")
    result = verify(task, changes)
    assert set(result.tests.values()) == {"passed"}, result
    if carried:
        assert changes[deep] == (None, b"at the bottom\n") and not changes.skipped
        assert result.reward == 1 and deep in result.applied
    else:
        assert set(changes.skipped.values()) == {"oversized_file"} and deep not in changes
        assert result.reward == 0 and result.flags == ["oversized_file"]


@pytest.mark.parametrize(("depth", "carried"), [(1100, True), (3000, False)])
def test_a_folder_nested_thousands_deep_in_the_sandbox_gets_a_verdict(task, depth, carried):
    repo = ensure_repo(task)
    deep = "d/" * depth + "deep.txt"
    make = (
        f"import os\nfor _ in range({depth}):\n    os.mkdir('d'); os.chdir('d')\n"
        "open('deep.txt', 'w').write('at the bottom\\n')\n"
    )
    with open_sandbox(repo) as sandbox:
        text = sandbox.read_file("nkims.py").decode()
        sandbox.write_file("nkims.py", text.replace("xut = 1", "xut = 0"))
        assert sandbox.exec(["python3", "-c", make]).ok
        assert ("deep.txt" in sandbox.diff()) == carried
        changes = sandbox_changes(sandbox, repo)
    result = verify(task, changes)
    assert set(result.tests.values()) == {"passed"}, result
    if carried:
        assert changes[deep] == (None, b"at the bottom\n") and not changes.skipped
        assert result.reward == 1
    else:
        assert set(changes.skipped.values()) == {"oversized_file"} and deep not in changes
        assert result.reward == 0 and result.flags == ["oversized_file"]


def test_a_hard_link_to_a_host_file_is_never_read(task, workspace, tmp_path):
    # A file outside the workspace, on its file system, linked in: the grading copy's module
    # fails its import if the link's bytes reach it.
    marker = secrets.token_hex(16)
    (tmp_path / "host-secret.txt").write_text(marker)
    apply_patch(workspace, task.patch)
    os.link(tmp_path / "host-secret.txt", workspace / "leak.txt")
    append(
        module_path(workspace),
        "\n\ntry:\n    _LEAK = open('leak.txt').read()\nexcept OSError:\n    _LEAK = ''\n"
        f"if {marker[:8]!r} + {marker[8:]!r} in _LEAK:\n    raise ImportError('host read')\n",
    )
    changes = workspace_changes(ensure_repo(task), workspace)
    assert changes.skipped == {"leak.txt": "special_file"}
    assert all(marker.encode() not in (new or b"") for _, new in changes.values())
    result = verify(task, changes)
    assert result.reward == 0 and result.flags == ["special_file"], result
    assert set(result.tests.values()) == {"passed"} and "leak.txt" not in result.applied
    assert marker not in repr(result)


def test_hard_links_that_reveal_nothing_are_read(task, workspace, tmp_path):
    # Two names of one new workspace file; the module as a link into another checkout
    # (`cp -al`), holding the base's bytes: nothing outside the workspace is revealed.
    other = checkout(task, tmp_path / "other")
    module_path(workspace).unlink()
    os.link(module_path(other), module_path(workspace))
    (workspace / "helper.py").write_text("VALUE = 1\n")
    os.link(workspace / "helper.py", workspace / "alias.py")
    changes = workspace_changes(ensure_repo(task), workspace)
    assert not changes.skipped
    assert dict(changes) == dict.fromkeys(["alias.py", "helper.py"], (None, b"VALUE = 1\n"))
    apply_patch(workspace, task.patch)  # a new file: the link into the other copy is gone
    result = verify(task, workspace_changes(ensure_repo(task), workspace))
    assert result.reward == 1 and result.applied == ["alias.py", "helper.py", "nkims.py"]


def test_a_hard_link_in_the_sandbox_stays_in_the_workspace(task):
    # The kernel refuses a link across mounts (EXDEV): the sandbox's host paths, /tmp and
    # the interpreter are other mounts than the workspace, so a link there names a file of
    # the workspace, read as a copy.
    repo = ensure_repo(task)
    with open_sandbox(repo) as sandbox:
        text = sandbox.read_file("nkims.py").decode()
        sandbox.write_file("nkims.py", text.replace("xut = 1", "xut = 0"))
        for target in (os.path.realpath(sys.executable), "/tmp/x"):
            run = sandbox.exec(f"touch /tmp/x; ln {target} leak.txt")
            assert not run.ok and "cross-device" in run.stderr, run
        assert sandbox.exec("ln nkims.py copy.py && test $(stat -c %h copy.py) = 2").ok
        changes = sandbox_changes(sandbox, repo)
    assert not changes.skipped and changes["copy.py"] == (None, changes["nkims.py"][1])
    assert verify(task, changes).reward == 1
