"""The local launcher behind `fleetrl train`: one trainer and N regions as processes.

    create the run in its store (runs/NAME/store or s3://…), unless it is there already
      ─▶ `fleetrl trainer --store URL --workdir runs/NAME`            ──┐ the store only:
         (× N with --trainer-ranks N: one process per rank)             │
      ─▶ `fleetrl region --store URL --name region-i --workdir …`     ──┘ weights/, run/,
    launcher: progress from metrics.jsonl, restarts a crashed process    trajectories/,
    (it resumes from the store), then evaluates base and final models    control/,
    and writes the report.                                               checkpoints/

The processes are the same commands one would start by hand on other machines; the
launcher only starts, watches and restarts them. A trainer at N ranks is N processes with
the environment torchrun would give them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); a
rank that fails ends the others, and the trainer restarts whole (a new incarnation, which
resumes from the last checkpoint). The launcher starts the ranks itself rather than through
torchrun so that it sees rank 0's exit code (a fenced-off trainer must not restart).
A process that keeps crashing (more than CRASH_LIMIT times within CRASH_WINDOW_S) fails the
run with the tail of its log. Interrupted (Ctrl-C, SIGTERM) or failed, the launcher
terminates its processes before it exits: none outlives it to write into the store, and
the same command resumes the run from the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fleetrl.config import RunConfig
from fleetrl.config_files import dump_config
from fleetrl.files import write_whole
from fleetrl.model.checkpoint import resolve_checkpoint, weights_digest
from fleetrl.observe.export import open_sinks
from fleetrl.observe.horizon import kept_facts
from fleetrl.observe.metrics import MetricsLogger, read_metrics
from fleetrl.observe.records import EvalRecord
from fleetrl.observe.report import write_report
from fleetrl.orchestrate.roles import FENCED_EXIT
from fleetrl.orchestrate.run import create_run
from fleetrl.rollout.evaluate import (
    EvalResult,
    episodes_of,
    evaluate_checkpoint,
    evaluation_cache_path,
    split_tasks,
)
from fleetrl.store.control import store_url
from fleetrl.store.objectstore import open_store
from fleetrl.store.region_metrics import read_report_metrics
from fleetrl.store.run import CONFIG_KEY
from fleetrl.trainer.parallel import free_port

# A process is restarted after each crash unless it crashed more than CRASH_LIMIT times
# within CRASH_WINDOW_S: a long run outlives many unrelated crashes (a node hiccup, a bad
# episode), while a process that dies again right after each start is broken for good.
# Five starts in ten minutes is ample for a process that needs a minute to load.
CRASH_LIMIT = 5
CRASH_WINDOW_S = 600.0
REFUSED_EXIT = 2  # a role's exit status for a mistake in its input (the CLI's `fail`)


class RunFailed(RuntimeError):
    """A process of the run kept failing; the message has the tail of its log."""


class RestartLimiter:
    """Whether a crashed process may start again: yes, unless it crashed more than `limit`
    times within the last `window_s` seconds (`clock`: seconds, injectable for tests)."""

    def __init__(
        self,
        limit: int = CRASH_LIMIT,
        window_s: float = CRASH_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self.crashes: deque[float] = deque()  # times of the crashes within the window

    def crashed(self) -> bool:
        """Count a crash now; whether the process may be restarted."""
        now = self.clock()
        self.crashes.append(now)
        while self.crashes[0] <= now - self.window_s:
            self.crashes.popleft()
        return len(self.crashes) <= self.limit


@dataclass
class _Process:
    """One role of the run; the trainer at several ranks is one process per rank, which
    live and die together (as under torchrun)."""

    role: str
    name: str
    log: Path
    ranks: int = 1  # the trainer's processes
    popens: list[subprocess.Popen[bytes]] = field(default_factory=list)
    restarts: RestartLimiter = field(default_factory=RestartLimiter)

    def start(self, url: str, run_dir: Path) -> None:
        argv = [sys.executable, "-m", "fleetrl.cli", self.role, "--store", url]
        if self.role == "region":
            argv += ["--name", self.name, "--workdir", str(run_dir / "regions" / self.name)]
        else:
            argv += ["--workdir", str(run_dir)]
        port = free_port()
        self.popens = []
        for rank in range(self.ranks):
            env = os.environ.copy()
            if self.ranks > 1:  # what torchrun would set (`fleetrl.trainer.parallel`)
                ranks = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": self.ranks}
                env |= {k: str(v) for k, v in ranks.items()}
                env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            log = self.log if rank == 0 else self.log.with_suffix(f".rank{rank}.log")
            with open(log, "ab") as out:
                self.popens.append(
                    subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
                )

    def poll(self) -> int | None:
        """None while it runs; its exit code once it ended: 0 when every rank exited 0,
        else rank 0's if it failed, else the first failed rank's. A rank that fails ends
        the others (their process group is broken)."""
        codes = [popen.poll() for popen in self.popens]
        if not codes or all(code == 0 for code in codes):
            return 0 if codes else None
        failed = [code for code in codes if code not in (None, 0)]
        if not failed:
            return None
        self.terminate()
        return codes[0] if codes[0] not in (None, 0) else failed[0]

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """Give the process `timeout` seconds to exit by itself, then terminate it."""
        try:
            for popen in self.popens:
                popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.terminate()

    def terminate(self) -> None:
        """SIGTERM now, SIGKILL if it is still there 10 s later."""
        terminate(self.popens)


def terminate(popens: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the processes still running, SIGKILL those still there 10 s later."""
    running = [popen for popen in popens if popen.poll() is None]
    for popen in running:
        popen.terminate()
    for popen in running:
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within: SIGTERM raises SystemExit as Ctrl-C raises KeyboardInterrupt, so that a
    launcher's `finally` stops its processes (a handler is set only from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _watch(processes: list[_Process], url: str, run_dir: Path, steps: int, progress: bool) -> None:
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
                code = process.poll()
                if code is None or code == 0:  # running, or done (a region after the stop)
                    continue
                if process is trainer and code == FENCED_EXIT:
                    raise RunFailed("another trainer of this run started; this one stopped")
                if code == REFUSED_EXIT:  # a restart would meet the same refusal
                    raise RunFailed(f"{process.name} refused its input:\n{process.tail()}")
                if not process.restarts.crashed():
                    limiter = process.restarts
                    raise RunFailed(
                        f"{process.name} failed {len(limiter.crashes)} times within "
                        f"{limiter.window_s:.0f} s:\n{process.tail()}"
                    )
                process.start(url, run_dir)
            if trainer.poll() == 0:
                return
            time.sleep(0.5)


