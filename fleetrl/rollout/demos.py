"""Demonstrations: the tasks' guides run by the rollout worker, kept, cached.

    tasks ─▶ renamed copies (fresh names, `copies` per task, made by the task's guide)
          ─▶ per plan and guide: one scripted policy over its tasks (`Guide.policy`)
                ─▶ Rollouts.run_one, like any policy
                originals graded by the verifier, copies checked by the guide only
          ─▶ kept iff the guide met no problem, the episode ended by `finish` without tool
             errors and, where graded, the verifier gave reward 1; else dropped with why
          ─▶ Demo per context window: the harness's own token ids and loss mask (1 = the
             expert's replies, its summaries included, less its `unlearned` ones); a window
             with nothing left to learn is no demo
          ─▶ cached under a digest of everything they depend on

Contract: a Demo's ids are exactly what the harness recorded, so a model trained on them
sees at training time the prompt, tool-result and reply tokens it will see at RL time.
Demos come in a fixed order (each task by every plan, then the copies task by task),
whatever order the episodes finish in. A task's guide is the registry's
(`fleetrl.envs.tasks.suites.guide_for`): the scripted micro expert for the bundled suites.
Copies are not graded because grading costs ~10x an expert episode; the expert's own check
(the example prints its expected value) stands in. Generating takes ~0.15 s per episode on
two cores; `load_or_generate_demos` caches.

Not covered: plans or copies a task's guide does not make (the gold-patch guide of a task
folder follows `fix` only and makes no copies): they raise ValueError.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.progress import Progress

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.harness import loop as harness_module
from fleetrl.envs.harness import tools
from fleetrl.envs.tasks.guide import Guide, Scripted, TaskCopy
from fleetrl.envs.tasks.suites import guide_for
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.files import cache_dir, write_whole
from fleetrl.model import chat
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Demo, Task, Trajectory

COPY_SEED = "fleetrl-demos-1"  # seeds every copy's names; changing it changes every copy
# What the recorded tokens depend on besides the guides' own sources (`Guide.sources`), the
# task records, tokenizer and harness settings: a change to any of these files makes a new
# cache entry.
_SOURCES = (
    Path(harness_module.__file__),
    Path(tools.__file__),
    Path(chat.__file__),
    Path(__file__),
)


@dataclass
class DemoStats:
    """What generating a set of demonstrations gave."""

    episodes: int  # episodes run: tasks x plans, plus tasks x copies
    kept: int  # demonstrations: one per context window of each episode kept
    graded: int = 0  # episodes also graded by the verifier (those of the original tasks)
    dropped: dict[str, str] = field(default_factory=dict)  # "task_id/plan" -> reason
    mean_tokens: float = 0.0  # per kept demo, whole sequence
    mean_reply_tokens: float = 0.0  # per kept demo, loss_mask == 1
    max_tokens: int = 0
    duration_s: float = 0.0

    @classmethod
    def of(
        cls, demos: list[Demo], episodes: int, graded: int, dropped: dict[str, str], start: float
    ) -> DemoStats:
        """The stats of the kept `demos` of a generation begun at `start` (monotonic)."""
        n = max(len(demos), 1)
        return cls(
            episodes=episodes,
            kept=len(demos),
            graded=graded,
            dropped=dropped,
            mean_tokens=sum(len(d.token_ids) for d in demos) / n,
            mean_reply_tokens=sum(sum(d.loss_mask) for d in demos) / n,
            max_tokens=max((len(d.token_ids) for d in demos), default=0),
            duration_s=time.monotonic() - start,
        )


@dataclass(frozen=True)
class _Job:
    """One expert episode to run."""

    name: str  # "task_id/plan" or "task_id/copyK/plan", the key of DemoStats.dropped
    task: Task
    plan: str
    graded: bool  # by the verifier (originals), or by the guide's own checks (copies)
    guide: Guide  # the original task's (a copy belongs to no suite)
    copy: TaskCopy | None = None  # its repository is written just before the episode


def _unlearned(
    segments: list[tuple[list[int], list[int]]], replies: list[list[int]]
) -> list[list[int]]:
    """The loss masks of `segments` ((ids, mask) per context window) with each of `replies`
    (expert replies not to learn from) set to 0 where it first occurs among the learned
    tokens of a window."""
    masks = [list(mask) for _, mask in segments]
    for reply in replies:
        for (ids, _), mask in zip(segments, masks, strict=True):
            starts = (i for i in range(len(ids)) if ids[i : i + len(reply)] == reply and mask[i])
            start = next(starts, None)
            if start is not None:
                mask[start : start + len(reply)] = [0] * len(reply)
                break
        else:
            raise ValueError("an unlearned reply is not among the episode's replies")
    return masks


def _verdict(job: _Job, trajectory: Trajectory, expert: Scripted) -> tuple[list[Demo], str]:
    """The demos of a finished guide's episode (one per context window), or why there
    are none."""
    problems = expert.problems[job.task.instance_id]
    if problems:
        return [], "; ".join(problems)
    steps = job.guide.steps(job.task, job.plan)
    slips = steps.count("slip")  # edits the tool must refuse
    if trajectory.finish_reason != "finish" or trajectory.tool_errors != slips:
        return [], f"ended by {trajectory.finish_reason}, {trajectory.tool_errors} tool errors"
    if len(trajectory.segments) != steps.count("summary") + 1:
        return [], f"{len(trajectory.segments)} context windows, not one per summary + 1"
    if job.graded and trajectory.reward != 1.0:
        return [], f"verifier: reward {trajectory.reward:g}, flags {trajectory.flags}"
    replies = expert.unlearned[job.task.instance_id]
    demos = []
    windows = [(segment.token_ids, segment.loss_mask) for segment in trajectory.segments]
    for segment, mask in zip(trajectory.segments, _unlearned(windows, replies), strict=True):
        if any(mask):  # a window whose replies are all unlearned teaches nothing
            demos.append(Demo(job.task.instance_id, job.plan, segment.token_ids, mask))
    return demos, ""


def _jobs(
    tasks: list[Task], repos: list[Path], plans: list[str], copies: int, tmp: Path
) -> list[_Job]:
    """Every episode in demo order: each task by every plan, then `copies` renamed copies
    per task (copy k of task i by plan i + k in turn), each seeded by its task and k.
    ValueError for a task no guide serves."""
    guides = [_guide(task) for task in tasks]
    jobs = [
        _Job(f"{t.instance_id}/{p}", t, p, graded=True, guide=g)
        for t, g in zip(tasks, guides, strict=True)
        for p in plans
    ]
    for i, (task, repo, guide) in enumerate(zip(tasks, repos, guides, strict=True)):
        for k in range(copies):
            plan = plans[(i + k) % len(plans)]
            rng = random.Random(f"{COPY_SEED}-{task.instance_id}-{k}")
            copy = guide.copy(task, repo, rng, tmp / f"{i}-{k}")
            name = f"{task.instance_id}/copy{k}/{plan}"
            jobs.append(_Job(name, copy.task, plan, graded=False, guide=guide, copy=copy))
    return jobs


def _guide(task: Task) -> Guide:
    """The task's guide; ValueError when it has none."""
    guide = guide_for(task)
    if guide is None:
        raise ValueError(f"{task.instance_id}: no guide serves the task")
    return guide


