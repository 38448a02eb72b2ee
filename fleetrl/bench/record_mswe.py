"""`fleetrl bench record --harness mini-swe-agent`: what a real harness leaves in the recorder.

    one `fleetrl serve MODEL --record` process
      ▲  litellm (mini-swe-agent's own model class), user = session id
    N mini-swe-agent episodes (`fleetrl.rollout.mswe.run_mswe_episode`), `sessions` at once:
      bash in the sandbox over each task's repository, graded by the verifier, rewarded
      ▼
    GET /v1/sessions/{id} per session, GET /v1/sessions: bytes, tokens, rewrites

The tasks are the first N of the run configuration's `eval.val_split` (the bundled suite
unless `--config`/`--set` say otherwise); the harness section's budgets apply. mini-swe-agent
drops a reply its parser refuses (a format error) from the history it sends back, so every
format error after the first reply starts a new segment, a rewrite in the recorder's
counters: a weak model rewrites often, and the figures say how often.

Not covered: latency (the scripted workload of `fleetrl.bench.record` measures it with and
without recording, side by side); training on what was recorded (`fleetrl train --set
rollout.harness=mini-swe-agent`).
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from rich.progress import Progress

from fleetrl.bench.record import (
    RecordBenchConfig,
    RecordBenchError,
    counters,
    start_server,
    stop_server,
    stored_bytes,
    wait_listening,
)
from fleetrl.config import RunConfig
from fleetrl.envs.sandbox import Limits, open_sandbox
from fleetrl.envs.tasks.suites import configured_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.rollout.mswe import run_mswe_episode  # the optional extra: ImportError without
from fleetrl.types import SamplingParams, Task, Trajectory


@dataclass
class MsweRecordConfig:
    """Workload of the mini-swe-agent leg."""

    model: str = "base-slip"  # checkpoint the recording server loads
    tasks: int = 16  # episodes, one per task
    sessions: int = 4  # episodes at once (each holds a sandbox)
    temperature: float = 1.0
    threads: int = 1  # torch threads of the server
    seed: int = 0


def episode(
    task: Task, url: str, index: int, config: MsweRecordConfig, run: RunConfig
) -> Trajectory:
    """One graded mini-swe-agent episode through the recording server (blocking)."""
    repo = ensure_repo(task)
    rollout = run.rollout
    limits = Limits(wall_s=rollout.sandbox_wall_s, memory_mb=rollout.sandbox_memory_mb)
    sampling = SamplingParams(temperature=config.temperature, seed=config.seed * 1009 + index)
    with open_sandbox(repo, rollout.sandbox_backend, limits) as sandbox:
        return run_mswe_episode(
            task, sandbox, repo, url, sampling, run.harness, rollout.verify_timeout_s
        )


def run_mswe_record_bench(
    config: MsweRecordConfig, run: RunConfig, progress: bool = True
) -> dict[str, Any]:
    """Run the episodes through one recording server; the figures (JSON-ready). Raises
    RecordBenchError when the server does not start."""
    tasks = configured_tasks(run.tasks, run.eval.val_split)[: config.tasks]
    if not tasks:
        raise RecordBenchError(f"split {run.eval.val_split!r} has no tasks")
    server = RecordBenchConfig(
        model=config.model,
        sessions=config.sessions,
        threads=config.threads,
        max_model_len=run.harness.max_context,
    )
    served = start_server(server, "record")
    try:
        wait_listening(served, server.start_timeout_s)
        with (
            Progress(disable=not progress, transient=True) as bar,
            ThreadPoolExecutor(config.sessions) as pool,
        ):
            job = bar.add_task("mini-swe-agent episodes", total=len(tasks))
            futures = [
                pool.submit(episode, task, served.url, i, config, run)
                for i, task in enumerate(tasks)
            ]
            for future in futures:
                future.add_done_callback(lambda _: bar.advance(job))
            trajectories = [future.result() for future in futures]
        summary = counters(served.url)
        views = []
        with httpx.Client(base_url=served.url, timeout=60) as client:
            for session_id in summary["ids"]:
                response = client.get(f"/v1/sessions/{session_id}")
                response.raise_for_status()
                views.append((len(response.content), response.json()))
    finally:
        stop_server(served)
    return mswe_figures(config, run, trajectories, views, summary)


def mswe_figures(
    config: MsweRecordConfig,
    run: RunConfig,
    trajectories: list[Trajectory],
    views: list[tuple[int, dict[str, Any]]],
    summary: dict[str, Any],
) -> dict[str, Any]:
    """The leg's flat figures."""
    sessions = summary["sessions"]
    out: dict[str, Any] = {f"config_{k}": v for k, v in asdict(config).items()}
    out |= {
        "config_split": run.eval.val_split,
        "config_max_turns": run.harness.max_turns,
        "config_max_context": run.harness.max_context,
        "episodes": len(trajectories),
        "solved": sum(t.reward > 0 for t in trajectories),
        "turns_per_episode_mean": statistics.fmean(t.turns for t in trajectories),
        "format_errors_per_episode_mean": statistics.fmean(t.tool_errors for t in trajectories),
        "recorded_sessions": sessions,
        "recorded_turns": summary["turns"],
        "view_bytes_per_session_median": statistics.median(size for size, _ in views),
        "view_bytes_per_session_mean": statistics.fmean(size for size, _ in views),
        "stored_bytes_per_session_median": statistics.median(stored_bytes(v) for _, v in views),
        "stored_bytes_per_session_mean": statistics.fmean(stored_bytes(v) for _, v in views),
        "tokens_per_session_median": statistics.median(
            sum(len(s["token_ids"]) for s in v["segments"]) for _, v in views
        ),
        "segments_per_session_mean": statistics.fmean(len(v["segments"]) for _, v in views),
        "rewritten_sessions": summary["rewritten_sessions"],
        "rewritten_turns": summary["rewritten"],
        "rewritten_share": summary["rewritten_sessions"] / sessions if sessions else 0.0,
        "new_segments": summary["new_segments"],
        "unrecorded_requests": summary["unrecorded_requests"],
    }
    finish: dict[str, int] = {}
    for trajectory in trajectories:
        finish[trajectory.finish_reason] = finish.get(trajectory.finish_reason, 0) + 1
    out |= {f"finish_{reason}": count for reason, count in sorted(finish.items())}
    return out
