"""Hermetic git plumbing: the one identity, date and message every fleetrl commit has.

Task repositories and agent workspaces hold a single commit made here, so the same tree
always gets the same sha (a deterministic suite is byte-for-byte the same, shas included),
and `flat_commit_sha` can name that sha without running git. Diffs are git-style unified
diffs, applied with `git apply`. No user or system git configuration is ever read.

Not covered: history, branches, remotes (fleetrl's repositories have none).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
from pathlib import Path

from fleetrl.envs.tasks.records import TaskError

COMMIT_NAME = "fleetrl"
COMMIT_EMAIL = "tasks@fleetrl.invalid"
COMMIT_TIME = 1704067200  # 2024-01-01T00:00:00Z, in seconds since the epoch
COMMIT_MESSAGE = "base commit"


def git_env() -> dict[str, str]:
    """The environment for every git call: no user or system config, fixed commit identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    stamp = f"{COMMIT_TIME} +0000"
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,  # no hooks, signing, templates or aliases of the user
        GIT_AUTHOR_NAME=COMMIT_NAME,
        GIT_AUTHOR_EMAIL=COMMIT_EMAIL,
        GIT_AUTHOR_DATE=stamp,
        GIT_COMMITTER_NAME=COMMIT_NAME,
        GIT_COMMITTER_EMAIL=COMMIT_EMAIL,
        GIT_COMMITTER_DATE=stamp,
    )
    return env


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    """Run `git ARGS` in `cwd` hermetically and return stdout; TaskError with stderr on failure."""
    env = git_env()
    # Stop repository discovery at cwd: a plain folder inside some other git checkout must
    # not be treated as a subdirectory of it (that would change `git apply`'s paths).
    env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, env=env, check=False
    )
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise TaskError(f"git {args[0]} failed in {cwd}: {' / '.join(message[-3:])}")
    return proc.stdout.decode(errors="replace")


def commit_all(workdir: Path) -> str:
    """Make `workdir` a git repository whose only commit holds all its files; return the sha."""
    git(workdir, "init", "-q", "-b", "main", "--template=")  # no sample hooks: 872 repos
    git(workdir, "add", "-A", "-f", ".")  # -f: the tree is already the wanted file set
    git(workdir, "commit", "-q", "--no-verify", "--allow-empty", "-m", COMMIT_MESSAGE)
    return git(workdir, "rev-parse", "HEAD").strip()


def flat_commit_sha(files: dict[str, bytes]) -> str:
    """The sha `commit_all` gives a folder holding exactly `files` (no subfolders).

    Computed from git's object format without running git, so a bundled suite can name its
    base commits without writing hundreds of repositories.
    """

    def object_sha(kind: str, body: bytes) -> bytes:
        return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).digest()

    entries = b""
    for name in sorted(files, key=str.encode):  # git orders tree entries by raw bytes
        if "/" in name:
            raise ValueError(f"flat_commit_sha takes top-level files only, got {name!r}")
        entries += b"100644 " + name.encode() + b"\0" + object_sha("blob", files[name])
    who = f"{COMMIT_NAME} <{COMMIT_EMAIL}> {COMMIT_TIME} +0000"
    commit = (
        f"tree {object_sha('tree', entries).hex()}\n"
        f"author {who}\ncommitter {who}\n\n{COMMIT_MESSAGE}\n"
    )
    return object_sha("commit", commit.encode()).hex()


def unified_diff(path: str, old: str | None, new: str) -> str:
    """A git-style unified diff turning `old` into `new` at `path` (`old=None`: a new file)."""
    header = f"diff --git a/{path} b/{path}\n"
    if old is None:
        header += "new file mode 100644\n"
    body = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        "/dev/null" if old is None else f"a/{path}",
        f"b/{path}",
    )
    return header + "".join(body)


def apply_patch(workdir: Path, patch: str) -> None:
    """Apply a unified diff to the files under `workdir` (git or not); TaskError if it fails."""
    if patch.strip():
        git(workdir, "apply", "--whitespace=nowarn", "-", stdin=patch.encode())
