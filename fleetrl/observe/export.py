"""Metrics where users already look: TensorBoard event files and Weights & Biases.

    record ─▶ MetricsLogger ─▶ metrics.jsonl (every field; report.html reads it)
                          └─▶ scalars ─▶ TensorBoardSink ─▶ <run>/tensorboard/events.*
                                     └─▶ WandbSink ─▶ <run>/wandb/ (offline) or the W&B server

Role: `open_sinks` makes the sinks a run's `observe` settings ask for; the process's one
`MetricsLogger` hands each record to them, so a dashboard shows exactly the figures of
metrics.jsonl. Each numeric field of a record becomes the scalar `<kind>/<field>`
(`train/reward`, `sync/sync_bytes`, `eval/pass_at_1`) at the record's step, on its kind's
step axis (`step_axis` of `fleetrl.observe.records`: train step, or policy version).

Contract:
- TensorBoard: event files in `<run>/tensorboard/` through `torch.utils.tensorboard` (the
  `tensorboard` package: extra `fleetrl[tensorboard]`), flushed after each record so a
  running `tensorboard --logdir runs` shows each step. Each process adds its own file.
- W&B (extra `fleetrl[wandb]`): one W&B run per run folder. Its id is kept in
  `<run>/wandb/fleetrl-run-id`, so a restarted trainer and the end-of-run evaluation log
  into the same W&B run (`resume="allow"`). Offline unless the environment sets
  `WANDB_MODE`: files under `<run>/wandb/offline-run-*`, uploaded later with `wandb sync`;
  no network needed. Each kind has its own x-axis `<kind>/step` (`define_metric`), since
  the kinds' steps do not rise together (the base model's evaluation is logged at step 0
  after training). The run's config is the W&B run's config.
- The processes of a run that log metrics each open their own sinks in their own folder:
  the trainer (`train` and `sync` records; the regions' weight-swap figures reach it
  through the store) in its work folder, and the launcher after training (`eval` records)
  in the run folder. With the local launcher these are one folder, so one TensorBoard
  folder and one W&B run; a trainer on another machine keeps its files there. Regions log
  nothing themselves.
- A sink that cannot start (W&B online with no API key or no network) is left out with
  one warning line, and one that fails mid-run is dropped the same way: the run goes on.
- Offline W&B files are written by W&B's service process, which may finish writing them
  just after `close()` returns (wandb 0.31); they are complete once the process exits.

Not covered: MLflow; histograms (`staleness_hist` stays in metrics.jsonl); wall times in
W&B (it stamps each row with its own clock).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fleetrl.observe.metrics import Sink

log = logging.getLogger(__name__)

RUN_ID_FILE = "fleetrl-run-id"  # in <run>/wandb/: the W&B run id of this run folder


class ExportSettings(Protocol):
    """Which sinks to open: the `observe` section of the run config has these fields."""

    tensorboard: bool
    wandb: bool
    wandb_project: str


class TensorBoardSink:
    """Scalars into TensorBoard event files in `log_dir` (created if missing)."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, kind: str, step: int, wall: float, values: dict[str, float]) -> None:
        for field, value in values.items():
            self._writer.add_scalar(f"{kind}/{field}", value, step, walltime=wall)
        # One flush per record (a file write, no fsync): a live dashboard, little lost on a crash.
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Scalars into the W&B run of `run_dir` (see the module docstring)."""

    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, Any]) -> None:
        import wandb

        folder = Path(run_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=project,
            name=name,
            id=_run_id(folder),
            resume="allow",
            dir=str(run_dir),
            config=config,
            # Read here, not left to wandb: it reads the environment once per process.
            mode=os.environ.get("WANDB_MODE") or "offline",
            # console off: the trainer's log and the launcher's progress bars stay ours.
            settings=wandb.Settings(console="off", quiet=True),
        )
        self._kinds: set[str] = set()

    def write(self, kind: str, step: int, wall: float, values: dict[str, float]) -> None:
        axis = f"{kind}/step"
        if kind not in self._kinds:
            self._run.define_metric(axis)
            self._run.define_metric(f"{kind}/*", step_metric=axis)
            self._kinds.add(kind)
        self._run.log({axis: step, **{f"{kind}/{field}": v for field, v in values.items()}})

    def close(self) -> None:
        self._run.finish()


def open_sinks(
    run_dir: Path, settings: ExportSettings, name: str, config: dict[str, Any]
) -> list[Sink]:
    """The sinks `settings` enables for the run in `run_dir` (`name`: the W&B run's name,
    `config`: the run config as plain data). The packages must be installed: the run's
    start-up checks that (`RunConfig.observe`), so a missing one is refused before here.
    A sink that cannot start (W&B online with no API key or no network) is left out with
    one warning: the run goes on, and metrics.jsonl has every figure."""
    sinks: list[Sink] = []
    if settings.tensorboard:
        sinks += _started(
            "observe.tensorboard", lambda: TensorBoardSink(Path(run_dir) / "tensorboard")
        )
    if settings.wandb:
        sinks += _started(
            "observe.wandb", lambda: WandbSink(run_dir, settings.wandb_project, name, config)
        )
    return sinks


def _started(knob: str, start: Callable[[], Sink]) -> list[Sink]:
    """[the sink `start` makes], or [] with one warning line when it cannot start."""
    try:
        return [start()]
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        log.warning(
            "%s: left out, it could not start (%s); metrics.jsonl has every figure", knob, first
        )
        return []


def _run_id(folder: Path) -> str:
    """The W&B run id kept in `folder`, made on first use (random: a new run folder with
    an old name is a new W&B run, not a continuation)."""
    path = folder / RUN_ID_FILE
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    run_id = secrets.token_hex(4)
    path.write_text(run_id + "\n")
    return run_id
