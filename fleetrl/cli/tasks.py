"""`fleetrl tasks`: list, show and check out tasks, and make new ones from a repository.

Wired into the main CLI as `app.add_typer(tasks_app, name="tasks")`. Every command reads
tasks from a bundled suite (`--suite`, default micro) or from a task folder (`--tasks DIR`,
as written by `fleetrl tasks make`). Errors a user can cause (an unknown id, a bad folder, a
malformed record) end with a one-line message and exit code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from fleetrl.cli.common import fail

tasks_app = typer.Typer(
    help=(
        "Coding tasks in the SWE-bench format: the bundled `micro` suite, task folders "
        "written by `make`, the agent's starting workspace."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

SuiteOption = Annotated[
    str | None, typer.Option("--suite", help="Bundled suite to read (default: micro).")
]
TasksOption = Annotated[
    Path | None,
    typer.Option(
        "--tasks",
        help="Task folder or JSONL file (e.g. from `fleetrl tasks make`) instead of a suite.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


def _source(suite: str | None, tasks_dir: Path | None) -> tuple[str | None, Path | None]:
    """(suite, tasks_dir) for load_tasks/get_task: a task folder if given, else a suite."""
    if suite is not None and tasks_dir is not None:
        raise fail("give --suite or --tasks, not both")
    return (None, tasks_dir) if tasks_dir is not None else (suite or "micro", None)


@tasks_app.command("list")
def list_tasks(
    suite: SuiteOption = None,
    tasks_dir: TasksOption = None,
    split: Annotated[
        str | None,
        typer.Option(help="Only this split (micro: train, val, heldout, heldout-templates)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Print the task ids of a suite or a task folder (--json: a JSON list)."""
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import load_tasks

    try:
        name, folder = _source(suite, tasks_dir)
        tasks = load_tasks(suite=name, tasks_dir=folder, split=split)
    except TaskError as err:
        raise fail(str(err)) from None
    ids = [task.instance_id for task in tasks]
    if not ids and not as_json:
        raise fail(f"no tasks in {tasks_dir or suite or 'micro'}")
    typer.echo(json.dumps(ids) if as_json else "\n".join(ids))


