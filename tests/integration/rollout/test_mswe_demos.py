"""Demonstrations inside mini-swe-agent (`fleetrl.rollout.mswe_demos`): the scripted
expert's episodes through the real agent, sandbox, recording endpoint and verifier, kept
as the tokens the endpoint records; `fleetrl sft --set rollout.harness=mini-swe-agent`
trains on them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout.mswe import run_mswe_episode, scripted_mswe_actions
from fleetrl.rollout.mswe_demos import ScriptedEngine, generate_mswe_demos
from fleetrl.types import SamplingParams
from tests.integration.rollout.test_mswe import recording_server

HARNESS = HarnessSection(max_reply_tokens=256, max_context=1536)


def test_a_demonstration_is_what_a_served_recording_of_the_episode_holds(tiny_checkpoint):
    """The demo of a task equals the segment `fleetrl serve --record` records when its
    engine samples the expert's replies: one sequence for SFT and RL."""
    model, tok = load_pretrained(tiny_checkpoint), Tokenizer.from_pretrained(tiny_checkpoint)
    tasks = load_tasks("micro", split="train")[:2]
    demos, stats = generate_mswe_demos(tasks, model, tok, HARNESS, RolloutSection(), 2, False)
    assert stats.kept == 2 and stats.dropped == {} and stats.graded == 2
    for task, demo in zip(tasks, demos, strict=True):
        replies = list(scripted_mswe_actions(task))
        learned = [t for t, m in zip(demo.token_ids, demo.loss_mask, strict=True) if m]
        assert learned == [t for r in replies for t in (*tok.encode(r), tok.eos_id)]
        engine = ScriptedEngine(model, tok, {task.problem_statement: replies}, 1544)
        repo = ensure_repo(task)
        with recording_server(engine, tok) as (url, _), open_sandbox(repo) as sandbox:
            served = run_mswe_episode(task, sandbox, repo, url, SamplingParams(), HARNESS)
        assert served.reward == 1.0
        [segment] = served.segments
        assert (segment.token_ids, segment.loss_mask) == (demo.token_ids, demo.loss_mask)


def test_a_reply_past_the_budget_drops_the_demonstration(tiny_checkpoint):
    # The engine cuts the expert's edit at max_reply_tokens, as a sampled one would be.
    model, tok = load_pretrained(tiny_checkpoint), Tokenizer.from_pretrained(tiny_checkpoint)
    [task] = load_tasks("micro", split="train")[:1]
    short = HarnessSection(max_reply_tokens=64, max_context=1536)
    demos, stats = generate_mswe_demos([task], model, tok, short, RolloutSection(), 1, False)
    assert demos == [] and stats.kept == 0
    assert "format_errors" in stats.dropped[f"{task.instance_id}/fix"]


def test_fleetrl_sft_trains_on_mini_swe_agent_demonstrations(tmp_path: Path):
    args = ["sft", str(tmp_path / "out"), "--hidden", "32", "--layers", "1", "--max-tasks", "2"]
    args += ["--threads", "1", "--steps", "2", "--batch-size", "2", "--fp32"]
    args += ["--demos-cache", str(tmp_path / "cache"), "--set", "rollout.harness=mini-swe-agent"]
    args += ["--set", "harness.max_reply_tokens=256", "--set", "harness.max_context=1536"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 training tasks inside mini-swe-agent and 0 renamed copies" in result.output
    assert (
        "2 demonstrations (one per context window) from 2 episodes "
        "(2 graded by the verifier, 0 dropped)" in result.output
    )
    state = json.loads((tmp_path / "out" / "sft.json").read_text())
    assert state["about"]["rollout_harness"] == "mini-swe-agent"
    cached = sorted((tmp_path / "cache").glob("mswe-demos-*.json.gz"))  # train's and val's
    assert [len(json.loads(gzip.decompress(p.read_bytes()))["demos"]) for p in cached] == [2, 2]
    again = CliRunner().invoke(app, [*args, "--force"])  # the demonstrations come from the cache
    assert again.exit_code == 0 and sorted((tmp_path / "cache").iterdir()) == cached
