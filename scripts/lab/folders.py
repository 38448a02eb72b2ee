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

from fleetrl.envs.micro.suite import _fresh_specs, _Spec, _task, _write_base
from fleetrl.envs.tasks.git import commit_all
from fleetrl.envs.tasks.records import write_jsonl
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
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


def fresh_train_tasks(size: int, draw_as: str, seed: str, prefix: str, repos: Path) -> list[Task]:
    """`size` micro training tasks beyond the suite, drawn like `draw_as` tasks from
    `seed` (`_fresh_specs`), ids `<prefix>-<index>`, repositories written under `repos`
    (which must not hold them yet). For task folders that train on other symbols than the
    suite's train split, e.g. the positive control of `scripts/control_tasks.py`."""
    return [write_fresh(spec, repos) for spec in _fresh_specs(size, draw_as, seed, prefix)]


def write_fresh(spec: _Spec, repos: Path, split: str = "train") -> Task:
    """The Task of a spec beyond the suite, filed under `split`, its repository written
    under `repos`."""
    repo = repos / spec.instance_id
    task = dataclasses.replace(_task(spec, repo), split=split)
    repo.mkdir(parents=True)
    _write_base(spec, repo)
    if commit_all(repo) != task.base_commit:
        raise RuntimeError(f"{spec.instance_id}: the written repository is not base_commit")
    return task
