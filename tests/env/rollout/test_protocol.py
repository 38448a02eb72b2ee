"""The evaluation protocol on real episodes: a scripted policy graded by the real verifier
(recovery, recovery after the expert's slip, runs at several temperatures through one
policy, a seed per reply), and `fleetrl eval` end to end with the shipped base model on
two tasks per split (the temperature chosen on val, episodes that repeat for a seed)."""

import asyncio
import json
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.config_files import load_config
from fleetrl.envs.tasks.records import write_jsonl
from fleetrl.envs.tasks.suites import get_task, load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.model.chat import Message, ToolCall, format_reply
from fleetrl.model.checkpoint import resolve_checkpoint, weights_digest
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout.evaluate import episodes_of, sweep_cache_path, tasks_digest
from fleetrl.rollout.session import Run, Session, evaluate_policy
from fleetrl.rollout.stats import EvalError
from fleetrl.rollout.worker import Rollouts
from fleetrl.types import Completion, SamplingParams

TOKENIZER = bundled_tokenizer()
TASK = "micro-train-0007"  # nkims.py: `xut = 1` should be `xut = 0`


def call(name: str, **arguments: str) -> Message:
    return Message("assistant", "", [ToolCall(name, arguments)])


# An edit that misses (its `old` text is not in the file), the fix, finish.
STUMBLE = (
    call("edit_file", path="nkims.py", old="xut = 7", new="xut = 0"),
    call("edit_file", path="nkims.py", old="xut = 1", new="xut = 0"),
    call("finish"),
)


class Stumbler:
    """Replies STUMBLE, one reply per turn; records the temperature and seed of every
    request."""

    def __init__(self) -> None:
        self.temperatures: set[float] = set()
        self.seeds: list[int | None] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        self.temperatures.add(params.temperature)
        self.seeds.append(params.seed)
        turn = TOKENIZER.decode(prompt_ids).count("<tool_response>")
        ids = TOKENIZER.encode(format_reply(STUMBLE[turn]) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [0] * len(ids), "stop")


def rollouts(policy: Stumbler) -> Rollouts:
    return Rollouts(policy, TOKENIZER, HarnessSection(), RolloutSection(), 4, 2)


def test_an_episode_that_recovers_from_a_failed_edit_counts():
    async def scenario():
        return await evaluate_policy(rollouts(Stumbler()), [get_task(TASK)], samples_per_task=1)

    result = asyncio.run(scenario())
    assert result.pass_at_1 == 1.0 and result.failed_edit_episodes == 1
    assert result.recovery == 1.0 and result.recovery_rate == 1.0


def test_every_reply_of_a_seeded_evaluation_has_a_seed_of_its_own_that_repeats():
    def seeds(seed: int | None, temperature: float = 0.7) -> list[int | None]:
        policy = Stumbler()

        async def scenario():
            runner = rollouts(policy)
            runner.sampling = SamplingParams(temperature=temperature, seed=seed)
            await evaluate_policy(runner, [get_task(TASK)], samples_per_task=2)

        asyncio.run(scenario())
        return policy.seeds

    first = seeds(5)
    assert len(first) == 6 and len(set(first)) == 6  # 2 episodes of 3 replies
    assert sorted(seeds(5)) == sorted(first)  # in whatever order the episodes ran
    assert sorted(seeds(5, temperature=0.3)) == sorted(first)  # the same draws at every T
    assert not set(seeds(6)) & set(first)
    assert seeds(None) == [None] * 6


class Finisher:
    """Sends the fix unless the file is already edited, `finish` then; with `gives_up`,
    `finish` at once. Records every context it was asked to continue."""

    def __init__(self, gives_up: bool = False) -> None:
        self.gives_up = gives_up
        self.contexts: list[str] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        context = TOKENIZER.decode(prompt_ids)
        self.contexts.append(context)
        done = self.gives_up or "edited nkims.py" in context
        reply = call("finish") if done else STUMBLE[1]
        ids = TOKENIZER.encode(format_reply(reply) + "<|im_end|>")
        return Completion(list(prompt_ids), ids, [-1.0] * len(ids), [0] * len(ids), "stop")


