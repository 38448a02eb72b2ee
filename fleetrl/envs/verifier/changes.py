"""The agent's changes: what differs from the base repository, read without trusting it.

Contract: `workspace_changes` (a workspace directory) and `sandbox_changes` (the agent's
live sandbox) return `Changes`, path -> (base bytes, new bytes), None for absent; the
changed paths that cannot be carried into a grading are in `Changes.skipped` with their
flag (`special_file`, `oversized_file`). Nothing is followed, or read whole, before its
lstat says it is a regular file within `MAX_FILE_BYTES` (`MAX_CHANGE_BYTES` for all changed
files together); VCS state and interpreter caches are never changes. Folders are walked
with a stack, never recursion: a folder too deep to name in a grading copy
(`MAX_PATH_BYTES`) is not entered and is `oversized_file`.

Hard links: a workspace folder's file with more than one link may be a host file linked
in (`ln ~/.ssh/id_rsa notes.txt`). It is read only when every one of its links is in the
workspace or the base repository; else it is never read nor applied (`special_file`),
unless it is the base's own file or holds the base file's bytes (compared, never carried).
In the agent's sandbox a hard link cannot leave the workspace's mount (EXDEV).

What is not covered: in the agent's sandbox, a link that resolves inside the workspace is
read as a copy of its target (the sandbox API reports no file types).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

from fleetrl.envs.sandbox import Sandbox
from fleetrl.envs.sandbox.changes import is_ignored, too_deep, walk_files

# A fix is a source edit: no honest change needs a bigger file, and reading a 64 MiB file
# whole tripled the grader's memory. Larger changed files are not read (`oversized_file`).
MAX_FILE_BYTES = 4 << 20
MAX_CHANGE_BYTES = 64 << 20  # all changed files of one submission together


class Changes(dict[str, tuple[bytes | None, bytes | None]]):
    """The agent's changes, path -> (base bytes, new bytes); None = absent (or unread).

    `skipped` holds the changed paths that cannot be carried into a grading, with the flag
    each raises: `special_file` (a link, FIFO, socket or device) or `oversized_file`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.skipped: dict[str, str] = {}


def _read_regular(
    path: str, limit: int = MAX_FILE_BYTES, vetted: os.stat_result | None = None
) -> bytes | None:
    """Bytes of `path` if it is a regular file of at most `limit` bytes, reached without
    following a final link (FIFOs do not block: opened non-blocking), and the very file
    `vetted` describes when given (same inode, no new link); else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if vetted is not None and (
            (st.st_dev, st.st_ino) != (vetted.st_dev, vetted.st_ino)
            or st.st_nlink > vetted.st_nlink
        ):
            return None  # replaced or linked again since its lstat
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _same_bytes(a: str, b: str) -> bool:
    """Whether two regular files hold the same bytes, compared in chunks."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        with open(os.open(a, flags), "rb") as fa, open(os.open(b, flags), "rb") as fb:
            while True:
                chunk = fa.read(1 << 20)
                if chunk != fb.read(1 << 20):
                    return False
                if not chunk:
                    return True
    except OSError:
        return False


def _same_link(a: str, b: str) -> bool:
    """Whether both paths are links with the same target (read, never followed)."""
    try:
        return os.readlink(a) == os.readlink(b)
    except OSError:
        return False


def _tree(root: str) -> tuple[dict[str, os.stat_result], set[str]]:
    """lstat of every non-directory under `root`, by relative path (links are listed, never
    followed; names that are not UTF-8 come back with surrogate escapes), and the paths too
    deep to enter or name (`MAX_PATH_BYTES`), never looked into."""
    out: dict[str, os.stat_result] = {}
    deep: set[str] = set()
    for rel in walk_files(root):
        if too_deep(rel):
            deep.add(rel)
            continue
        try:
            st = os.lstat(os.path.join(root, rel))
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out[rel] = st
    return out, deep


def _linked(*trees: dict[str, os.stat_result]) -> Counter[tuple[int, int]]:
    """How many paths of `trees` name each inode that has more than one link."""
    return Counter((s.st_dev, s.st_ino) for tree in trees for s in tree.values() if s.st_nlink > 1)


def _is_base_file(old: str, new: str) -> bool:
    """Whether workspace file `new` is the base file `old` itself (one inode) or holds the
    same bytes; their lstat sizes are compared before any byte is."""
    try:
        a, b = os.lstat(old), os.lstat(new)
    except OSError:
        return False
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
        return True
    return a.st_size == b.st_size and _same_bytes(old, new)


def workspace_changes(base: Path, workspace: Path) -> Changes:
    """What differs between a workspace directory and the repository it started from.

    Nothing in the workspace is followed or read whole before its lstat says it is a
    regular file within the size limits.
    """
    (before, _), (after, deep) = _tree(str(base)), _tree(str(workspace))
    changes, budget, linked = Changes(), MAX_CHANGE_BYTES, _linked(before, after)
    for path in sorted(deep):
        changes.skipped[path] = "oversized_file"  # a path no grading copy could name
    for path in sorted(before.keys() | after.keys()):
        old_st, new_st = before.get(path), after.get(path)
        old_path, new_path = os.path.join(base, path), os.path.join(workspace, path)
        old_regular = old_st is not None and stat.S_ISREG(old_st.st_mode)
        if new_st is None:
            changes[path] = (_read_regular(old_path) if old_regular else None, None)
        elif not stat.S_ISREG(new_st.st_mode):
            if not (old_st is not None and _same_link(old_path, new_path)):
                changes.skipped[path] = "special_file"
        elif new_st.st_nlink > max(1, linked[new_st.st_dev, new_st.st_ino]):
            # A link of a file outside both trees, maybe a host file: never read, unless it
            # is the base's own file or holds its bytes (compared in place, never carried).
            if not (old_regular and _is_base_file(old_path, new_path)):
                changes.skipped[path] = "special_file"
        elif new_st.st_size > min(MAX_FILE_BYTES, budget):
            unchanged = old_st is not None and old_regular and old_st.st_size == new_st.st_size
            if not (unchanged and _same_bytes(old_path, new_path)):
                changes.skipped[path] = "oversized_file"
        else:
            new = _read_regular(new_path, vetted=new_st)
            old = _read_regular(old_path) if old_regular else None
            if new is None:
                changes.skipped[path] = "special_file"  # replaced while being read
            elif not (old_regular and old == new):
                budget -= len(new)
                changes[path] = (old, new)
    return changes


def sandbox_changes(sandbox: Sandbox, base: Path) -> Changes:
    """What the agent changed in its sandbox, relative to the base repository.

    Reads go through the sandbox, which never leaves the workspace: a link that points out
    of it (or at a directory) cannot be read and is flagged `special_file`.
    """
    changes, budget = Changes(), MAX_CHANGE_BYTES
    for change in sandbox.changes():
        if is_ignored(change.path):
            continue
        if too_deep(change.path):
            changes.skipped[change.path] = "oversized_file"  # a path no grading copy could name
            continue
        old = None if change.kind == "added" else _read_regular(str(base / change.path))
        if change.kind == "deleted":
            changes[change.path] = (old, None)
            continue
        limit = min(MAX_FILE_BYTES, budget)
        try:
            new = sandbox.read_file(change.path, max_bytes=limit + 1)
        except OSError:
            changes.skipped[change.path] = "special_file"
            continue
        if len(new) > limit:
            changes.skipped[change.path] = "oversized_file"
        else:
            budget -= len(new)
            changes[change.path] = (old, new)
    return changes
