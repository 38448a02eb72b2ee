"""mini-swe-agent (the PyPI package, unmodified) as a rollout harness, end to end: its agent
loop and parser, its litellm model class on a real recording server, fleetrl's bubblewrap
sandbox over a micro task's checkout, the real verifier.

The scripted expert's replies (`scripted_mswe_actions`) solve the task: once given to the
agent directly (`ScriptedModel`), once sampled by a server whose engine replays them, so
the whole path (litellm, the recorder, grading, the reward) runs with a success. A tiny
random model then runs a real episode: the recorded segment holds exactly the tokens the
engine sampled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.inference.engine import Engine
from fleetrl.inference.recording import SessionRecorder
from fleetrl.inference.server import create_app
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.mswe import (
    SUBMIT,
    SandboxEnvironment,
    ScriptedModel,
    endpoint_model,
    mswe_config,
    run_mswe_agent,
    run_mswe_episode,
    scripted_mswe_actions,
)
from fleetrl.rollout.worker import GroupResult, Rollouts, rollout_engine
from fleetrl.types import Completion, SamplingParams, Task
from tests.integration.inference.test_recording import ScriptedEngine
from tests.integration.inference.test_server import (  # noqa: F401  (fixtures)
    MAX_MODEL_LEN,
    dense_dir,
    one_torch_thread,
    running,
    tokenizer,
)

HARNESS = HarnessSection(max_turns=6, max_reply_tokens=256, max_context=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def task() -> Task:
    return load_tasks("micro", split="train")[0]


class SpyEngine(Engine):
    """The real engine, keeping every completion it returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.completions: list[Completion] = []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        completion = await super().generate(prompt_ids, params)
        self.completions.append(completion)
        return completion


@contextlib.contextmanager
def recording_server(engine: Engine, tok: Tokenizer) -> Iterator[tuple[str, SessionRecorder]]:
    recorder = SessionRecorder(tok, group_size=1)
    with running(create_app(engine, tok, "tiny", admin_token=None, recorder=recorder)) as url:
        yield url, recorder


def test_scripted_replies_are_one_bash_block_each_and_end_with_the_submit_command(task):
    replies = list(scripted_mswe_actions(task))
    assert all(r.count("```mswea_bash_command\n") == 1 for r in replies)
    assert "nl -ba" in replies[0] and replies[-1].endswith(f"{SUBMIT}\n```")


def test_the_scripted_expert_solves_a_micro_task_inside_mini_swe_agent(task):
    repo = ensure_repo(task)
    with open_sandbox(repo) as sandbox:
        model = ScriptedModel(list(scripted_mswe_actions(task)))
        episode = run_mswe_agent(model, sandbox, task, HARNESS)
        changes = sandbox_changes(sandbox, repo)
    assert episode.exit_status == "Submitted" and episode.finish_reason == "finish"
    assert episode.turns == 4 and episode.format_errors == 0
    assert episode.commands[-1] == SUBMIT and episode.commands[0].startswith("nl -ba")
    # its observations are mini-swe-agent's own rendering of the sandbox's output
    assert "<returncode>0</returncode>" in episode.messages[3]["content"]
    assert "def " in episode.messages[3]["content"]
    result = verify(task, changes, episode.tool_calls, timeout=120)
    assert result.reward == 1.0 and result.flags == []


def test_a_served_episode_is_graded_and_its_reward_ends_the_recorded_session(
    task,
    dense_dir,  # noqa: F811
    tokenizer,  # noqa: F811
):
    """The scripted replies as the engine's samples: litellm sends them through the
    recording server, the agent runs them, the verifier gives 1, the session is rewarded."""
    engine = ScriptedEngine(
        load_pretrained(dense_dir), tokenizer, list(scripted_mswe_actions(task))
    )
    repo = ensure_repo(task)
    with recording_server(engine, tokenizer) as (url, _), open_sandbox(repo) as sandbox:
        trajectory = run_mswe_episode(task, sandbox, repo, url, SamplingParams(), HARNESS)
        summary = httpx.get(f"{url}/v1/sessions").json()
    assert trajectory.reward == 1.0 and trajectory.flags == []
    assert trajectory.finish_reason == "finish" and trajectory.turns == 4
    assert trajectory.tool_calls == 4 and trajectory.task_id == task.instance_id
    [segment] = trajectory.segments
    sampled = [t for t, m in zip(segment.token_ids, segment.loss_mask, strict=True) if m]
    replies = [[*tokenizer.encode(r), tokenizer.eos_id] for r in scripted_mswe_actions(task)]
    assert sampled == [t for reply in replies for t in reply]
    assert summary["rewarded"] == 1 and summary["rewritten"] == 0 and summary["active"] == 0


