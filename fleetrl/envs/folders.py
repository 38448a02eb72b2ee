"""Task folders that train on tasks of one's own and are judged on the bundled suite's.

    own tasks (repositories already written) ─┐
    micro val, heldout, heldout-templates ────┴─▶ DIR/tasks.jsonl, DIR/repos/<id>

A run on such a folder (`--set tasks.tasks_dir=DIR`) chooses its knobs on the same `val`
and reports the same `heldout` and `heldout-templates` as a run on the suite, so the two
compare. The bundled tasks' repositories are written into the folder, not left in this
machine's cache, so the folder loads anywhere (a region on another machine, a fresh cache).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetrl.envs.records import write_jsonl
from fleetrl.envs.suites import load_tasks
from fleetrl.envs.workspace import ensure_repo
from fleetrl.types import Task

EVAL_SPLITS = ("val", "heldout", "heldout-templates")


def write_micro_folder(own: list[Task], folder: Path) -> Path:
    """Write `folder`/tasks.jsonl: the folder's `own` tasks (its train split, maybe more),
    then the bundled micro suite's evaluation splits unchanged. A bundled task among
    `own` (the suite's train split) or the evaluation splits gets its repository written
    under `folder`/repos. Returns the file's path."""
    folder = folder.resolve()
    suite = load_tasks(suite="micro")
    bundled = {task.instance_id for task in suite}
    tasks = own + [task for split in EVAL_SPLITS for task in suite if task.split == split]
    placed = []
    for task in tasks:
        if task.instance_id in bundled:
            task = dataclasses.replace(task, repo=str(folder / "repos" / task.instance_id))
            ensure_repo(task)
        placed.append(task)
    path = folder / "tasks.jsonl"
    write_jsonl(placed, path)
    return path