def evaluate(
    checkpoint: Path, config: RunConfig, cache: bool, progress: str | None = None
) -> EvalResult:
    """Held-out pass@1 of a checkpoint at its temperature chosen on val when
    `eval.best_temperature` (cached by weights and settings when `cache`); `progress`: the
    progress bars' label."""
    path = evaluation_cache_path(weights_digest(checkpoint), config)
    if cache and path.is_file():
        return EvalResult.from_json(json.loads(path.read_text()))
    best = config.eval.best_temperature
    result = evaluate_checkpoint(checkpoint, config, progress=progress, best_temperature=best)
    if cache:
        write_whole(path, json.dumps(result.to_json()).encode())
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
        temperature=result.temperature,
    )


def run_local(
    config: RunConfig,
    run_dir: Path,
    regions: int = 1,
    progress: bool = True,
    trainer_ranks: int = 1,
) -> dict:
    """Run training end to end; returns the evaluation summary (also in eval.json). A run
    whose store already holds it (a relaunch) resumes from the store, at any number of
    `trainer_ranks` (its checkpoint reshards)."""
    url = prepare_run(config, run_dir)
    trainer_log = run_dir / "logs" / "trainer.log"  # rank 0's; trainer.rank1.log, …
    processes = [_Process("trainer", "trainer", trainer_log, ranks=trainer_ranks)]
    processes += [
        _Process("region", f"region-{i}", run_dir / "logs" / f"region-{i}.log")
        for i in range(regions)
    ]
    with sigterm_unwinds():
        try:
            for process in processes:
                process.start(url, run_dir)
            _watch(processes, url, run_dir, config.trainer.steps, progress)
        except BaseException:
            for process in processes:
                process.terminate()
            raise
        finally:
            for process in processes[1:]:
                process.stop()
            processes[0].stop(timeout=5)
    return evaluate_and_report(config, run_dir, progress)