def test_a_tiny_model_episode_records_exactly_the_sampled_tokens(task, dense_dir, tokenizer):  # noqa: F811
    """A random model's replies are format errors, and mini-swe-agent leaves a refused
    reply out of the history it sends back (only the error message stays): each such turn
    starts a new segment, counted, and every segment holds exactly what was sampled."""
    engine = SpyEngine(load_pretrained(dense_dir), max_batch_size=2, max_model_len=MAX_MODEL_LEN)
    harness = HarnessSection(max_turns=3, max_reply_tokens=12, max_context=MAX_MODEL_LEN)
    repo = ensure_repo(task)
    with recording_server(engine, tokenizer) as (url, recorder), open_sandbox(repo) as sandbox:
        trajectory = run_mswe_episode(task, sandbox, repo, url, SamplingParams(seed=3), harness)
    assert trajectory.turns == len(engine.completions) == 3
    assert trajectory.reward == 0.0 and trajectory.finish_reason == "format_errors"
    assert trajectory.tool_errors == 3 and trajectory.tool_calls == 0
    assert len(trajectory.segments) == 1 + recorder.stats.rewritten == 3
    for segment, completion in zip(trajectory.segments, engine.completions, strict=True):
        prompt, sampled = completion.prompt_ids, completion.token_ids
        assert segment.token_ids == prompt + sampled
        assert segment.loss_mask == [0] * len(prompt) + [1] * len(sampled)
        assert segment.logprobs[len(prompt) :] == pytest.approx(completion.logprobs)
        assert segment.temperature == 1.0
    assert recorder.stats.rewarded == 1 and recorder.stats.expired == 0


def test_rollouts_run_groups_inside_mini_swe_agent_when_the_config_says_so(
    task,
    dense_dir,  # noqa: F811
    tokenizer,  # noqa: F811
):
    """`rollout.harness = mini-swe-agent`: a region's Rollouts serve their engine as a
    recording endpoint of their own and run each sample of a group through the agent."""
    rollout = RolloutSection(harness="mini-swe-agent", group_size=2)
    harness = HarnessSection(max_turns=2, max_reply_tokens=8, max_context=MAX_MODEL_LEN - 8)

    async def main() -> tuple[GroupResult, int]:
        engine = rollout_engine(load_pretrained(dense_dir), harness, episodes=2)
        try:
            rollouts = Rollouts(engine, tokenizer, harness, rollout, episodes=2, gradings=1)
            try:
                result = await rollouts.run_group(task, 2, "g-0")
                return result, rollouts._endpoint["local"].recorder.stats.rewarded
            finally:
                await rollouts.close()
        finally:
            await engine.close()

    result, rewarded = asyncio.run(main())
    assert result.failures == {} and len(result.trajectories) == 2 and rewarded == 2
    for trajectory in result.trajectories:
        assert trajectory.group_id == "g-0" and trajectory.task_id == task.instance_id
        assert trajectory.turns == 2 and trajectory.reward == 0.0
        assert all(sum(s.loss_mask) > 0 for s in trajectory.segments)


