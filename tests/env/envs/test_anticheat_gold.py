"""No gold patch of the micro suite raises an anti-cheat flag: the static checks read every
gold fix's changed files (base bytes from the task's repository, new bytes after `git
apply` of the gold patch), with the hidden tests' literals, as the verifier does. This is
the quick form of the slow all-gold grading in verifier/test_verdict.py, for the checks alone."""

import re
from pathlib import Path

from fleetrl.envs import anticheat
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier.hidden import hidden_test_sources
from fleetrl.types import Task


def gold_changes(task: Task, scratch: Path) -> dict[str, tuple[bytes | None, bytes | None]]:
    """{path: (base bytes, bytes after the gold patch)} for every file the patch touches."""
    repo = ensure_repo(task)
    paths = re.findall(r"^diff --git a/\S+ b/(\S+)$", task.patch, flags=re.M)
    scratch.mkdir()
    for path in paths:
        if (repo / path).is_file():
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_bytes((repo / path).read_bytes())
    apply_patch(scratch, task.patch)
    return {
        path: (
            (repo / path).read_bytes() if (repo / path).is_file() else None,
            (scratch / path).read_bytes() if (scratch / path).is_file() else None,
        )
        for path in paths
    }


def test_no_gold_patch_raises_a_flag(tmp_path):
    tasks = load_tasks(suite="micro")
    assert len(tasks) == 1120
    flagged = {}
    for task in tasks:
        changes = gold_changes(task, tmp_path / task.instance_id)
        assert changes and all(new is not None for _, new in changes.values())
        flags = anticheat.path_flags(changes) | anticheat.code_flags(
            changes, anticheat.test_facts(hidden_test_sources(task))
        )
        if flags:
            flagged[task.instance_id] = sorted(flags)
    assert flagged == {}