def after_slip(policy: Finisher, task=None):
    async def scenario():
        tasks = [task or get_task(TASK)]
        return await evaluate_policy(rollouts(policy), tasks, 2, after_slip=True)

    return asyncio.run(scenario())


def test_after_a_slip_the_model_takes_over_from_the_experts_refused_edit():
    policy = Finisher()
    result = after_slip(policy)
    assert result.episodes == 2 and result.failed_edit_episodes == 2
    assert result.pass_at_1 == 1.0 and result.recovery_rate == 1.0
    first = policy.contexts[0]  # the model's first turn: after the expert's read and slip
    assert first.count("<|im_start|>assistant") == 3 and '"read_file"' in first
    assert "error: edit_file: 'old' text not found" in first
    assert after_slip(Finisher(gives_up=True)).recovery_rate == 0.0


def test_after_a_slip_needs_a_task_the_expert_can_read():
    task = replace(get_task(TASK), patch="not a diff")
    with pytest.raises(EvalError, match="no micro task"):
        after_slip(Finisher(), task)


def test_runs_at_several_temperatures_share_one_policy():
    policy, task = Stumbler(), get_task(TASK)

    async def scenario():
        runs = [Run([task], 0.0, 1, "greedy"), Run([task], 0.7, 2, "sampled")]
        return await Session(rollouts(policy), None).run(runs)

    greedy, sampled = asyncio.run(scenario())
    assert policy.temperatures == {0.0, 0.7}
    assert (greedy.temperature, greedy.episodes) == (0.0, 1)
    assert (sampled.temperature, sampled.episodes, sampled.pass_at_k) == (0.7, 2, {2: 1.0})


@pytest.mark.slow  # ~15 s: the base model's sweep (2 temperatures), greedy and reported run
def test_fleetrl_eval_best_temperature_end_to_end():
    args = ["eval", "base", "--split", "heldout", "--best-temperature", "--max-tasks", "2"]
    args += ["--samples", "2", "--threads", "1", "--set", "eval.temperatures=[0.0, 1.0]"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["split"] == "heldout" and doc["tasks"] == 2
    assert doc["weights"] == weights_digest(resolve_checkpoint("base"))  # for skip_solved
    assert set(doc["val_sweep"]) == {"0.0", "1.0"}
    best = max(doc["val_sweep"].values())
    assert doc["temperature"] == min(float(t) for t, p in doc["val_sweep"].items() if p == best)
    assert doc["samples_per_task"] == (1 if doc["temperature"] == 0 else 2)
    assert doc["episodes"] == 2 * doc["samples_per_task"]
    for key in ("pass_at_1", "greedy", "pass_at_8", "recovery", "recovery_rate"):
        assert 0.0 <= doc[key] <= 1.0, key
    assert doc["ci_low"] <= doc["pass_at_1"] <= doc["ci_high"]
    assert doc["greedy_ci"][0] <= doc["greedy"] <= doc["greedy_ci"][1]


@pytest.mark.slow  # ~5 s: three evaluations of the base model on two tasks per split
def test_one_temperature_per_model_across_splits(tmp_path, monkeypatch):
    """A second `--best-temperature` evaluation of the same weights and settings reports its
    split at the first one's temperature without sweeping val again; a new seed, or a kept
    choice that cannot be read, sweeps again."""
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))
    args = ["eval", "base", "--best-temperature", "--max-tasks", "2", "--samples", "2"]
    args += ["--threads", "1", "--set", "eval.temperatures=[0.0, 1.0]", "--json"]

    def evaluate(split: str, *more: str) -> tuple[dict, set[str]]:
        transcripts = tmp_path / f"{split}{''.join(more)}.jsonl"
        extra = ["--split", split, "--transcripts", str(transcripts), *more]
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        splits = {json.loads(line)["split"] for line in transcripts.read_text().splitlines()}
        return json.loads(result.output), splits

    first, first_splits = evaluate("heldout")
    second, second_splits = evaluate("heldout-templates")
    assert first_splits == {"val", "heldout"} and second_splits == {"heldout-templates"}
    assert second["temperature"] == first["temperature"]
    assert second["val_sweep"] == first["val_sweep"] and set(first["val_sweep"]) == {"0.0", "1.0"}
    _, reseeded_splits = evaluate("heldout", "--seed", "7")
    assert "val" in reseeded_splits
    for kept in (tmp_path / "cache" / "sweeps").iterdir():
        kept.write_text("half a file")
    again, again_splits = evaluate("heldout-templates")
    assert "val" in again_splits and set(again["val_sweep"]) == {"0.0", "1.0"}