SUMMARY_EXAMPLES = 3  # held-out tasks whose summaries the report shows, base beside final


def summary_examples(config: RunConfig, models: list[tuple[str, Path]], evals: dict) -> dict | None:
    """What each model (label, checkpoint) summarised on the first SUMMARY_EXAMPLES
    held-out tasks with facts, one episode each at the model's evaluation temperature:
    for the report, a summary before and after training. None when the run's tasks have
    no facts or its harness does not summarise them."""
    tasks = [task for task in split_tasks(config, config.eval.split) if task.facts]
    tasks = tasks[:SUMMARY_EXAMPLES]
    if not tasks or config.harness.summary_limit(tasks[0].suite) is None:
        return None
    examples: dict = {"tasks": [{"task_id": t.instance_id, "facts": t.facts} for t in tasks]}
    for label, checkpoint in models:
        temperature = evals.get(label, {}).get("temperature", config.rollout.temperature)
        episodes = episodes_of(checkpoint, config, tasks, temperature)
        examples[label] = [
            {
                "task_id": task.instance_id,
                "summaries": episode.summaries,
                "kept": kept_facts(task.facts, episode.summaries),
                "reward": episode.reward,
                "finish_reason": episode.finish_reason,
            }
            for task, episode in zip(tasks, episodes, strict=True)
        ]
    return examples


def prepare_run(config: RunConfig, run_dir: Path) -> str:
    """The run folder (logs/, the resolved config.toml) and the run in its store, created
    unless the store holds it already (a relaunch resumes); returns the store's URL."""
    url = store_url(config.store.url, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(config))
    store = open_store(url)
    if not store.exists(CONFIG_KEY):
        create_run(config, store)
    return url


def evaluate_and_report(config: RunConfig, run_dir: Path, progress: bool = True) -> dict:
    """After training, whatever launched it: held-out pass@1 of the base and final models,
    each at its own temperature chosen on val with `eval.best_temperature` (eval.json:
    per model pass_at_1, ci_low, ci_high, episodes, temperature, val_sweep and the rest of
    its `EvalResult`; "eval" records), on tasks with facts the summaries both wrote on a
    few of them (summaries.json), and report.html; returns the evaluation summary."""
    summary: dict = {}
    if config.eval.enabled:
        evaluated = []
        if config.eval.base:
            evaluated.append(("base", 0, resolve_checkpoint(config.model.path), True))
        evaluated.append(("final", config.trainer.steps, run_dir / "final", False))
        sinks = open_sinks(run_dir, config.observe, config.name, config.model_dump(mode="json"))
        with MetricsLogger(run_dir / "metrics.jsonl", sinks=sinks) as log:
            for label, step, checkpoint, cache in evaluated:
                label_bar = f"{label}:" if progress else None
                result = evaluate(checkpoint, config, cache, label_bar)
                summary[label] = result.to_json()
                log.log_record(step, eval_record(result, label))
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        examples = summary_examples(config, [(e[0], e[2]) for e in evaluated], summary)
        if examples is not None:
            (run_dir / "summaries.json").write_text(json.dumps(examples, indent=2))
    write_report(run_dir, read_report_metrics(store_url(config.store.url, run_dir)))
    return summary