def _unique_statements(jobs: list[_Job]) -> tuple[list[_Job], dict[str, str]]:
    """The jobs an expert can tell apart (one per problem statement), and why the others
    are dropped: a renamed copy can draw the name and call of another task of its plan."""
    first: dict[str, _Job] = {}
    dropped = {}
    for job in jobs:
        other = first.setdefault(job.task.problem_statement, job)
        if other is not job:
            dropped[job.name] = f"same problem statement as {other.name}"
    return list(first.values()), dropped


async def _run_plan(
    jobs: list[_Job],
    expert: Scripted,
    rollouts: Rollouts,
    gate: asyncio.Semaphore,
    advance: Callable[[], None],
) -> dict[str, tuple[list[Demo], str]]:
    """The verdicts of one plan's jobs of one guide, all run by one scripted policy."""

    async def run(job: _Job) -> tuple[list[Demo], str]:
        async with gate:
            if job.copy is not None:
                await asyncio.to_thread(job.copy.write)
            try:
                trajectory = await rollouts.run_one(job.task, grade=job.graded)
            finally:
                if job.copy is not None:
                    await asyncio.to_thread(shutil.rmtree, job.task.repo)
        advance()
        return _verdict(job, trajectory, expert)

    verdicts = await asyncio.gather(*(run(job) for job in jobs))
    return {job.name: verdict for job, verdict in zip(jobs, verdicts, strict=True)}