@tasks_app.command("show")
def show(
    task_id: Annotated[str, typer.Argument(help="The task's instance_id.")],
    suite: SuiteOption = None,
    tasks_dir: TasksOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print one task (--json: the whole record, gold patch and hidden tests included).

    The JSON record is for tooling: never show it to an agent. A bundled suite's task
    repository is written first, so the printed `repo` path exists.
    """
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import get_task
    from fleetrl.envs.tasks.workspace import ensure_repo

    try:
        if suite is not None and tasks_dir is not None:
            raise fail("give --suite or --tasks, not both")
        task = get_task(task_id, suite=suite, tasks_dir=tasks_dir)  # neither: every suite
        ensure_repo(task)
    except TaskError as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(task), indent=2))
        return
    where = f"{task.suite}/{task.split}" if task.suite else task.origin
    typer.echo(f"{task.instance_id}  ({where}, {task.kind or 'unknown kind'})")
    typer.echo(f"repo: {task.repo} @ {task.base_commit[:12]}")
    f2p, p2p = len(task.FAIL_TO_PASS), len(task.PASS_TO_PASS)
    typer.echo(f"tests: {f2p} fail-to-pass, {p2p} pass-to-pass")
    typer.echo(f"\n{task.problem_statement.rstrip()}\n")
    if task.facts:
        typer.echo(f"facts a solution carries: {', '.join(task.facts)}")
    typer.echo("(gold patch and hidden tests: --json)")


@tasks_app.command("checkout")
def checkout_task(
    task_id: Annotated[str, typer.Argument(help="The task's instance_id.")],
    dest: Annotated[Path, typer.Argument(help="Folder to create (absent or empty).")],
    suite: SuiteOption = None,
    tasks_dir: TasksOption = None,
) -> None:
    """Write the agent's starting workspace for a task into DEST.

    DEST gets the base tree and a one-commit .git whose HEAD is the base commit: no hidden
    tests, no gold patch, no other history, no remote.
    """
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import get_task
    from fleetrl.envs.tasks.workspace import checkout

    try:
        name, folder = _source(suite, tasks_dir)
        task = get_task(task_id, suite=name, tasks_dir=folder)
        checkout(task, dest)
    except TaskError as err:
        raise fail(str(err)) from None
    typer.echo(f"wrote {task.instance_id} to {dest} (base commit {task.base_commit[:12]})")


@tasks_app.command("make")
def make(
    repo_dir: Annotated[Path, typer.Argument(help="Python repository with a pytest suite.")],
    out: Annotated[Path, typer.Option("--out", help="Task folder to write (absent or empty).")],
    seed: Annotated[int, typer.Option(help="Seed of the candidate order.")] = 0,
    max_tasks: Annotated[int, typer.Option(help="Stop after keeping this many tasks.")] = 50,
    kinds: Annotated[
        str | None,
        typer.Option(help="Comma-separated mutation kinds (default: all; see docs/tasks.md)."),
    ] = None,
    jobs: Annotated[int, typer.Option(help="Test runs in parallel (0: up to 4).")] = 0,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds per mutated test run (default: from baseline).")
    ] = None,
    pytest_arg: Annotated[
        list[str] | None,
        typer.Option(help="Extra pytest argument for every run, repeatable: --pytest-arg=-x."),
    ] = None,
    val: Annotated[
        float, typer.Option(help="Fraction of the functions whose tasks go to `val`.")
    ] = 0.1,
    heldout: Annotated[
        float, typer.Option(help="Fraction of the functions whose tasks go to `heldout`.")
    ] = 0.2,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Make bug-fix tasks from a Python repository with a pytest suite (SWE-smith style).

    Each candidate is one syntax-tree mutation or a deleted function body; it is kept iff
    it makes a passing test fail while the rest of the suite still runs, and the verifier
    scores its gold fix 1 and the bug 0 (the progress bar counts candidates tried). Writes
    OUT/tasks.jsonl, one git repository per task under OUT/repos/, and OUT/report.json.
    Tasks are split by function into train, val (choices) and heldout (reporting), so
    `fleetrl train --set tasks.tasks_dir=OUT` and `fleetrl eval CKPT --tasks OUT` work on
    the folder as on the bundled suite.
    """
    from fleetrl.envs.tasks.generator import REPORT_FILE, make_tasks
    from fleetrl.envs.tasks.mutations import KINDS
    from fleetrl.envs.tasks.records import TaskError

    chosen = [k.strip() for k in kinds.split(",") if k.strip()] if kinds else list(KINDS)
    if jobs < 0:
        raise fail(f"--jobs must be >= 0 (0: up to 4), not {jobs}")
    try:
        tasks = make_tasks(
            repo_dir,
            out,
            seed=seed,
            max_tasks=max_tasks,
            kinds=chosen,
            progress=progress,
            jobs=jobs or None,
            timeout=timeout,
            pytest_args=pytest_arg or (),
            val=val,
            heldout=heldout,
        )
    except TaskError as err:
        raise fail(str(err)) from None
    report = json.loads((out / REPORT_FILE).read_text())
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    splits = ", ".join(f"{n} {name}" for name, n in report["splits"].items())
    tried = f"{report['tried']} of {report['candidates']} candidates tried"
    title = f"{len(tasks)} tasks ({splits}) from {tried} in {out}"
    table = Table(title=title)
    for column in ("kind", "tried", "kept"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind, counts in report["by_kind"].items():
        table.add_row(kind, str(counts["tried"]), str(counts["kept"]))
    Console().print(table)
    if report["rejected"]:
        typer.echo("rejected: " + ", ".join(f"{n} {why}" for why, n in report["rejected"].items()))
