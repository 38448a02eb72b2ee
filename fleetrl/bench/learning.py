"""`fleetrl bench learning`: from one SFT-plateaued base, does RL teach more than more SFT?

    base checkpoint (SFT until its validation loss stopped improving; sft.json: its curves)
      ├─▶ rl:       `fleetrl train` at the run configuration (no eval; the `demo`
      │             preset, the command's default, gives the demo's model, tasks, budget)
      │             ─▶ rl/final, wall time W from the processes' start to the final weights
      │                (the regions' shutdown after them is `rl_run_s`, not W)
      └─▶ sft_more: SFT continued from the base on the same demonstrations (the tasks
                    its sft.json records, whatever tasks RL trains on), at the learning
                    rate its kept weights were trained at, for W seconds of training
    each of base, rl, sft_more: its temperature chosen on `eval.val_split`, then `heldout`
    and `heldout-templates` at that temperature (`protocol_report`: pass@1 with a bootstrap
    CI, greedy, pass@8, recovery) ─▶ goals ─▶ runs/NAME/learning.json
    every episode of those reported runs ─▶ runs/NAME/transcripts/MODEL-SPLIT.jsonl

The goals say whether RL is worth its compute: RL at least 10 points above the base with
separated intervals, at least 5 points above SFT given the same wall time, and more
episodes that recover from a failed edit than the base. Not covered: several seeds of
either arm (one run each), compute other than wall-clock time on one machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetrl.config import RunConfig, SftSection, TasksSection
from fleetrl.config_files import with_overrides
from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import configured_tasks, training_tasks
from fleetrl.orchestrate.local import run_local
from fleetrl.orchestrate.sft import run_sft
from fleetrl.rollout.evaluate import choose_temperature, protocol_report
from fleetrl.rollout.stats import paired_gain, task_rates
from fleetrl.trainer.sft import STATE_FILE, lr_at

MODELS = ("base", "rl", "sft_more")
SPLITS = {"heldout": "heldout", "heldout-templates": "heldout_templates"}  # split: JSON key
RL_OVER_BASE = 0.10  # pass@1 points RL must gain over the base (with separated intervals)
RL_OVER_SFT_MORE = 0.05  # pass@1 points RL must gain over SFT given the same wall time
SFT_MORE_STEPS = 1_000_000  # the step budget never binds: `max_seconds` ends SFT-more
RECIPE_KEYS = ("batch_size", "copies", "plans", "max_tasks")  # which demonstrations, how batched
EPSILON = 1e-9  # 0.3 - 0.2 >= 0.1 must hold in floating point


class LearningBenchError(RuntimeError):
    """The benchmark cannot start as configured (no SFT base, a missing split); the
    message says why in one line."""


def read_sft_state(base: Path) -> dict[str, Any]:
    """The base checkpoint's `sft.json` (config, figures and loss curves of its SFT run):
    the benchmark starts from an SFT checkpoint, whose recipe SFT-more continues."""
    path = base / STATE_FILE
    if not path.is_file():
        raise LearningBenchError(
            f"{base} has no {STATE_FILE}: start from a checkpoint written by `fleetrl sft`"
        )
    return json.loads(path.read_text())


def sft_curve(state: dict[str, Any]) -> dict[str, Any]:
    """The base's SFT curves as [step, loss] pairs (`val_losses` only when it measured
    them), with the step it kept and why it stopped, where its sft.json says."""
    result = state["result"]
    curve: dict[str, Any] = {"losses": result["losses"], "steps": result["steps"]}
    for key in ("val_losses", "best_step", "stopped"):
        if result.get(key) not in (None, []):
            curve[key] = result[key]
    return curve


def sft_more_overrides(state: dict[str, Any], base: Path, seconds: float) -> dict[str, Any]:
    """The `sft` settings of SFT continued from `base` for `seconds` of training.

    Same demonstrations and batch as the base's run (its recorded `batch_size`, `copies`,
    `plans` and `max_tasks`; the run configuration's where its sft.json predates them), at
    the learning rate of the step that wrote the base's kept weights (`kept_weights_lr`),
    held constant without warmup, and without validation losses (nothing stops it but
    the time)."""
    recorded = state["config"]
    return {
        "init": str(base),
        "max_seconds": seconds,
        "steps": SFT_MORE_STEPS,
        "warmup_steps": 0,
        "lr": kept_weights_lr(state),
        "min_lr_ratio": 1.0,
        "val_every": 0,
        "patience": 0,
        "save_every": 0,
    } | {key: recorded[key] for key in RECIPE_KEYS if key in recorded}


def kept_weights_lr(state: dict[str, Any]) -> float:
    """The learning rate of the base's SFT at the step whose weights it kept (its best
    validation step under patience, else its last), read off its recorded schedule: where
    a cosine was cut short by time or a plateau, the rate it had reached, not the one it
    would have ended at. An sft.json without its result: `lr x min_lr_ratio`, the
    cosine's end."""
    recorded, result = state["config"], state.get("result", {})
    kept = result.get("kept_step")
    if kept is None:  # an sft.json before kept_step: its runs all kept the best step's
        kept = result.get("best_step")
        kept = result.get("steps") if kept is None else kept
    if kept is None:
        return recorded["lr"] * recorded["min_lr_ratio"]
    schedule = {key: recorded[key] for key in ("steps", "warmup_steps", "lr", "min_lr_ratio")}
    return lr_at(max(kept - 1, 0), SftSection(**schedule))  # the step whose update wrote them


