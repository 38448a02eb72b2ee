"""Demonstrations inside mini-swe-agent: the scripted expert's episodes as the recording
endpoint records them at RL time, for `fleetrl sft` with `rollout.harness = mini-swe-agent`.

    tasks ─▶ scripted_mswe_actions(task): read, edit (python), check, submit
          ─▶ ScriptedEngine: an Engine whose sampling returns the script's next reply
          ─▶ Rollouts.run_one, as in an RL region: LocalEndpoint (the recorder),
             mini-swe-agent's DefaultAgent and litellm model, the bwrap sandbox, the verifier
          ─▶ kept iff reward 1, submitted, no format error and one segment
          ─▶ Demo: the segment's token ids and loss mask (1 = the expert's replies)
          ─▶ cached under a digest of everything they depend on

Contract: a Demo's ids are exactly what the recording endpoint records when the model
samples the expert's replies (each its tokenizer encoding plus `<|im_end|>`): the same
prompts, the same observations rendered by mini-swe-agent, the same continuation of the
segment across turns. Only the sampling is replaced; the engine still refuses a prompt
that fills the window and cuts a reply at `max_tokens`, as the real one does, so a
demonstration that would not fit the harness's budgets is dropped, not trained on.

Not covered: renamed copies (every demonstration is of a task graded by the verifier) and
plans other than the gold patch's fix (`sft.plans` does not apply).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from rich.progress import Progress

import fleetrl.config as config_module
import fleetrl.config_files as config_files_module
from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.tasks.guide import FIX
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.files import cache_dir, write_whole
from fleetrl.inference import engine as engine_module
from fleetrl.inference import protocol, recording, server
from fleetrl.model import chat
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout import mswe, worker
from fleetrl.rollout.demos import DemoStats
from fleetrl.rollout.mswe import ScriptedEngine
from fleetrl.types import Demo, Task, Trajectory

# What the recorded tokens depend on besides the task records, tokenizer and settings.
_SOURCES = (
    Path(mswe.__file__),
    Path(mswe.__file__).parent.parent / "configs" / "mswe.yaml",
    Path(worker.__file__),
    Path(recording.__file__),
    Path(server.__file__),
    Path(protocol.__file__),
    Path(engine_module.__file__),
    Path(chat.__file__),
    Path(config_module.__file__),
    Path(config_files_module.__file__),
    Path(__file__),
)
_PACKAGES = ("mini-swe-agent", "litellm")  # their versions are part of the cache key


def _verdict(task: Task, trajectory: Trajectory) -> tuple[Demo | None, str]:
    """The demo of a finished scripted episode, or why it is not one."""
    if trajectory.finish_reason != "finish" or trajectory.tool_errors:
        why = f"ended by {trajectory.finish_reason}, {trajectory.tool_errors} format errors"
        return None, why
    if trajectory.reward != 1.0:
        return None, f"verifier: reward {trajectory.reward:g}, flags {trajectory.flags}"
    if len(trajectory.segments) != 1:
        return None, f"{len(trajectory.segments)} segments (history rewritten)"
    (segment,) = trajectory.segments
    return Demo(task.instance_id, FIX, segment.token_ids, segment.loss_mask), ""


def _script(task: Task) -> tuple[list[str] | None, str]:
    ensure_repo(task)
    try:
        return list(mswe.scripted_mswe_actions(task)), ""
    except ValueError as err:
        return None, f"no script: {err}"


async def _demonstrate(
    tasks: list[Task],
    model: Qwen3,
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    concurrency: int,
    progress: bool,
) -> list[tuple[str, Demo | None, str]]:
    """(task id, demo or None, reason) of every task, in task order."""
    made = await asyncio.gather(*(asyncio.to_thread(_script, task) for task in tasks))
    outcomes: dict[str, tuple[Demo | None, str]] = {}
    scripts: dict[str, list[str]] = {}
    runnable = []
    for task, (replies, why) in zip(tasks, made, strict=True):
        if replies is None:
            outcomes[task.instance_id] = (None, why)
        elif task.problem_statement in scripts:
            outcomes[task.instance_id] = (None, "same problem statement as another task")
        else:
            scripts[task.problem_statement] = replies
            runnable.append(task)
    # Sized as `rollout_engine` sizes an RL region's engine: the same window refusal.
    engine = ScriptedEngine(model, tokenizer, scripts, harness.max_context + 8)
    mini = rollout.model_copy(update={"harness": mswe.HARNESS})
    rollouts = worker.Rollouts(engine, tokenizer, harness, mini, concurrency, concurrency)
    with Progress(disable=not progress, transient=True) as bar:
        job = bar.add_task("mini-swe-agent demonstrations", total=len(runnable))

        async def one(task: Task) -> None:
            trajectory = await rollouts.run_one(task)
            outcomes[task.instance_id] = _verdict(task, trajectory)
            bar.advance(job)

        try:
            await asyncio.gather(*map(one, runnable))
        finally:
            await rollouts.close()
    return [(task.instance_id, *outcomes[task.instance_id]) for task in tasks]


def generate_mswe_demos(
    tasks: list[Task],
    model: Qwen3,
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    concurrency: int = 4,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """One demonstration per task, in task order, of the scripted expert inside
    mini-swe-agent through the recording endpoint, graded by the verifier (sandboxes and
    grading follow `rollout`; budgets and window follow `harness`)."""
    start = time.monotonic()
    outcomes = asyncio.run(
        _demonstrate(tasks, model, tokenizer, harness, rollout, concurrency, progress)
    )
    demos = [demo for _, demo, _ in outcomes if demo is not None]
    dropped = {f"{name}/{FIX}": why for name, demo, why in outcomes if demo is None}
    return demos, DemoStats.of(demos, len(outcomes), len(outcomes), dropped, start)


def mswe_demos_key(
    tasks: list[Task], tokenizer: Tokenizer, harness: HarnessSection, rollout: RolloutSection
) -> str:
    """A digest of everything a demonstration's tokens or its keeping depend on: the
    sources of the harness path (`_SOURCES`, mini-swe-agent's configuration included),
    mini-swe-agent's and litellm's versions, the harness and sandbox settings, the task
    records (their repository paths aside) and the tokenizer."""
    digest = hashlib.sha256(b"mswe-demos-v1")
    for path in _SOURCES:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for package in _PACKAGES:
        digest.update(f"{package}=={metadata.version(package)}".encode())
    digest.update(harness.model_dump_json().encode())
    digest.update(rollout.model_dump_json(include={"sandbox_backend", "sandbox_wall_s"}).encode())
    for task in tasks:
        digest.update(json.dumps({**asdict(task), "repo": ""}, sort_keys=True).encode())
    digest.update(tokenizer.backend.to_str().encode())
    return digest.hexdigest()[:16]


def load_or_generate_mswe_demos(
    tasks: list[Task],
    model: Qwen3,
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    cache: Path | None = None,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """`generate_mswe_demos`, cached under `cache` (default: the fleetrl cache dir) by
    `mswe_demos_key`, so reruns skip it and any change that could change a token misses."""
    folder = cache or cache_dir() / "demos"
    key = mswe_demos_key(tasks, tokenizer, harness, rollout)
    path = folder / f"mswe-demos-{key}.json.gz"
    if path.is_file():
        data = json.loads(gzip.decompress(path.read_bytes()))
        return [Demo(**d) for d in data["demos"]], DemoStats(**data["stats"])
    demos, stats = generate_mswe_demos(tasks, model, tokenizer, harness, rollout, progress=progress)
    data = {"demos": [asdict(d) for d in demos], "stats": asdict(stats)}
    write_whole(path, gzip.compress(json.dumps(data).encode()))
    return demos, stats
