"""The gate between the trainer and the serving fleet (real-time RL): a version reaches
users only if it does no worse than the one they have, on simulation tasks held out
from training (the `val` split: the reported one, eval.split, stays unseen).

    until the trainer's stop signal, and then once more:
        candidate = the newest version (those published while the last was judged are
                    skipped: the fleet takes a new policy every so often, not every step)
        ├─ judged already, or the one served ─▶ wait gate.poll_s
        ▼
        one episode per task on the first gate.tasks tasks of gate.split (val), at
        gate.temperature, for the candidate and for the served version (kept per version)
        ─▶ gain = mean over tasks of candidate - served, with its 95% paired bootstrap
           interval (`fleetrl.rollout.stats.paired_gain`)
        ├─ the whole interval below 0, worse beyond noise ─▶ rejected: its verdict is kept
        │                                                   (control/gate/), it is not served
        └─ otherwise ─▶ passed: control/serving.json names it; `fleetrl serve --store`
                        processes swap it in (`fleetrl.store.serving`)

"Not worse beyond noise" and not "better": a policy trained on live traffic improves in
small steps, each one too small for a gate of this size to see, and a gate that demanded a
visible gain would hold every one of them back. What it stops is a version that broke
something. A rejected version is not served, and the next candidate is judged against the
version still served.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fleetrl.config import RunConfig
from fleetrl.model.checkpoint import load_pretrained, resolve_checkpoint, save_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.orchestrate.roles import Started
from fleetrl.rollout.evaluate import episodes_of, split_tasks
from fleetrl.rollout.stats import paired_gain
from fleetrl.store.control import stop_signalled
from fleetrl.store.serving import Verdict, serve_version, served_version, write_verdict
from fleetrl.store.weights import WeightStore


@dataclass
class Gate:
    """The gate of one run: its store, its tasks, what it measured so far."""

    started: Started
    weights: WeightStore = field(init=False)
    judged: int = -1  # the newest version judged
    scores: dict[int, dict[str, float]] = field(default_factory=dict)  # version: task: reward

    def __post_init__(self) -> None:
        self.weights = WeightStore(self.started.store)

    @property
    def config(self) -> RunConfig:
        """The run's configuration (the gate's section among it)."""
        return self.started.config

    def run(self) -> list[Verdict]:
        """Judge new versions until the trainer is done; the verdicts given."""
        given = []
        while True:
            done = stop_signalled(self.started.store)  # before the look: no version missed
            verdict = self.judge_newest()
            if verdict is not None:
                given.append(verdict)
            elif done:
                return given
            else:
                time.sleep(self.config.gate.poll_s)

    def judge_newest(self) -> Verdict | None:
        """Judge the newest version, unless it was judged or is the one served; its
        verdict (kept in the store, and served if it passed), or None."""
        candidate = self.weights.latest()
        serving = served_version(self.started.store)
        if candidate is None or candidate <= self.judged or candidate == serving:
            return None
        ours, theirs = self.scores_of(candidate), self.scores_of(serving)
        gain, low, high = paired_gain(ours, theirs)
        passed = high >= 0.0
        split = self.config.gate.split
        reason = f"gain on {split} {gain:+.3f} [{low:+.3f}, {high:+.3f}] over version {serving}: "
        reason += "not worse beyond noise" if passed else "worse beyond noise"
        verdict = Verdict(
            version=candidate,
            passed=passed,
            reason=reason,
            serving_version=serving,
            pass_at_1=_mean(ours),
            serving_pass_at_1=_mean(theirs),
            gain=gain,
            gain_low=low,
            gain_high=high,
            tasks=len(ours),
            time=time.time(),
        )
        write_verdict(self.started.store, verdict)
        if passed:
            serve_version(self.started.store, candidate, "gate")
        self.judged = candidate
        print(f"fleetrl gate: version {candidate} {'passed' if passed else 'rejected'}: {reason}")
        return verdict

    def scores_of(self, version: int) -> dict[str, float]:
        """{task id: reward} of one episode of `version` per gate task (kept per version)."""
        if version not in self.scores:
            tasks = split_tasks(self.config, self.config.gate.split)[: self.config.gate.tasks]
            with tempfile.TemporaryDirectory(prefix="fleetrl-gate-") as tmp:
                checkpoint = self.checkpoint_of(version, Path(tmp))
                episodes = episodes_of(checkpoint, self.config, tasks, self.config.gate.temperature)
            self.scores[version] = {
                task.instance_id: float(episode.reward >= 1.0)
                for task, episode in zip(tasks, episodes, strict=True)
            }
        return self.scores[version]

    def checkpoint_of(self, version: int, folder: Path) -> Path:
        """`version` from the store as a checkpoint folder (the base's config and tokenizer,
        the version's weights in float32) that an evaluation loads."""
        base = resolve_checkpoint(self.config.model.path)
        model = load_pretrained(base, dtype=torch.float32)
        tensors = self.weights.fetch(version).tensors
        model.load_state_dict({name: t.float() for name, t in tensors.items()})
        save_pretrained(model, folder)
        Tokenizer.from_pretrained(base).save(folder)
        return folder


def _mean(scores: dict[str, float]) -> float:
    return sum(scores.values()) / len(scores) if scores else 0.0
