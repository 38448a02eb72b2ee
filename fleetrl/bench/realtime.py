"""`fleetrl bench realtime`: real-time RL end to end, one online run of real processes.

    fleetrl run create (trainer.mode = online, trainer.steps = ceil(sessions / online_sessions))
      ├─ fleetrl trainer ─── a step every online_sessions sessions ─▶ weights/vN
      ├─ fleetrl gate ────── vN against the served version, held-out ─▶ control/serving.json
      └─ fleetrl serve ───── serves and follows control/serving.json, records each session
            ▲ chat                 │ feedback ─▶ trajectories/ (a group of one) ─▶ trainer
            └── simulated users (this process, `fleetrl.rollout.users`): Poisson arrivals
                on the train tasks, the micro harness, the verifier's verdict as feedback
    the trainer ends ─▶ the gate judges the last version and ends
      ─▶ latency: one load with no swap, then the same while the served version toggles
      ─▶ serve stops ─▶ held-out pass@1 of the first and the last served versions

Each process logs into the run folder's logs/ and is stopped, whatever happens, before the
benchmark returns. The trainer's steps cover the sessions exactly; when some never reach a
step (a user failed, a session was too stale), the trainer would wait for sessions that no
longer come (or train the last few once trainer.online_interval_s passed), so once it
waits for sessions after the users are done the benchmark stops it and signals the run's
end itself (`trainer_ended` says which way it ended; what it had not trained is pending).

The figures (the JSON document):
- reward_over_time: the sessions in arrival order cut into REWARD_BINS near-equal bins
  (with a task pool, one bin per round through the pool); per bin its mean reward (the
  verifier's), when it ran (seconds from the first arrival) and the versions that sampled
  its replies; reward_change: the last bin's mean less the first's with its 95% bootstrap
  interval (`reward_change`: paired over tasks with a pool). The goal: the served reward
  rises.
- heldout: greedy pass@1 of the first served version (0, the base) and of the last one on
  the first `heldout_tasks` tasks of eval.split, each with its 95% bootstrap interval over
  tasks, and the paired gain last - first in points with its interval (`paired_gain`);
  `separated`: the last's interval wholly above the first's, the goal.
- latency (`fleetrl.bench.swaps`): p50/p99 of short chat requests (LATENCY_CONCURRENCY at
  once, one started every LATENCY_GAP_S), with no swap and while the served version toggles
  every SWAP_EVERY_S between the first and the last served versions (the newest published
  one when only 0 was served, which `note` says); their p99 ratio, failed requests and the
  versions that answered (`mixed`: a reply two versions sampled, swapped in flight).
  Goals: no failed request, a p99 ratio of at most 1.5.
- sessions_per_version: sessions each version sampled replies for (a session whose
  replies two versions sampled counts for both).
- feedback_age_s (mean and max over steps of each step's mean age of its sessions' feedback
  at training) and staleness_mean (versions, mean over steps).
- sessions: the ledger. started, answered (feedback 200), failed (a user gave up), then
  where the channel's groups went: trained, skipped, dropped (too stale), pending (not
  trained at the end); duplicated (groups the server sent twice, counted in those places
  once each time); expired (recorded, never rewarded, as the server counts them) and
  lost = answered - the distinct sessions in the channel, which must be 0 (below 0: a
  session's group was sent but its feedback answered with an error).
  user_errors: why each user who gave up did, by session; server: the recorder's counters
  (with faults, the restarted serving process's).
- verdicts (the gate's), versions_published, served_version, wall_s and each phase's time.

With `faults` (--faults): the trainer is killed (SIGKILL) a third into the users' expected
arrival span and started again in its folder; the serving process two thirds in, started
again in its folder on its port (its sessions come back from its journal; the users retry
meanwhile). `faults` lists each kill, when it came and how long the restart took to serve
or train again; the ledger's `lost` must still be 0. A step the killed trainer had logged
but not checkpointed is trained again after the restart: the ledger counts each step's last
record.

Not covered: several serving processes.
"""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fleetrl.bench.swaps import REQUEST_TIMEOUT_S, swap_latency
from fleetrl.config import RunConfig
from fleetrl.config_files import with_overrides
from fleetrl.envs.tasks.suites import configured_tasks
from fleetrl.observe.metrics import read_metrics
from fleetrl.orchestrate.gate import Gate
from fleetrl.orchestrate.local import prepare_run, sigterm_unwinds, terminate
from fleetrl.orchestrate.roles import Started
from fleetrl.rollout.evaluate import evaluate_at
from fleetrl.rollout.stats import EvalResult, paired_gain, task_rates, unpaired_gain
from fleetrl.rollout.users import UserSession, run_users
from fleetrl.store.control import Progress, read_progress, signal_stop
from fleetrl.store.objectstore import ObjectStore, open_store
from fleetrl.store.serving import served_version, verdicts
from fleetrl.store.trajectories import GroupRecord, TrajectoryChannel
from fleetrl.store.weights import WeightStore
from fleetrl.types import Task