def demonstrated_tasks(state: dict[str, Any], config: RunConfig) -> TasksSection:
    """The `tasks` settings of the base's own demonstrations, which SFT-more continues on:
    those its sft.json records, else (an sft.json older than the record) the run's."""
    recorded = state["about"].get("tasks_source")
    return TasksSection.model_validate(recorded) if recorded else config.tasks


def final_weights_time(final: Path) -> float:
    """When the trainer finished writing the final weights (epoch seconds): the end of
    RL's wall time W, which leaves out the regions' shutdown after it."""
    return max(file.stat().st_mtime for file in final.glob("*.safetensors"))


def check_splits(config: RunConfig, base: Path) -> None:
    """Fail early, before any training, when a split the benchmark reads is missing, the
    temperature would be chosen on a reported split (which flatters), or RL's draw leaves
    out tasks by another model's evaluation (`tasks.skip_solved` not made from `base`)."""
    source = config.tasks
    if config.eval.val_split in SPLITS:
        raise LearningBenchError(
            f"eval.val_split is {config.eval.val_split!r}, a reported split: choose the "
            "temperature on another split (the default: val)"
        )
    try:
        for split in (source.split, config.eval.val_split, *SPLITS):
            configured_tasks(source, split)
        training_tasks(source, base)
    except TaskError as err:
        raise LearningBenchError(str(err)) from None


def check_demonstrated(source: TasksSection) -> None:
    """Fail early when the base's demonstrated tasks (`demonstrated_tasks`) cannot be
    loaded here, e.g. a task folder the base was trained on that is gone."""
    try:
        configured_tasks(source, source.split)
    except TaskError as err:
        raise LearningBenchError(f"the base's demonstrated tasks: {err}") from None


def _gain(
    winner: dict[str, Any], other: dict[str, Any], margin: float, separated: bool
) -> dict[str, Any]:
    gain = winner["pass_at_1"] - other["pass_at_1"]
    apart = winner["ci_low"] > other["ci_high"]
    _, low, high = paired_gain(task_rates(winner), task_rates(other))
    return {
        "met": gain >= margin - EPSILON and (apart or not separated),
        "gain": gain,
        "min_gain": margin,
        "intervals_separated": apart,
        "gain_ci": [low, high],  # paired over the split's tasks (reported, not a goal)
    }


def learning_goals(
    base: dict[str, Any], rl: dict[str, Any], sft_more: dict[str, Any]
) -> dict[str, Any]:
    """Each goal on each reported split, as `met` with the numbers it compares.

    The arguments are the models' documents (split key -> `protocol_report`). Goals: RL's
    pass@1 >= base + 10 points with RL's interval above the base's; RL >= SFT-more + 5
    points; RL's recovery rate (of the episodes with a failed edit, the fraction that still
    passed) above the base's. `met_on`: split key -> whether every goal holds there, so a
    reader sees which split a shortfall is on; `all_met`: every goal on every split."""
    goals: dict[str, Any] = {}
    for key in SPLITS.values():
        b, r, s = base[key], rl[key], sft_more[key]
        figures = {name: doc["pass_at_1"] for name, doc in zip(MODELS, (b, r, s), strict=True)}
        over_base = _gain(r, b, RL_OVER_BASE, separated=True)
        over_base |= {"rl": figures["rl"], "rl_ci_low": r["ci_low"]}
        over_base |= {"base": figures["base"], "base_ci_high": b["ci_high"]}
        over_sft = _gain(r, s, RL_OVER_SFT_MORE, separated=False)
        over_sft |= {"rl": figures["rl"], "sft_more": figures["sft_more"]}
        recovery = {"met": r["recovery_rate"] > b["recovery_rate"]}
        for name, doc in (("rl", r), ("base", b)):
            recovery[name] = doc["recovery_rate"]
            recovery[f"{name}_failed_edit_episodes"] = doc["failed_edit_episodes"]
            recovery[f"{name}_recovered_fraction"] = doc["recovery"]  # of all episodes
        goals[key] = {
            "rl_over_base": over_base,
            "rl_over_sft_more": over_sft,
            "recovery_rises": recovery,
        }
    goals["met_on"] = {
        key: all(goal["met"] for goal in goals[key].values()) for key in SPLITS.values()
    }
    goals["all_met"] = all(goals["met_on"].values())
    return goals


