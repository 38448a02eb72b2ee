"""Task records: parsing, loading, suite resolution, repositories and agent workspaces.

A task is the SWE-bench record (`fleetrl.types.Task`) whose repository is a local git
directory holding exactly one commit, `base_commit`: the bug in place, every hidden test
file removed. The gold fix (`patch`) and the hidden tests (`test_patch`) exist only as
unified diffs in the record, so nothing in the repository reveals them.

Where tasks come from:

- a bundled suite, by name (`load_tasks(suite="micro")`): records generated at runtime;
  the suite writes a task's repository under the cache directory on first use
  (`ensure_repo`). Suites plug in with `register_suite`.
- a task folder or JSONL file (`load_tasks(tasks_dir=...)`), e.g. one written by
  `fleetrl tasks make`. A relative `repo` is resolved against the JSONL file's folder, so
  folders can move. A malformed record raises `TaskError` naming the file, line and field.

`checkout` writes the agent's starting workspace: the base tree plus a fresh `.git` with a
single commit made by the same fixed identity, so its HEAD equals `base_commit` for every
repository fleetrl wrote, and there is no other history, no remote, no hidden test, no
gold patch. What is not covered: running tests (`fleetrl.envs.testrun`) and grading (the
verifier); records whose repository is not on local disk.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fleetrl.types import Task

TASKS_FILE = "tasks.jsonl"  # the record file inside a task folder

# Every commit fleetrl makes uses this identity, date and message, so the same tree always
# gets the same sha (a deterministic suite is byte-for-byte the same, shas included).
COMMIT_NAME = "fleetrl"
COMMIT_EMAIL = "tasks@fleetrl.invalid"
COMMIT_TIME = 1704067200  # 2024-01-01T00:00:00Z, in seconds since the epoch
COMMIT_MESSAGE = "base commit"


class TaskError(ValueError):
    """A task, task file or suite cannot be used as given; the message says what to fix."""


# --- git -------------------------------------------------------------------------------


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
    git(workdir, "init", "-q", "-b", "main", "--template=")  # no sample hooks: 540 repos
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


# --- records ---------------------------------------------------------------------------


class _TaskRecord(BaseModel):
    """The JSON form of a Task; validation errors name the offending field."""

    model_config = ConfigDict(extra="ignore")  # SWE-bench records carry more fields

    instance_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # becomes a folder name
    repo: str = Field(min_length=1)
    base_commit: str = Field(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")
    problem_statement: str = Field(min_length=1)
    patch: str
    test_patch: str
    FAIL_TO_PASS: list[str] = Field(min_length=1)  # a task nothing fails in is not a task
    PASS_TO_PASS: list[str]
    suite: str = ""
    split: str = ""
    test_files: list[str] = []
    language: str = "python"
    kind: str = ""
    origin: str = ""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", "test_files", mode="before")
    @classmethod
    def _json_list(cls, value: object) -> object:
        # The SWE-bench datasets store these lists as JSON-encoded strings.
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value
        return value


def parse_task(data: object, where: str, base_dir: Path | None = None) -> Task:
    """Validate one JSON record and return it as a Task.

    `where` (e.g. "tasks.jsonl:3") prefixes error messages. A relative `repo` is resolved
    against `base_dir`; the resolved repository must be an existing directory.
    """
    if not isinstance(data, dict):
        raise TaskError(f"{where}: a task record must be a JSON object, got {type(data).__name__}")
    try:
        record = _TaskRecord.model_validate(data)
    except ValidationError as err:
        label = f" ({data['instance_id']})" if isinstance(data.get("instance_id"), str) else ""
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in e['loc']) or '?'!r}: {e['msg']}" for e in err.errors()
        )
        raise TaskError(f"{where}{label}: {problems}") from None
    repo = Path(record.repo).expanduser()
    if not repo.is_absolute() and base_dir is not None:
        repo = base_dir / repo
    if not repo.is_dir():
        raise TaskError(
            f"{where} ({record.instance_id}): field 'repo': {repo} is not a directory "
            "(it must be the task's local git repository)"
        )
    return Task(**{**record.model_dump(), "repo": str(repo.resolve())})


def load_jsonl(path: Path) -> list[Task]:
    """Read and validate every record of a JSONL task file (blank lines are skipped)."""
    tasks = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise TaskError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            tasks.append(parse_task(data, f"{path}:{number}", base_dir=path.parent))
    return tasks


def write_jsonl(tasks: list[Task], path: Path) -> None:
    """Write tasks as JSONL; repositories inside `path`'s folder are stored relative to it."""
    lines = []
    for task in tasks:
        record = dataclasses.asdict(task)
        repo = Path(task.repo)
        if repo.is_relative_to(path.parent.resolve()):
            record["repo"] = repo.relative_to(path.parent.resolve()).as_posix()
        lines.append(json.dumps(record) + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def load_task_dir(location: Path) -> list[Task]:
    """Load a task folder (every `*.jsonl` in it, sorted) or a single JSONL file."""
    location = Path(location)
    if location.is_file():
        files = [location]
    elif location.is_dir():
        files = sorted(location.glob("*.jsonl"))
        if not files:
            raise TaskError(f"{location} holds no *.jsonl task file")
    else:
        raise TaskError(f"{location} is neither a task folder nor a JSONL file")
    tasks = [task for file in files for task in load_jsonl(file)]
    _check_unique(tasks, str(location))
    return tasks


def _check_unique(tasks: list[Task], where: str) -> None:
    seen: set[str] = set()
    for task in tasks:
        if task.instance_id in seen:
            raise TaskError(f"{where}: field 'instance_id': {task.instance_id!r} appears twice")
        seen.add(task.instance_id)


# --- suites ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    """A bundled task suite: records built in code, repositories written on demand."""

    name: str
    build: Callable[[], list[Task]]  # every record, in a fixed order; fast and deterministic
    materialise: Callable[[Task, Path], None]  # write a task's base tree into an empty folder


_SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> None:
    """Make a suite loadable by name (`load_tasks(suite=...)`, `fleetrl tasks --suite`)."""
    _SUITES[suite.name] = suite


def _register_bundled() -> None:
    if "micro" not in _SUITES:
        from fleetrl.envs import micro  # imported late: micro itself imports this module

        register_suite(micro.SUITE)


def _suite(name: str) -> Suite:
    _register_bundled()
    if name not in _SUITES:
        raise TaskError(f"unknown suite {name!r} (known: {', '.join(sorted(_SUITES))})")
    return _SUITES[name]


def suite_names() -> list[str]:
    """Names of the registered suites."""
    _register_bundled()
    return sorted(_SUITES)


def cache_dir() -> Path:
    """Where bundled suites write task repositories: $FLEETRL_CACHE, else ~/.cache/fleetrl."""
    if os.environ.get("FLEETRL_CACHE"):
        return Path(os.environ["FLEETRL_CACHE"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "fleetrl"


def load_tasks(
    suite: str | None = None, tasks_dir: Path | None = None, split: str | None = None
) -> list[Task]:
    """The tasks of a bundled suite or of a task folder/JSONL file, optionally one split.

    This is the one resolver every command taking `--suite` / `--tasks` uses. Exactly one
    of `suite` and `tasks_dir` must be given.
    """
    if (suite is None) == (tasks_dir is None):
        raise TaskError("give exactly one of a suite name or a task folder")
    if tasks_dir is not None:
        tasks, where = load_task_dir(Path(tasks_dir)), str(tasks_dir)
    else:
        tasks, where = _suite(suite).build(), f"suite {suite!r}"
    if split is None:
        return tasks
    chosen = [task for task in tasks if task.split == split]
    if not chosen:
        splits = sorted({task.split for task in tasks if task.split})
        known = f"its splits: {', '.join(splits)}" if splits else "its tasks have no split"
        raise TaskError(f"no split {split!r} in {where} ({known})")
    return chosen


def get_task(instance_id: str, suite: str | None = None, tasks_dir: Path | None = None) -> Task:
    """One task by id, from a task folder, a named suite, or (neither given) any bundled suite."""
    if tasks_dir is not None or suite is not None:
        pools = [(load_tasks(suite=suite, tasks_dir=tasks_dir), str(tasks_dir or suite))]
    else:
        pools = [(_suite(name).build(), name) for name in suite_names()]
    for tasks, _ in pools:
        for task in tasks:
            if task.instance_id == instance_id:
                return task
    ids = [task.instance_id for tasks, _ in pools for task in tasks]
    close = difflib.get_close_matches(instance_id, ids, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    where = ", ".join(where for _, where in pools)
    raise TaskError(f"unknown task id {instance_id!r} in {where}{hint}")


# --- repositories and workspaces -------------------------------------------------------


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
    suite = _SUITES[task.suite]
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
