"""The local launcher behind `fleetrl train`: one trainer and N regions as processes.

    runs/NAME/config.toml ─▶ trainer process ──┐  object store (runs/NAME/store or s3://)
                         ─▶ region process(es) ┘  weights/, trajectories/, control/
    launcher: progress from metrics.jsonl, restarts a crashed process (it resumes from the
    store and its checkpoint), then evaluates base and final models and writes the report.

The processes share only the store; the launcher only starts, watches and restarts them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig, dump_config
from fleetrl.envs.cache import cache_dir
from fleetrl.model.checkpoint import resolve_checkpoint
from fleetrl.observe.metrics import MetricsLogger, read_metrics
from fleetrl.observe.records import EvalRecord
from fleetrl.observe.report import write_report
from fleetrl.rollout.evaluate import EvalResult, evaluate_checkpoint

MAX_RESTARTS = 3


class RunFailed(RuntimeError):
    """A process of the run kept failing; the message has the tail of its log."""


@dataclass
class _Process:
    role: str
    name: str
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    def start(self, run_dir: Path) -> None:
        argv = [sys.executable, "-m", "fleetrl.orchestrate.roles", self.role, str(run_dir)]
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen([*argv, self.name], stdout=log, stderr=subprocess.STDOUT)

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def _watch(processes: list[_Process], run_dir: Path, steps: int, progress: bool) -> None:
    """Wait for the trainer to finish, restarting crashed processes, showing progress."""
    trainer = processes[0]
    metrics = run_dir / "metrics.jsonl"
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}")]
    with Progress(*columns, TimeElapsedColumn(), disable=not progress) as bar:
        task = bar.add_task("training", total=steps, info="waiting for the first group")
        while True:
            records = (
                [r for r in read_metrics(metrics) if r["kind"] == "train"]
                if metrics.exists()
                else []
            )
            if records:
                last = records[-1]
                info = f"reward {last['reward']:.2f}  staleness {last['staleness_mean']:.1f}"
                bar.update(task, completed=last["step"], info=info)
            for process in processes:
                code = process.popen.poll() if process.popen else None
                if code is None or (process is trainer and code == 0):
                    continue
                if process.restarts >= MAX_RESTARTS:
                    raise RunFailed(
                        f"{process.name} failed {MAX_RESTARTS + 1} times:\n{process.tail()}"
                    )
                process.restarts += 1
                process.start(run_dir)
            if trainer.popen is not None and trainer.popen.poll() == 0:
                return
            time.sleep(0.5)


def _eval_cache_key(checkpoint: Path, config: RunConfig) -> str:
    digest = hashlib.sha256()
    for file in sorted(checkpoint.glob("*.safetensors")):
        digest.update(file.read_bytes())
    settings = (
        config.eval.split,
        config.eval.episodes,
        config.eval.max_tasks,
        config.rollout.temperature,
        config.tasks.model_dump(),
        config.harness.model_dump(),
    )
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:24]


def evaluate(
    checkpoint: Path, config: RunConfig, cache: bool, progress: str | None = None
) -> EvalResult:
    """Held-out pass@1 of a checkpoint (cached by weights and settings when `cache`);
    `progress`: a progress bar's label."""
    path = cache_dir() / "evals" / f"{_eval_cache_key(checkpoint, config)}.json"
    if cache and path.is_file():
        return EvalResult(**json.loads(path.read_text()))
    result = evaluate_checkpoint(checkpoint, config, progress=progress)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.to_json()))
    return result


def eval_record(result: EvalResult, model: str) -> EvalRecord:
    """The "eval" record of one evaluated checkpoint (`model`: "base" or "final")."""
    return EvalRecord(
        pass_at_1=result.pass_at_1,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        episodes=result.episodes,
        tasks=result.tasks,
        duration_s=result.duration_s,
        mean_tool_errors=result.mean_tool_errors,
        model=model,
    )


def run_local(config: RunConfig, run_dir: Path, regions: int = 1, progress: bool = True) -> dict:
    """Run training end to end; returns the evaluation summary (also in eval.json)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(config))
    processes = [_Process("trainer", "trainer", run_dir / "logs" / "trainer.log")]
    processes += [
        _Process("region", f"region-{i}", run_dir / "logs" / f"region-{i}.log")
        for i in range(regions)
    ]
    for process in processes:
        process.start(run_dir)
    try:
        _watch(processes, run_dir, config.trainer.steps, progress)
    finally:
        for process in processes[1:]:
            process.stop()
        processes[0].stop(timeout=5)
    summary: dict = {}
    if config.eval.enabled:
        evaluated = []
        if config.eval.base:
            evaluated.append(("base", 0, resolve_checkpoint(config.model.path), True))
        evaluated.append(("final", config.trainer.steps, run_dir / "final", False))
        with MetricsLogger(run_dir / "metrics.jsonl") as log:
            for label, step, checkpoint, cache in evaluated:
                label_bar = f"evaluating {label} on {config.eval.split}" if progress else None
                result = evaluate(checkpoint, config, cache, label_bar)
                summary[label] = result.to_json()
                log.log_record(step, eval_record(result, label))
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    write_report(run_dir)
    return summary
