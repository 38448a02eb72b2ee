"""What changed in a workspace vs its base, as `Change` records and as a git-style patch.

The verifier grades an agent by applying its patch to a pristine copy, so the patch must
apply with `git apply` (and `patch -p1`): git headers, `new file mode` / `deleted file
mode` / mode changes, symlinks as mode 120000, and "\\ No newline at end of file" markers.
Binary files are listed (`Change.binary`) and named in the patch, but carry no bytes.

Backends only say which paths *might* have changed (`candidates`): the bwrap backend reads
them off the overlay's upper layer, so cost grows with the size of the change, not of the
repository; the local backend offers every path. This module decides what really changed
by comparing both sides, reading through `fs` so workspace symlinks cannot point it
outside the workspace.

Walks never recurse (a folder nested thousands of levels deep is a loop, not a stack) and
never follow links. A folder whose path is longer than `MAX_PATH_BYTES` is not entered:
nothing under it could be named in a grading copy, so it is one `Change` (added, binary)
that no patch carries, and the verifier flags it. Hard links: inside a sandbox a link can
only join two files of the workspace's own mount (the kernel refuses one across mounts,
EXDEV), so reading it reads the workspace.

Not covered: renames (a rename is a deletion plus an addition), empty directories, and
ownership or timestamps (git ignores them too).
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fleetrl.envs.sandbox import fs
from fleetrl.envs.sandbox.types import Change

# Caches and tool state never belong in a patch; .git is the base's history, not the work.
# Bytecode outside __pycache__ is no cache: Python imports a sourceless .pyc, so it is a
# change (the verifier flags it). The verifier ignores the same folders.
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})
# A folder whose path (bytes, relative to the workspace) is longer is not entered: with a
# grading copy's own prefix, a path under it would pass Linux's PATH_MAX (4096 bytes).
MAX_PATH_BYTES = 3072


def is_ignored(rel: str) -> bool:
    """True for paths a patch never carries (caches, .git)."""
    return any(p in IGNORED_DIRS for p in rel.split("/"))


@dataclass(frozen=True)
class _Entry:
    """One side of a path: a regular file or a symlink (directories are not entries)."""

    mode: int  # git mode: 0o100644, 0o100755 or 0o120000
    data: bytes  # file content, or the symlink target


def _entry(root: str, rel: str) -> _Entry | None:
    st = fs.lstat_beneath(root, rel)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        return _Entry(0o120000, os.fsencode(fs.readlink_beneath(root, rel)))
    if stat.S_ISREG(st.st_mode):
        mode = 0o100755 if st.st_mode & 0o111 else 0o100644
        return _Entry(mode, fs.read_beneath(root, rel))
    return None  # directories, FIFOs, sockets, devices: nothing a patch can carry


def too_deep(rel: str) -> bool:
    """Whether a path is too long to be entered or carried (see `MAX_PATH_BYTES`)."""
    return len(os.fsencode(rel)) > MAX_PATH_BYTES


def scan(root: str, rel: str = "") -> Iterator[tuple[str, bool]]:
    """(path relative to `root`, is a folder) of every entry under `root/rel`, depth first
    with a stack, never following links; folders in IGNORED_DIRS and folders too deep to
    enter (`too_deep`) are listed but not entered; a folder that cannot be listed is skipped."""
    stack = [rel]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(os.path.join(root, folder) if folder else root) as entries:
                found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except OSError:
            continue
        for name, is_dir in found:
            path = f"{folder}/{name}" if folder else name
            yield path, is_dir
            if is_dir and name not in IGNORED_DIRS and not too_deep(path):
                stack.append(path)


def walk_files(root: str, rel: str = "") -> Iterator[str]:
    """Every non-directory path under `root/rel` (not following symlinks), ignored folders
    pruned, and every folder too deep to enter (see `MAX_PATH_BYTES`)."""
    top = os.path.join(root, rel) if rel else root
    if not os.path.isdir(top) or os.path.islink(top):
        return
    for path, is_dir in scan(root, rel):
        if not is_dir or (too_deep(path) and os.path.basename(path) not in IGNORED_DIRS):
            yield path


def _is_text(data: bytes) -> bool:
    if b"\0" in data[:8000]:  # git's own binary heuristic
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def compute_changes(base: str, view: str, candidates: Iterable[str]) -> list[Change]:
    """Changes among `candidates` between directory `base` and the workspace `view`."""
    return [change for change, _, _ in _compare(base, view, candidates)]


def _compare(
    base: str, view: str, candidates: Iterable[str]
) -> Iterator[tuple[Change, _Entry | None, _Entry | None]]:
    for rel in sorted(set(candidates)):
        if not rel or is_ignored(rel):
            continue
        if too_deep(rel):
            # A folder too deep to enter, or anything in one: never read, and no patch can
            # carry it; listed so that the verifier can say why it is not applied.
            if _present(view, rel):
                yield Change(rel, "added", True), None, None
            continue
        old, new = _entry(base, rel), _entry(view, rel)
        if old == new:
            continue
        kind = "added" if old is None else "deleted" if new is None else "modified"
        binary = any(e and e.mode != 0o120000 and not _is_text(e.data) for e in (old, new))
        yield Change(rel, kind, binary), old, new


def _present(root: str, rel: str) -> bool:
    """Whether `rel` exists under `root` (a path too long to check counts as present)."""
    try:
        return fs.lstat_beneath(root, rel) is not None
    except OSError:
        return True


def unified_diff(base: str, view: str, candidates: Iterable[str]) -> str:
    """A patch (git format) turning `base` into `view`, for the paths in `candidates`."""
    out: list[str] = []
    for change, old, new in _compare(base, view, candidates):
        if old is None and new is None:
            continue  # too deep to carry (see `MAX_PATH_BYTES`)
        if old is not None and new is not None and (old.mode == 0o120000) != (new.mode == 0o120000):
            # A file became a symlink or back: git writes a deletion then an addition.
            out += _file_patch(change.path, old, None, change.binary)
            out += _file_patch(change.path, None, new, change.binary)
        else:
            out += _file_patch(change.path, old, new, change.binary)
    return "".join(out)


def _quote(path: str) -> str:
    """Git's C-style quoting for paths with quotes, backslashes, control or non-ASCII."""
    if all(32 <= ord(c) < 127 and c not in '"\\' for c in path):
        return path
    escapes = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n"}
    out = []
    for byte in os.fsencode(path):
        c = chr(byte)
        if c in escapes:
            out.append(escapes[c])
        elif 32 <= byte < 127:
            out.append(c)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _lines(text: str) -> list[str]:
    """Split on "\\n" only (str.splitlines also splits on \\r, \\f, ... which git does not)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _file_patch(rel: str, old: _Entry | None, new: _Entry | None, binary: bool) -> list[str]:
    a, b = _quote(f"a/{rel}"), _quote(f"b/{rel}")
    lines = [f"diff --git {a} {b}\n"]
    if old is None and new is not None:
        lines.append(f"new file mode {new.mode:06o}\n")
    elif new is None and old is not None:
        lines.append(f"deleted file mode {old.mode:06o}\n")
    elif old is not None and new is not None and old.mode != new.mode:
        lines += [f"old mode {old.mode:06o}\n", f"new mode {new.mode:06o}\n"]
    old_data = old.data if old is not None else b""
    new_data = new.data if new is not None else b""
    if old_data == new_data:
        return lines  # mode change or empty file created/deleted: headers say it all
    from_name = a if old is not None else "/dev/null"
    to_name = b if new is not None else "/dev/null"
    if binary:
        return [*lines, f"Binary files {from_name} and {to_name} differ\n"]
    hunks = difflib.unified_diff(
        _lines(old_data.decode()),
        _lines(new_data.decode()),
        fromfile=from_name,
        tofile=to_name,
    )
    for line in hunks:
        lines.append(line)
        if not line.endswith("\n"):
            lines.append("\n\\ No newline at end of file\n")
    return lines


def upper_candidates(upper: str, base: str) -> Iterator[str]:
    """Paths that may differ, read off an overlay upper layer over lower layer `base`.

    The upper layer holds every file written, a whiteout (a 0:0 character device) for
    every deletion, and "opaque" directories that hide the lower directory of the same
    name. A whiteout, an opaque directory or a non-directory over a base directory can
    hide base files, so those base files become candidates too.
    """
    for rel, is_dir in scan(upper):
        yield rel
        if not is_dir or _is_opaque(os.path.join(upper, rel)):
            yield from walk_files(base, rel)  # nothing unless base has a directory there


def _is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False
