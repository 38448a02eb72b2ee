"""`fleetrl eval` (pass@1 of a checkpoint under the protocol) and `fleetrl verify`
(grade one workspace)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, get_args

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config

MINI_SWE_AGENT = "mini-swe-agent"  # a harness, and the name of its shipped preset


def eval_command(
    checkpoint: Annotated[str, typer.Argument(help="Checkpoint directory, or `base`.")] = "base",
    split: Annotated[str | None, typer.Option(help="Split to report \\[eval.split].")] = None,
    best_temperature: Annotated[
        bool,
        typer.Option(
            "--best-temperature/--no-best-temperature",
            help="Choose the temperature on eval.val_split first (eval.temperatures), then "
            "report the split at it; the choice is kept per weights and settings, so every "
            "split of one model is reported at one temperature (a new --seed sweeps again); "
            "off: at --temperature.",
        ),
    ] = False,
    suite: Annotated[str | None, typer.Option(help="Bundled task suite \\[tasks.suite].")] = None,
    tasks: Annotated[
        Path | None, typer.Option(help="A generated task folder instead \\[tasks.tasks_dir].")
    ] = None,
    samples: Annotated[
        int | None, typer.Option(min=1, help="Samples per task on the split \\[eval.samples].")
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option(min=1, help="Or: at least N episodes on the split, tasks x samples."),
    ] = None,
    max_tasks: Annotated[
        int | None,
        typer.Option(help="Use only each split's first N tasks, 0: all \\[eval.max_tasks]."),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature, 0: greedy \\[rollout.temperature].")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed \\[trainer.seed].")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads \\[eval.threads].")] = None,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    transcripts: Annotated[
        Path | None,
        typer.Option(
            help="Also write every episode (task, reward, how it ended, the conversation as "
            "the model saw it) to this file as JSON lines, each as it is graded."
        ),
    ] = None,
    after_slip: Annotated[
        bool,
        typer.Option(
            "--after-slip",
            help="Measure recovery: every reported episode opens with the scripted expert "
            "reading the file and sending a mis-copied edit, which the tool refuses; the "
            "model takes over from there (micro tasks only).",
        ),
    ] = False,
    harness: Annotated[
        str | None,
        typer.Option(
            help="The agent harness the episodes run in: fleetrl or mini-swe-agent "
            "\\[rollout.harness]. mini-swe-agent without --config reads the shipped preset of "
            "that name (the budgets base-mswe was made for, the product suite).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """pass@1 of a checkpoint on a task split, with a 95% bootstrap interval over tasks.

    At one temperature, or at the best of a sweep on `val` (--best-temperature); also
    greedy pass@1, pass@8 and recovery from failed edits.

    Settings come from the run configuration tree (defaults, --config, --set); each flag
    below overrides the key in brackets after it. The protocol is in docs/evaluation.md."""
    shortcuts = {
        "tasks.suite": suite,
        "tasks.tasks_dir": str(tasks) if tasks else None,
        "eval.samples": samples,
        "eval.max_tasks": max_tasks,
        "rollout.temperature": temperature,
        "trainer.seed": seed,
        "eval.threads": threads,
        "rollout.harness": harness,
    }
    if suite is not None and tasks is not None:
        raise fail("give --suite or --tasks, not both")
    if harness is not None and harness not in harnesses():
        raise fail(f"--harness {harness!r}: choose one of {', '.join(harnesses())}")
    if harness == MINI_SWE_AGENT and config_file is None:
        config_file = Path(MINI_SWE_AGENT)  # the shipped preset: budgets, suite
    config = run_config(config_file, set_, shortcuts)
    if after_slip and config.rollout.harness != "fleetrl":
        raise fail(
            "--after-slip opens each episode with the expert's refused edit_file call, a tool "
            f"of fleetrl's own harness: it does not apply to {config.rollout.harness}"
        )
    from fleetrl.config import ConfigError

    try:
        config.rollout.check_installed()  # the engine's and the harness's packages
    except ConfigError as err:
        raise fail(str(err)) from None
    split = split or config.eval.split
    if best_temperature and temperature is not None:
        raise fail("--best-temperature chooses the temperature: drop --temperature")
    if best_temperature and split == config.eval.val_split:
        raise fail(
            f"--best-temperature chooses the temperature on {split!r} (eval.val_split): "
            "report another --split"
        )
    if samples is not None and episodes is not None:
        raise fail("give --samples or --episodes, not both")
    if transcripts is not None and not transcripts.parent.is_dir():
        raise fail(f"--transcripts: no directory {transcripts.parent}")
    if transcripts is not None and transcripts.is_dir():
        raise fail(f"--transcripts: {transcripts} is a directory, give a file path")
    import math
    import time

    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.model.checkpoint import CheckpointError, resolve_checkpoint
    from fleetrl.rollout.evaluate import EvalError, describe, protocol_report, split_tasks

    path = resolve_checkpoint(checkpoint)
    if not (path / "config.json").is_file():
        raise fail(f"{checkpoint} is not a checkpoint directory (no config.json)")
    start = time.monotonic()
    try:
        per_task = math.ceil(episodes / len(split_tasks(config, split))) if episodes else None
        chosen = None if best_temperature else config.rollout.temperature
        document = protocol_report(
            path, config, split, chosen, not as_json, per_task, transcripts, after_slip
        )
    except (TaskError, CheckpointError, EvalError, FileNotFoundError, PermissionError) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(document, indent=2))
        return
    for line in describe(document):
        typer.echo(line)
    typer.echo(f"({time.monotonic() - start:.0f} s)")


def harnesses() -> tuple[str, ...]:
    """The values `rollout.harness` takes (the configuration's own list)."""
    from fleetrl.config import RolloutSection

    return get_args(RolloutSection.model_fields["harness"].annotation)


def verify(
    task_id: Annotated[str, typer.Argument(help="Task instance id.")],
    workspace: Annotated[Path, typer.Option(help="The agent's workspace directory.")],
    suite: Annotated[str | None, typer.Option(help="Bundled suite (default: any).")] = None,
    tasks: Annotated[Path | None, typer.Option(help="A generated task folder.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds the hidden tests may run.")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Grade a workspace: its non-test changes, hidden tests, anti-cheat flags -> reward."""
    if not timeout > 0:
        raise fail(f"--timeout must be > 0 seconds, not {timeout:g}")
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import get_task
    from fleetrl.envs.verifier import verify_workspace

    try:
        task = get_task(task_id, suite=suite, tasks_dir=tasks)
        result = verify_workspace(task, workspace, timeout=timeout)
    except (TaskError, FileNotFoundError) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    for test, outcome in result.tests.items():
        typer.echo(f"{outcome:>8}  {test}")
    flags = ", ".join(result.flags) or "none"
    typer.echo(f"reward {result.reward:g}  (flags: {flags}; {result.duration_s:.2f} s)")
