"""The suite registry: bundled task suites by name, and the one task resolver.

    --suite NAME ─▶ Suite.build()      (records made in code, repositories not yet written)
    --tasks DIR  ─▶ load_task_dir(DIR) (records read from JSONL files)
                 └─▶ load_tasks / get_task (optionally one split, or one instance id)

A suite plugs in with `register_suite`; the bundled `micro`, `product` and `long` suites are
registered here, so importing this module is enough to find them. `guide_for` hands out a
task's guide (`fleetrl.envs.tasks.guide`): its suite's (the micro expert for the bundled
ones), else the gold-patch guide for any task with a gold patch (a `fleetrl tasks make`
folder's); `grading_for` says how the verifier runs a task's hidden tests (its suite's
`grading`). A suite's repositories are written on first use by
`fleetrl.envs.tasks.workspace.ensure_repo`, which asks the registry for the suite's
`materialise`. Suites themselves never import this module: they hand over plain functions.

Not covered: downloading suites; suites whose records change between calls.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fleetrl.config import TasksSection
from fleetrl.envs.long import suite as long
from fleetrl.envs.long.expert import LONG_GUIDE
from fleetrl.envs.micro import suite as micro
from fleetrl.envs.micro.guide import MICRO_GUIDE
from fleetrl.envs.tasks.gold_guide import GOLD_PATCH_GUIDE
from fleetrl.envs.tasks.guide import Guide
from fleetrl.envs.tasks.records import TaskError, load_task_dir
from fleetrl.types import Task


@dataclass(frozen=True)
class Suite:
    """A bundled task suite: records built in code, repositories written on demand."""

    name: str
    build: Callable[[], list[Task]]  # every record, in a fixed order; fast and deterministic
    materialise: Callable[[Task, Path], None]  # write a task's base tree into an empty folder
    guide: Guide | None = None  # its tasks' guide; None: the gold-patch guide
    # How the verifier runs its hidden tests: "calls" (they call the code under test with
    # plain data only, so they run in a process that never imports the workspace and each
    # call crosses to another: fleetrl.envs.verifier.calls) or "pytest" (in-process, under
    # the grader runner's defences).
    grading: Literal["calls", "pytest"] = "pytest"


_SUITES: dict[str, Suite] = {
    "micro": Suite("micro", micro.build_suite, micro.materialise, MICRO_GUIDE, "calls"),
    "product": Suite(
        "product", micro.build_product_suite, micro.materialise_product, MICRO_GUIDE, "calls"
    ),
    "long": Suite("long", long.build_suite, long.materialise, LONG_GUIDE, "calls"),
}


def register_suite(suite: Suite) -> None:
    """Make a suite loadable by name (`load_tasks(suite=...)`, `fleetrl tasks --suite`)."""
    _SUITES[suite.name] = suite


def suite_names() -> list[str]:
    """Names of the registered suites."""
    return sorted(_SUITES)


def get_suite(name: str) -> Suite:
    """The registered suite called `name`; TaskError listing the known ones otherwise."""
    if name not in _SUITES:
        raise TaskError(f"unknown suite {name!r} (known: {', '.join(sorted(_SUITES))})")
    return _SUITES[name]


def guide_for(task: Task) -> Guide | None:
    """The guide of `task`: its suite's when that has one, else the gold-patch guide when
    the task has a gold patch (tasks of a folder, renamed copies: `task.suite` is "");
    None without either."""
    suite = _SUITES.get(task.suite)
    if suite is not None and suite.guide is not None:
        return suite.guide
    return GOLD_PATCH_GUIDE if task.patch.strip() else None


def grading_for(task: Task) -> str:
    """How the verifier grades `task`: its suite's mode ("calls" or "pytest"); "pytest" for
    a task of no registered suite (a task folder's, a renamed copy)."""
    suite = _SUITES.get(task.suite)
    return suite.grading if suite is not None else "pytest"


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
        tasks, where = get_suite(suite).build(), f"suite {suite!r}"
    if split is None:
        return tasks
    chosen = [task for task in tasks if task.split == split]
    if not chosen:
        splits = sorted({task.split for task in tasks if task.split})
        known = f"its splits: {', '.join(splits)}" if splits else "its tasks have no split"
        raise TaskError(f"no split {split!r} in {where} ({known})")
    return chosen


def configured_tasks(source: TasksSection, split: str) -> list[Task]:
    """The tasks of `split` that a run configuration's `tasks` section names: its task
    folder when set, else its bundled suite (`load_tasks`)."""
    if source.tasks_dir is not None:
        return load_tasks(tasks_dir=Path(source.tasks_dir), split=split)
    return load_tasks(suite=source.suite, split=split)


def training_tasks(source: TasksSection, model: Path | None = None) -> list[Task]:
    """The tasks RL draws groups from: the configured `split`, less those the evaluation
    `source.skip_solved` names as solved in every sample (checked to be of the weights of
    `model`, the checkpoint RL starts from, when given)."""
    return without_solved(configured_tasks(source, source.split), source, model)


def without_solved(
    tasks: list[Task], source: TasksSection, model: Path | None = None
) -> list[Task]:
    """`tasks` (the configured split's) less those `source.skip_solved` names as solved in
    every sample; all of them when it is unset. `model`: see `solved_tasks`."""
    if source.skip_solved is None:
        return tasks
    solved = solved_tasks(Path(source.skip_solved), source.split, model)
    if not solved & {task.instance_id for task in tasks}:
        raise TaskError(
            f"tasks.skip_solved: none of the tasks {source.skip_solved} evaluated is in "
            f"the {source.split!r} split configured; was it made on another suite?"
        )
    kept = [task for task in tasks if task.instance_id not in solved]
    if not kept:
        raise TaskError(f"tasks.skip_solved: {source.skip_solved} solves every task; none left")
    return kept


def solved_tasks(path: Path, split: str, model: Path | None = None) -> set[str]:
    """Ids of the tasks an evaluation of `split` (`fleetrl eval ... --json`) passed in every
    sample. Given the checkpoint `model`, the evaluation must be of its weights: another
    model's solved tasks are not the ones this model has nothing to learn from."""
    try:
        document = json.loads(path.read_text())
    except OSError as err:
        raise TaskError(f"tasks.skip_solved: cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError:
        raise TaskError(f"tasks.skip_solved: {path} is not JSON") from None
    made_by = f"`fleetrl eval MODEL --split {split} --samples 4 --json`"
    if not isinstance(document, dict):
        document = {}
    passes, samples = document.get("task_passes"), document.get("samples_per_task")
    if not isinstance(passes, dict) or not isinstance(samples, int) or samples < 1:
        raise TaskError(f"tasks.skip_solved: {path} is not the JSON of {made_by}")
    if document.get("split") != split:
        raise TaskError(
            f"tasks.skip_solved: {path} evaluated split {document.get('split')!r}, "
            f"not the {split!r} that RL draws from; make it with {made_by}"
        )
    if model is not None and document.get("weights") != _weights_digest(model):
        evaluated = "other weights" if "weights" in document else "weights it does not name"
        raise TaskError(
            f"tasks.skip_solved: {path} evaluated {evaluated}, not those of model.path (RL "
            f"would leave out what another model solved); make it with {made_by}, or "
            "turn it off with --set tasks.skip_solved="
        )
    return {task for task, passed in passes.items() if passed >= samples}


def _weights_digest(model: Path) -> str:
    # Imported here: the checkpoint module loads torch, which listing tasks never needs.
    from fleetrl.model.checkpoint import weights_digest

    return weights_digest(model)


def get_task(instance_id: str, suite: str | None = None, tasks_dir: Path | None = None) -> Task:
    """One task by id, from a task folder, a named suite, or (neither given) any bundled suite."""
    if tasks_dir is not None or suite is not None:
        pools = [(load_tasks(suite=suite, tasks_dir=tasks_dir), str(tasks_dir or suite))]
    else:
        pools = [(get_suite(name).build(), name) for name in suite_names()]
    for tasks, _ in pools:
        for task in tasks:
            if task.instance_id == instance_id:
                return task
    ids = [task.instance_id for tasks, _ in pools for task in tasks]
    close = difflib.get_close_matches(instance_id, ids, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    where = ", ".join(where for _, where in pools)
    raise TaskError(f"unknown task id {instance_id!r} in {where}{hint}")
