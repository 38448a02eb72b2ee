"""Task records: the SWE-bench schema, JSONL task files and task folders.

A task is the SWE-bench record (`fleetrl.types.Task`) whose repository is a local git
directory holding exactly one commit, `base_commit`: the bug in place, every hidden test
file removed. The gold fix (`patch`) and the hidden tests (`test_patch`) exist only as
unified diffs in the record, so nothing in the repository reveals them.

A task folder holds `*.jsonl` files of records, e.g. one written by `fleetrl tasks make`.
A relative `repo` is resolved against the JSONL file's folder, so folders can move. A
malformed record raises `TaskError` naming the file, line and field; SWE-bench records'
extra fields are ignored and their JSON-encoded test lists decoded.

Not covered: bundled suites (`fleetrl.envs.tasks.suites`), writing repositories and workspaces
(`fleetrl.envs.tasks.workspace`), records whose repository is not on local disk.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fleetrl.types import Task

TASKS_FILE = "tasks.jsonl"  # the record file inside a task folder


class TaskError(ValueError):
    """A task, task file or suite cannot be used as given; the message says what to fix."""


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
    facts: list[str] = []

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