def test_a_group_failed_whole_inside_mini_swe_agent_is_guided_by_the_experts_episode(
    task,
    dense_dir,  # noqa: F811
    tokenizer,  # noqa: F811
):
    """`rollout.guide_failed_groups` inside mini-swe-agent: a tiny random model fails the
    group whole; one sample gives way to the scripted expert's episode, recorded through
    an endpoint of its own exactly as a policy's would be, verified (reward 1), stamped
    as fresh as the group and marked guided."""
    rollout = RolloutSection(harness="mini-swe-agent", guide_failed_groups=True)
    harness = HarnessSection(max_turns=5, max_reply_tokens=256, max_context=MAX_MODEL_LEN - 8)

    async def main() -> GroupResult:
        engine = rollout_engine(load_pretrained(dense_dir), harness, episodes=2)
        engine.version = 3
        try:
            rollouts = Rollouts(engine, tokenizer, harness, rollout, episodes=2, gradings=1)
            try:
                return await rollouts.run_group(task, 2, "g-0")
            finally:
                await rollouts.close()
        finally:
            await engine.close()

    result = asyncio.run(main())
    assert result.guided and result.failures == {}
    sampled, expert = result.trajectories
    assert sampled.reward == 0.0 and not any(s.guided for s in sampled.segments)
    assert expert.reward == 1.0 and expert.flags == [] and expert.finish_reason == "finish"
    assert expert.group_id == "g-0" and expert.task_id == task.instance_id
    (segment,) = expert.segments
    assert segment.guided
    assert segment.versions == [3 if m else -1 for m in segment.loss_mask]
    replies = [[*tokenizer.encode(r), tokenizer.eos_id] for r in scripted_mswe_actions(task)]
    learnt = [t for t, m in zip(segment.token_ids, segment.loss_mask, strict=True) if m]
    assert learnt == [t for reply in replies for t in reply]


def test_recovery_guidance_is_refused_with_mini_swe_agent():
    with pytest.raises(ValueError, match=r"rollout\.guide_recovery"):
        RolloutSection(harness="mini-swe-agent", guide_failed_groups=True, guide_recovery=True)


@pytest.mark.slow
def test_fleetrl_train_runs_through_mini_swe_agent(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """`fleetrl train --set rollout.harness=mini-swe-agent`: a step trained on groups the
    region sampled inside mini-swe-agent (a tiny random model: reward 0, no signal)."""
    overrides = [
        f"model.path={tiny_checkpoint}", "rollout.harness=mini-swe-agent",
        "rollout.group_size=2", "rollout.max_concurrent_groups=1", "harness.max_turns=2",
        "harness.max_reply_tokens=8", "trainer.steps=1", "trainer.groups_per_step=1",
        "trainer.dynamic_sampling=false", "eval.enabled=false",
    ]  # fmt: skip
    args = ["train", "--name", "m", "--runs-dir", str(tmp_path / "runs")]
    args += [item for o in overrides for item in ("--set", o)]
    done = subprocess.run(
        [sys.executable, "-m", "fleetrl.cli", *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (tmp_path / "runs/m/metrics.jsonl").open()]
    [train] = [r for r in records if r["kind"] == "train"]
    assert train["reward"] == 0.0


def test_a_request_that_times_out_ends_the_episode_not_the_evaluation(task):
    """An endpoint that accepts and never answers: the request's timeout (the harness's
    wall time) ends the episode as `wall_time`, as a slow engine under load would."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])  # kept open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    harness = HARNESS.model_copy(update={"wall_s": 1.0})
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with open_sandbox(ensure_repo(task)) as sandbox:
            model = endpoint_model(url, "s-timeout", SamplingParams(temperature=0.0), harness)
            episode = run_mswe_agent(model, sandbox, task, harness)
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
    assert episode.exit_status == "TimeExceeded" and episode.finish_reason == "wall_time"
    assert episode.commands == []


def test_a_command_with_a_nul_byte_is_an_error_the_agent_sees(task):
    """The sampled command holds a NUL byte, which no program can be given: reported as
    mini-swe-agent's own environment reports a failed command, the episode goes on."""
    with open_sandbox(ensure_repo(task)) as sandbox:
        env = SandboxEnvironment(sandbox, **mswe_config(HARNESS)["environment"])
        output = env.execute({"command": "echo a\x00b"})
        assert output["returncode"] == -1 and "null byte" in output["exception_info"]
        assert env.execute({"command": "echo fine"})["output"] == "fine\n"
    assert env.commands == ["echo a\x00b", "echo fine"]