async def _demonstrate(
    tasks: list[Task],
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    plans: list[str],
    copies: int,
    concurrency: int,
    progress: bool,
) -> list[tuple[str, list[Demo], str]]:
    """(job name, its demos (none if dropped), reason) of every episode, in demo order."""
    repos = await asyncio.gather(*(asyncio.to_thread(ensure_repo, task) for task in tasks))
    outcomes: dict[str, tuple[list[Demo], str]] = {}
    gate = asyncio.Semaphore(concurrency)  # jobs in flight: sandboxes, pytest runs, repos
    with (
        tempfile.TemporaryDirectory(prefix="fleetrl-demos-") as tmp,
        Progress(disable=not progress, transient=True) as bar,
    ):
        jobs = await asyncio.to_thread(_jobs, tasks, list(repos), plans, copies, Path(tmp))
        bar_task = bar.add_task("demonstrations", total=len(jobs))
        # One policy per plan and guide: a task's episodes by two plans open with the same
        # prompt.
        for plan in plans:
            for guide in {id(job.guide): job.guide for job in jobs}.values():
                mine = [job for job in jobs if job.plan == plan and job.guide is guide]
                runnable, dropped = _unique_statements(mine)
                outcomes.update((name, ([], reason)) for name, reason in dropped.items())
                expert = guide.policy([job.task for job in runnable], plan, tokenizer)
                rollouts = Rollouts(expert, tokenizer, harness, rollout, concurrency, concurrency)
                outcomes |= await _run_plan(
                    runnable, expert, rollouts, gate, lambda: bar.advance(bar_task)
                )
    return [(job.name, *outcomes[job.name]) for job in jobs]


def generate_demos(
    tasks: list[Task],
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    plans: list[str],
    copies: int = 0,
    concurrency: int = 4,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """Demonstrations of `tasks`, in task order: one per task and plan (plans of the
    tasks' guides, e.g. keys of the micro expert's PLANS; `fleetrl sft` passes
    `sft.plans`), graded by the verifier, then `copies` renamed copies per task (each by
    the next plan in turn), checked by the guide. Sandboxes and grading follow `rollout`."""
    start = time.monotonic()
    outcomes = asyncio.run(
        _demonstrate(tasks, tokenizer, harness, rollout, plans, copies, concurrency, progress)
    )
    demos = [demo for _, kept, _ in outcomes for demo in kept]
    dropped = {name: reason for name, kept, reason in outcomes if not kept}
    stats = DemoStats.of(demos, len(outcomes), len(tasks) * len(plans), dropped, start)
    return demos, stats


def demos_key(
    tasks: list[Task],
    tokenizer: Tokenizer,
    harness: HarnessSection,
    plans: list[str],
    copies: int,
) -> str:
    """A digest of everything a demonstration's tokens depend on: the tasks' guides',
    harness's, tools' and chat format's source files, the harness settings, the task
    records (their repository paths aside), the tokenizer, plans and copies."""
    digest = hashlib.sha256()
    for path in _sources(tasks):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(harness.model_dump_json().encode())
    for task in tasks:
        digest.update(json.dumps({**asdict(task), "repo": ""}, sort_keys=True).encode())
    digest.update(tokenizer.backend.to_str().encode())
    digest.update(repr((plans, copies)).encode())
    return digest.hexdigest()[:16]


def _sources(tasks: list[Task]) -> tuple[Path, ...]:
    """The source files the demonstrations of `tasks` depend on: their guides', then the
    harness's, tools', chat format's and this module's (`_SOURCES`)."""
    guides = {id(g): g for g in map(guide_for, tasks) if g is not None}
    return (*dict.fromkeys(p for g in guides.values() for p in g.sources), *_SOURCES)


def load_or_generate_demos(
    tasks: list[Task],
    tokenizer: Tokenizer,
    harness: HarnessSection,
    rollout: RolloutSection,
    plans: list[str],
    copies: int = 0,
    cache: Path | None = None,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """`generate_demos`, cached under `cache` (default: the fleetrl cache dir) by
    `demos_key`, so reruns skip it and any change that could change a token misses."""
    folder = cache or cache_dir() / "demos"
    path = folder / f"demos-{demos_key(tasks, tokenizer, harness, plans, copies)}.json.gz"
    if path.is_file():
        data = json.loads(gzip.decompress(path.read_bytes()))
        return [Demo(**d) for d in data["demos"]], DemoStats(**data["stats"])
    demos, stats = generate_demos(
        tasks, tokenizer, harness, rollout, plans, copies, progress=progress
    )
    data = {"demos": [asdict(d) for d in demos], "stats": asdict(stats)}
    write_whole(path, gzip.compress(json.dumps(data).encode()))
    return demos, stats