REWARD_BINS = 8
SEED = 0  # the users' arrivals and tasks
SERVE_START_S = 300.0  # for `fleetrl serve` to load the model and print its URL
TRAINER_GRACE_S = 600.0  # for the trainer's last step, once the users are done
SETTLE_S = 5.0  # after the users, before a trainer that waits for sessions is stopped
GATE_TIMEOUT_S = 3600.0  # for the gate's last verdict, once the trainer has ended
POLL_S = 0.5
SERVE_URL = re.compile(r" on (http://\S+) \(")  # in `fleetrl serve`'s start line
RECORDER_COUNTERS = ("sessions", "rewarded", "expired", "groups_sent", "send_failures")


class RealtimeBenchError(RuntimeError):
    """The run did not go through (a process failed or hung); the first line says which and
    names its log."""


@dataclass
class RealtimeWorkload:
    """What the run serves and measures."""

    sessions: int = 200  # simulated users, one session each
    rate_per_s: float = 0.2  # their mean arrival rate
    concurrency: int = 4  # users working at once, at most
    heldout_tasks: int = 100  # the first N tasks of eval.split for held-out pass@1
    latency_requests: int = 40  # chat requests per latency phase
    faults: bool = False  # kill the trainer and the serving process mid-run, restart each
    task_pool: int | None = None  # users go through this many train tasks in rounds


@dataclass
class _Roles:
    """The run's processes (`python -m fleetrl.cli ROLE --store URL …`), each logging into
    logs/ROLE.log of the run folder."""

    url: str
    run_dir: Path
    popens: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    argvs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)

    def start(self, role: str, *argv: str) -> None:
        """Start `role` with its own options after --store."""
        command = [sys.executable, "-m", "fleetrl.cli", role, "--store", self.url, *argv]
        with open(self.log(role), "ab") as log:
            self.popens[role] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.argvs[role] = argv
        self.starts[role] += 1

    def kill_and_restart(self, role: str, store: ObjectStore, *argv: str) -> float:
        """SIGKILL `role` and start it again (with `argv`, else its last options); the
        seconds until it is back: the serving process's URL printed, the trainer's first
        progress report in the `store`."""
        self.popens[role].kill()
        self.popens[role].wait()
        killed, start = time.time(), time.monotonic()
        self.start(role, *(argv or self.argvs[role]))
        if role == "serve":
            self.serve_url()
        while role == "trainer" and read_progress(store).time <= killed:
            if (code := self.popens[role].poll()) is not None:
                raise self.failed(role, f"exited with {code} after its restart")
            if time.monotonic() - start > TRAINER_GRACE_S:
                raise self.failed(role, f"reported nothing within {TRAINER_GRACE_S:.0f} s")
            time.sleep(POLL_S)
        return time.monotonic() - start

    def log(self, role: str) -> Path:
        """Where `role` writes its output."""
        return self.run_dir / "logs" / f"{role}.log"

    def failed(self, role: str, what: str) -> RealtimeBenchError:
        """The error for `role` having `what` (exited with N, hung …), with its log's tail."""
        tail = self.log(role).read_text(errors="replace").splitlines()[-20:]
        return RealtimeBenchError("\n".join([f"{role} {what} (log: {self.log(role)})", *tail]))

    def serve_url(self) -> str:
        """The URL the latest `fleetrl serve` prints in its start line (the port it bound)."""
        deadline = time.monotonic() + SERVE_START_S
        while len(found := SERVE_URL.findall(self.log("serve").read_text())) < self.starts["serve"]:
            if (code := self.popens["serve"].poll()) is not None:
                raise self.failed("serve", f"exited with {code} before serving")
            if time.monotonic() > deadline:
                raise self.failed("serve", f"printed no URL within {SERVE_START_S:.0f} s")
            time.sleep(POLL_S)
        return found[-1]

    def wait(self, role: str, timeout_s: float) -> None:
        """Wait for `role` to exit 0; RealtimeBenchError when it fails or outlasts timeout_s."""
        try:
            code = self.popens[role].wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise self.failed(role, f"did not end within {timeout_s:.0f} s") from None
        if code != 0:
            raise self.failed(role, f"exited with {code}")

    def stop(self, role: str) -> None:
        """SIGTERM `role` if it runs, SIGKILL if it is still there 10 s later."""
        terminate([self.popens[role]])