def evaluate_model(
    checkpoint: Path,
    config: RunConfig,
    label: str,
    echo: Callable[[str], None] | None,
    transcripts: Path | None = None,
) -> dict[str, Any]:
    """One model's documents: its temperature chosen once on `eval.val_split` (the sweep,
    {str(T): pass@1}, recorded in each split's document), then each reported split at that
    temperature; `eval_s`: the time all of it took. Given the folder `transcripts`, each
    reported split's episodes go to `transcripts/LABEL-KEY.jsonl` (`episode_record`), for
    reading why a model fails where it does."""
    start = time.monotonic()
    if echo:
        echo(f"{label}: choosing the temperature on {config.eval.val_split}")
    temperature, sweep = choose_temperature(checkpoint, config, progress=label if echo else None)
    val_sweep = {str(t): result.pass_at_1 for t, result in sweep.items()}
    model: dict[str, Any] = {"checkpoint": str(checkpoint)}
    for split, key in SPLITS.items():
        if echo:
            echo(f"{label}: {split} at temperature {temperature:g}")
        episodes = transcripts / f"{label}-{key}.jsonl" if transcripts else None
        report = protocol_report(
            checkpoint, config, split, temperature, progress=bool(echo), transcripts=episodes
        )
        model[key] = report | {"val_sweep": val_sweep}
    model["eval_s"] = time.monotonic() - start
    return model


def run_learning_bench(
    config: RunConfig, base: Path, run_dir: Path, echo: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """RL and SFT-more from `base`, the three models evaluated, the goals; the document is
    also written to `run_dir/learning.json`. `echo`: a line per phase and progress bars
    (None: silent)."""
    state = read_sft_state(base)
    check_splits(config, base)
    sft_tasks = demonstrated_tasks(state, config)
    check_demonstrated(sft_tasks)
    progress = echo is not None
    say = echo or (lambda _line: None)
    run_dir.mkdir(parents=True, exist_ok=True)

    say(f"rl: `fleetrl train` from {base} ({config.trainer.steps} steps, no evaluation)")
    rl_config = with_overrides(
        config,
        {"name": f"{run_dir.name}-rl", "model": {"path": str(base)}, "eval": {"enabled": False}},
    )
    start = time.time()
    run_local(rl_config, run_dir / "rl", progress=progress)
    rl_run_s = time.time() - start
    rl_wall_s = final_weights_time(run_dir / "rl" / "final") - start

    say(f"sft_more: SFT continued from {base} for {rl_wall_s:.0f} s, RL's wall time")
    sft_config = with_overrides(
        config,
        {"sft": sft_more_overrides(state, base, rl_wall_s), "tasks": sft_tasks.model_dump()},
    )
    sft = run_sft(sft_config, run_dir / "sft_more", echo=say, progress=progress)
    if sft.stopped == "interrupted":  # SFT keeps its weights on Ctrl-C; the bench stops
        raise KeyboardInterrupt

    checkpoints = {"base": base, "rl": run_dir / "rl" / "final", "sft_more": run_dir / "sft_more"}
    transcripts = run_dir / "transcripts"
    transcripts.mkdir(exist_ok=True)
    models = {m: evaluate_model(checkpoints[m], config, m, echo, transcripts) for m in MODELS}
    document: dict[str, Any] = dict(models)
    document["goals"] = learning_goals(*(models[m] for m in MODELS))
    document["sft_curve"] = sft_curve(state)
    document["budget"] = {
        "rl_steps": config.trainer.steps,
        "rl_wall_s": rl_wall_s,
        "rl_run_s": rl_run_s,
        "sft_more_wall_s": sft.duration_s,
        "sft_more_steps": sft.steps,
        "sft_more_lr": sft_config.sft.lr,
        "sft_more_batch_size": sft_config.sft.batch_size,
        "sft_more_tasks": sft_tasks.model_dump(),
        "eval_s": {m: models[m]["eval_s"] for m in MODELS},
    }
    (run_dir / "learning.json").write_text(json.dumps(document, indent=2) + "\n")
    return document


def learning_rows(document: dict[str, Any]) -> list[list[str]]:
    """The table of `fleetrl bench learning`: a row per model and split with pass@1
    [CI] @ temperature, greedy and pass@8."""
    rows = []
    for model in MODELS:
        for split, key in SPLITS.items():
            doc = document[model][key]
            rows.append(
                [
                    model,
                    split,
                    f"{doc['pass_at_1']:.3f} [{doc['ci_low']:.3f}, {doc['ci_high']:.3f}] "
                    f"@{doc['temperature']:g}",
                    f"{doc['greedy']:.3f}",
                    f"{doc['pass_at_8']:.3f}",
                ]
            )
    return rows