@pytest.mark.slow  # ~15 s: three evaluations of the base model, two episodes per task each
def test_an_evaluation_repeats_for_its_seed_however_its_episodes_are_batched(tmp_path):
    args = ["eval", "base", "--split", "heldout", "--temperature", "1", "--max-tasks", "2"]
    args += ["--samples", "2", "--threads", "1", "--json"]

    def episodes(*more: str) -> list[tuple]:
        transcripts = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
        result = CliRunner().invoke(app, [*args, "--transcripts", str(transcripts), *more])
        assert result.exit_code == 0, result.output
        records = [json.loads(line) for line in transcripts.read_text().splitlines()]
        return sorted((r["task_id"], r["reward"], r["windows"]) for r in records)

    batched = episodes()
    assert episodes("--set", "eval.max_concurrent=1") == batched  # one episode at a time
    assert episodes("--seed", "7") != batched


@pytest.mark.slow  # ~6 s: the base model greedy on two tasks, after the expert's slip
def test_fleetrl_eval_after_slip_end_to_end():
    args = ["eval", "base", "--split", "heldout", "--temperature", "0", "--max-tasks", "2"]
    result = CliRunner().invoke(app, [*args, "--threads", "1", "--after-slip", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["after_slip"] is True and doc["episodes"] == 2
    assert doc["failed_edit_episodes"] == 2 and doc["recovery_rate"] == doc["pass_at_1"]


def test_episodes_of_a_checkpoint_come_one_per_task_in_task_order():
    config = load_config(None)
    config.eval.max_concurrent = 2
    tasks = [get_task("micro-heldout-0001"), get_task(TASK)]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        episodes = episodes_of(resolve_checkpoint("base"), config, tasks, temperature=0.0)
        assert torch.get_num_threads() == config.eval.threads == 1  # whoever called it
    finally:
        torch.set_num_threads(threads)
    assert [e.task_id for e in episodes] == [t.instance_id for t in tasks]
    assert all(e.finish_reason and e.reward in (0.0, 1.0) for e in episodes)


def test_a_kept_temperature_choice_is_not_read_back_once_the_val_tasks_changed(
    tmp_path, monkeypatch
):
    # A task folder regenerated under the same path, one statement reworded: the sweep's
    # cache key changes with it (a grown suite the same way); the repository path does not.
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))
    val = load_tasks(suite="micro", split="val")[:3]
    for task in val:
        ensure_repo(task)
    folder = tmp_path / "tasks"
    folder.mkdir()
    write_jsonl(val, folder / "tasks.jsonl")
    config = load_config(None, {"tasks": {"tasks_dir": str(folder)}})
    checkpoint = resolve_checkpoint("base")
    before = sweep_cache_path(weights_digest(checkpoint), config)
    moved = [replace(task, repo=str(tmp_path / "elsewhere" / task.instance_id)) for task in val]
    assert tasks_digest(moved) == tasks_digest(val)
    reworded = [replace(val[0], problem_statement=val[0].problem_statement + " "), *val[1:]]
    write_jsonl(reworded, folder / "tasks.jsonl")
    assert sweep_cache_path(weights_digest(checkpoint), config) != before