def realtime_config(base: RunConfig, workload: RealtimeWorkload, name: str) -> RunConfig:
    """The run: `base` turned online, with as many steps as the sessions fill, its store in
    its run folder, and every version kept (the first and last are evaluated at the end)."""
    steps = math.ceil(workload.sessions / base.trainer.online_sessions)
    return with_overrides(
        base,
        {
            "name": name,
            "trainer": {"mode": "online", "steps": steps},
            "store": {"url": "", "collect_garbage": False},
        },
    )


@dataclass
class _Laps:
    """Seconds each phase of the run took, in order."""

    seconds: dict[str, float] = field(default_factory=dict)
    since: float = field(default_factory=time.monotonic)

    def lap(self, phase: str) -> None:
        """`phase` ends now; the next one begins."""
        now = time.monotonic()
        self.seconds[phase], self.since = now - self.since, now


@dataclass
class _Served:
    """What the run's processes did, measured while they ran."""

    users: list[UserSession]
    faults: list[dict[str, Any]]  # each kill: the role, when, the restart's seconds
    trainer_ended: str  # how: its steps done, or stopped by the bench
    last: int  # the version served at the end
    latency: dict[str, Any]
    recorder: dict[str, Any]  # the server's counters at the end (GET /v1/sessions)


def run_realtime_bench(
    base: RunConfig,
    workload: RealtimeWorkload,
    run_dir: Path,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the online run in `run_dir` (a new folder: its name is the run's) from `base`,
    serve it to the simulated users, and measure it; the figures (the module's docstring).
    `echo`: told each phase as it begins. RealtimeBenchError when a process fails."""
    say = echo or (lambda line: None)
    config = realtime_config(base, workload, run_dir.name)
    tasks = configured_tasks(config.tasks, config.tasks.split)
    if workload.task_pool is not None and workload.task_pool > len(tasks):
        raise RealtimeBenchError(
            f"a task pool of {workload.task_pool}: the {config.tasks.split} split has only "
            f"{len(tasks)} tasks"
        )
    laps = _Laps()
    store = open_store(prepare_run(config, run_dir))
    with sigterm_unwinds():
        served = _serve_and_train(config, workload, tasks, run_dir, store, laps, say)
    say(f"held-out pass@1 of versions 0 and {served.last} ...")
    heldout = _heldout(config, store, run_dir, served.last, workload.heldout_tasks)
    laps.lap("heldout_s")
    users = served.users
    metrics = run_dir / "metrics.jsonl"  # written from the trainer's first step on
    records = read_metrics(metrics) if metrics.exists() else []
    # a step logged twice (trained again by a restarted trainer that had not checkpointed
    # it) counts once, as its last record says
    train = list({r["step"]: r for r in records if r["kind"] == "train"}.values())
    progress = read_progress(store)
    ages = [r["feedback_age_s"] for r in train if r["feedback_age_s"] is not None]
    pool = workload.task_pool
    bins = REWARD_BINS if pool is None else math.ceil(workload.sessions / pool)
    return {
        "reward_over_time": reward_over_time(users, bins),
        "reward_change": reward_change(users, bins, paired=pool is not None),
        "heldout": heldout,
        "latency": served.latency,
        "sessions_per_version": sessions_per_version(users),
        "feedback_age_s": {
            "mean": float(np.mean(ages)) if ages else None,
            "max": max(ages, default=None),
        },
        "staleness_mean": float(np.mean([r["staleness_mean"] for r in train])) if train else None,
        "faults": served.faults,
        "sessions": session_ledger(
            users,
            train,
            progress,
            TrajectoryChannel(store).read_new({}),  # the run collects no garbage
            served.recorder["expired"],
        ),
        "user_errors": {user.session_id: user.error[:200] for user in users if user.error},
        "server": {key: served.recorder[key] for key in RECORDER_COUNTERS},
        "verdicts": [asdict(verdict) for verdict in verdicts(store)],
        "versions_published": len(WeightStore(store).versions()),
        "served_version": served.last,
        "trainer_ended": served.trainer_ended,
        "wall_s": sum(laps.seconds.values()),
        "phases_s": laps.seconds,
        "config": {
            "model": config.model.path,
            "run_dir": str(run_dir),
            "train_tasks": len(tasks),
            "online_sessions": config.trainer.online_sessions,
            "trainer_steps": config.trainer.steps,
            "max_staleness": config.trainer.max_staleness,
            "gate_tasks": config.gate.tasks,
            "user_temperature": config.rollout.temperature,
            **asdict(workload),
        },
    }


def _serve_and_train(
    config: RunConfig,
    workload: RealtimeWorkload,
    tasks: list[Task],
    run_dir: Path,
    store: ObjectStore,
    laps: _Laps,
    say: Callable[[str], None],
) -> _Served:
    """The run's processes from start to stop: the users, the trainer's and the gate's
    ends, the latency phases; every process stopped before it returns or raises."""
    roles = _Roles(store.url, run_dir)
    try:
        roles.start("trainer", "--workdir", str(run_dir))
        roles.start("gate", "--workdir", str(run_dir / "gate"))
        roles.start("serve", "--port", "0", "--workdir", str(run_dir / "serve"))
        url = roles.serve_url()
        laps.lap("start_s")
        say(f"{workload.sessions} users at {workload.rate_per_s:g}/s against {url} ...")
        users_run = run_users(
            url,
            "served",
            tasks,
            config.harness,
            workload.rate_per_s,
            workload.sessions,
            seed=SEED,
            temperature=config.rollout.temperature,
            concurrency=workload.concurrency,
            rollout=config.rollout,
            pool=workload.task_pool,
        )
        span_s = workload.sessions / workload.rate_per_s if workload.faults else None
        users, faults = asyncio.run(_through_faults(users_run, roles, store, span_s, say))
        laps.lap("users_s")
        say(f"waiting for the trainer ({config.trainer.steps} steps) and the gate ...")
        trainer_ended = _await_trainer(roles, config, store, users_done=time.time())
        roles.wait("gate", GATE_TIMEOUT_S)
        laps.lap("trainer_and_gate_after_users_s")
        last = served_version(store)
        say("latency, with no swap and while versions swap ...")
        try:
            latency = asyncio.run(swap_latency(url, store, last, workload.latency_requests))
        except TimeoutError as error:
            raise roles.failed("serve", str(error)) from error
        recorder = httpx.get(f"{url}/v1/sessions", timeout=REQUEST_TIMEOUT_S).json()
        laps.lap("latency_s")
    finally:
        for role in roles.popens:
            roles.stop(role)
    return _Served(users, faults, trainer_ended, last, latency, recorder)


async def _through_faults(
    users_run: Coroutine[Any, Any, list[UserSession]],
    roles: _Roles,
    store: ObjectStore,
    span_s: float | None,
    say: Callable[[str], None],
) -> tuple[list[UserSession], list[dict[str, Any]]]:
    """The users' sessions; with `span_s` (the users' expected arrival span), the trainer
    killed and restarted a third into it and the serving process two thirds in, on its
    port. Each kill: {role, at_s (since the users began), restart_s (until it was back)}."""
    users = asyncio.ensure_future(users_run)
    faults: list[dict[str, Any]] = []
    begun = time.monotonic()
    for role, share in (("trainer", 1 / 3), ("serve", 2 / 3)):
        if span_s is None:
            break
        await asyncio.wait({users}, timeout=max(0.0, begun + share * span_s - time.monotonic()))
        if users.done():
            break
        at_s = time.monotonic() - begun
        say(f"killing the {role} at {at_s:.0f} s, and starting it again ...")
        argv: tuple[str, ...] = ()
        if role == "serve":  # on the port it had: the users come back to the same URL
            port = roles.serve_url().rsplit(":", 1)[1].strip("/")
            argv = ("--port", port, "--workdir", roles.argvs[role][-1])
        restart_s = await asyncio.to_thread(roles.kill_and_restart, role, store, *argv)
        faults.append({"role": role, "at_s": at_s, "restart_s": restart_s})
    return await users, faults


def _await_trainer(roles: _Roles, config: RunConfig, store: ObjectStore, users_done: float) -> str:
    """Wait for the trainer to end; how it ended. Once it reports waiting for sessions more
    than SETTLE_S after the users were done (`users_done`, unix time), every session is in
    the channel and it has read them: short of its steps, it waits for sessions that no
    longer come (or for trainer.online_interval_s to train the last few). Then it is
    stopped, and the run's end signalled for the gate."""
    deadline = time.monotonic() + TRAINER_GRACE_S
    while (code := roles.popens["trainer"].poll()) is None:
        progress = read_progress(store)
        idle = progress.waiting_s > 0 and progress.time > users_done + SETTLE_S
        if idle and progress.step < config.trainer.steps:
            roles.stop("trainer")
            signal_stop(store)
            return f"stopped by the bench after step {progress.step}: no batch left to fill"
        if time.monotonic() > deadline:
            raise roles.failed("trainer", f"did not end within {TRAINER_GRACE_S:.0f} s")
        time.sleep(POLL_S)
    if code != 0:
        raise roles.failed("trainer", f"exited with {code}")
    return "its steps done"


def _binned(users: list[UserSession], bins: int) -> list[list[UserSession]]:
    """The sessions in arrival order in `bins` near-equal bins (fewer with fewer sessions)."""
    ordered = sorted(users, key=lambda user: user.arrived)
    parts = np.array_split(np.arange(len(ordered)), min(bins, len(ordered)))
    return [[ordered[i] for i in part] for part in parts]


def reward_over_time(users: list[UserSession], bins: int) -> list[dict[str, Any]]:
    """Per bin (`_binned`): its sessions, mean reward of the graded ones (None: none
    graded), span in seconds from the first arrival, and the versions that sampled its
    replies."""
    if not users:
        return []
    start = min(user.arrived for user in users)
    figures = []
    for chunk in _binned(users, bins):
        rewards = [user.reward for user in chunk if user.reward is not None]
        figures.append(
            {
                "sessions": len(chunk),
                "mean_reward": float(np.mean(rewards)) if rewards else None,
                "from_s": chunk[0].arrived - start,
                "to_s": max(user.ended for user in chunk) - start,
                "versions": sorted(set().union(*(user.versions for user in chunk))),
            }
        )
    return figures


def reward_change(users: list[UserSession], bins: int, paired: bool) -> dict[str, Any] | None:
    """The last bin's mean reward less the first's (graded sessions) with a 95% bootstrap
    interval: `paired` over the tasks graded in both bins (each bin a round through the
    same task pool, so each task is compared with itself), otherwise each bin resampled on
    its own (`unpaired_gain`). None with fewer than two bins graded."""
    chunks = _binned(users, bins)
    if len(chunks) < 2:
        return None
    first, last = ([u for u in chunks[i] if u.reward is not None] for i in (0, -1))
    if not first or not last:
        return None
    if not paired:
        mean, low, high = unpaired_gain([u.reward for u in last], [u.reward for u in first])
        return {"mean": mean, "low": low, "high": high, "paired": False}
    before, after = ({u.task_id: u.reward for u in chunk} for chunk in (first, last))
    shared = sorted(before.keys() & after.keys())
    mean, low, high = paired_gain({t: after[t] for t in shared}, {t: before[t] for t in shared})
    return {"mean": mean, "low": low, "high": high, "paired": True, "tasks": len(shared)}


def sessions_per_version(users: list[UserSession]) -> dict[str, int]:
    """{version: sessions it sampled replies for}, by version (JSON keys are strings)."""
    counts = Counter(version for user in users for version in user.versions)
    return {str(version): counts[version] for version in sorted(counts)}


def session_ledger(
    users: list[UserSession],
    train: list[dict[str, Any]],
    progress: Progress,
    channel: list[GroupRecord],
    expired: int,
) -> dict[str, int]:
    """Where every session went (online, a group is one session): the users' side (started,
    answered, failed); trained and skipped from the train records; dropped as too stale
    from the trainer's `progress` (its records name a drop only at the step after it);
    pending: the rest of the `channel`'s groups (read and waiting for a step, or unread);
    duplicated: groups the server sent twice (the same recorder group id); the server's
    `expired`; and `lost`: answered sessions less the distinct sessions of the channel,
    where each has one of those places (`train`: one record per step)."""
    placed = {
        "trained": sum(len(r["group_ids"]) for r in train),
        "skipped": sum(len(r["skipped_group_ids"]) for r in train),
        "dropped": progress.dropped_samples,
    }
    placed["pending"] = len(channel) - sum(placed.values())
    sent = {t.group_id for record in channel for t in record.trajectories}
    answered = sum(user.feedback_status == 200 for user in users)
    return {
        "started": sum(user.started > 0 for user in users),
        "answered": answered,
        "failed": sum(user.error is not None for user in users),
        **placed,
        "duplicated": len(channel) - len(sent),
        "expired": expired,
        "lost": answered - len(sent),
    }


def _heldout(
    config: RunConfig, store: ObjectStore, run_dir: Path, last: int, tasks: int
) -> dict[str, Any]:
    """Greedy pass@1 of versions 0 and `last` (each made a checkpoint as the gate makes
    it) on the first `tasks` tasks of eval.split, and the paired gain of last over 0."""
    settings = with_overrides(config, {"eval": {"max_tasks": tasks}})
    gate = Gate(Started(settings, run_dir, store))
    results: dict[int, EvalResult] = {}
    for version in dict.fromkeys((0, last)):
        with tempfile.TemporaryDirectory(prefix="fleetrl-realtime-") as tmp:
            checkpoint = gate.checkpoint_of(version, Path(tmp))
            results[version] = evaluate_at(checkpoint, settings, settings.eval.split, 0.0, 1)
    first, final = results[0], results[last]
    gain, low, high = paired_gain(task_rates(final.to_json()), task_rates(first.to_json()))

    def figures(version: int, result: EvalResult) -> dict[str, Any]:
        return {
            "version": version,
            "pass_at_1": result.pass_at_1,
            "ci_low": result.ci_low,
            "ci_high": result.ci_high,
        }

    return {
        "split": settings.eval.split,
        "tasks": first.tasks,
        "first": figures(0, first),
        "last": figures(last, final),
        "gain": {"points": 100 * gain, "ci_low": 100 * low, "ci_high": 100 * high},
        "separated": final.ci_low > first.ci_high,
    }
