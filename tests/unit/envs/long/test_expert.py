"""The long expert's episodes under the `long` preset, every task of the suite, in memory
workspaces (the check command evaluated in this process): a read, a summary that keeps
the facts, a fresh window that opens on it, the fix. Under the real verifier and
sandboxes: tests/env/rollout/test_long_demos.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fleetrl.config_files import load_config
from fleetrl.envs.harness.loop import Episode, run_episode, task_prompt
from fleetrl.envs.long import suite as long
from fleetrl.envs.long.expert import LONG_GUIDE, LongExpert
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.chat import Message, encode_chat
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import SamplingParams, Task
from tests.unit.envs.harness.memory_sandbox import MemorySandbox, evaluate

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
HARNESS = load_config(Path("long")).harness


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Task]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLEETRL_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield load_tasks(suite="long")


def run_all(
    tasks: list[Task], harness=HARNESS, plan: str = "fix"
) -> tuple[LongExpert, list[tuple[Episode, MemorySandbox]]]:
    expert = LongExpert(tasks, TOKENIZER, plan)

    async def one(task: Task) -> tuple[Episode, MemorySandbox]:
        sandbox = MemorySandbox(dict(long.spec_of(task).files))
        episode = await run_episode(expert, TOKENIZER, sandbox, task, harness, SamplingParams())
        return episode, sandbox

    async def every() -> list[tuple[Episode, MemorySandbox]]:
        return await asyncio.gather(*(one(task) for task in tasks))

    return expert, asyncio.run(every())


def hidden_tests_pass(spec: long.LongSpec, files: dict[str, str]) -> list[bool]:
    files = {**files, spec.test_file: spec.tests}
    results = []
    for node in spec.fail_to_pass:
        try:
            evaluate(files, spec.test_file.removesuffix(".py"), f"{node.split('::')[1]}()")
            results.append(True)
        except AssertionError:
            results.append(False)
    return results


def test_the_expert_fixes_every_task_across_one_summary(tasks: list[Task]) -> None:
    expert, outcomes = run_all(tasks)
    limit = HARNESS.summary_limit("long")
    assert limit == int(0.8 * 1024)
    for task, (episode, sandbox) in zip(tasks, outcomes, strict=True):
        spec = long.spec_of(task)
        trajectory = episode.trajectory
        name = task.instance_id
        assert expert.problems[name] == [], name
        assert trajectory.finish_reason == "finish", name
        assert trajectory.tool_errors == 0, name
        calls = [(r.name, r.arguments.get("path")) for r in episode.tool_log]
        edits = [("edit_file", edit.path) for edit in spec.edits]
        assert calls == [
            ("read_file", spec.first),
            ("read_file", spec.second),
            *edits,
            ("run", None),
            ("finish", None),
        ], name
        assert episode.tool_log[-2].output == f"exit code: 0\n{spec.expected}"
        # One summary, right after the big file's read, holding every fact.
        assert trajectory.summaries == [spec.summary], name
        assert all(fact in spec.summary for fact in task.facts), name
        first, second = trajectory.segments
        assert spec.files[0][1].splitlines()[0] in TOKENIZER.decode(first.token_ids)
        # The second window opens on the task and the summary, without the big file, and
        # fits under the threshold: no second summary.
        resume = Message("user", HARNESS.resume_template.format(summary=spec.summary))
        opening = encode_chat(TOKENIZER, [*task_prompt(task, HARNESS), resume], None)
        assert second.token_ids[: len(opening)] == opening, name
        seen = TOKENIZER.decode(second.token_ids)
        assert not any(line in seen for line in spec.files[0][1].splitlines() if "def " in line)
        assert len(second.token_ids) + HARNESS.max_reply_tokens <= limit, name
        assert len(first.token_ids) <= HARNESS.max_context, name
        # The workspace ends as the gold fix leaves it; the hidden tests fail before, pass after.
        assert {p: sandbox.files[p] for p, _ in spec.fixed} == dict(spec.fixed), name
        assert hidden_tests_pass(spec, dict(spec.files)) == [False] * 3, name
        assert hidden_tests_pass(spec, sandbox.files) == [True] * 3, name


def test_terse_notes_lose_one_fact_and_the_replies_after_them_are_unlearned(
    tasks: list[Task],
) -> None:
    """Plan `terse`: the same fix, but the notes lose the one fact it cannot do without,
    and every reply after them (made from what the expert knows, not from its notes) is
    listed as unlearned; the read and the notes are not."""
    some = tasks[:30]
    expert, outcomes = run_all(some, plan="terse")
    for task, (episode, sandbox) in zip(some, outcomes, strict=True):
        spec = long.spec_of(task)
        trajectory = episode.trajectory
        name = task.instance_id
        assert expert.problems[name] == [] and trajectory.finish_reason == "finish", name
        assert trajectory.summaries == [spec.terse], name
        missing = [fact for fact in task.facts if fact not in spec.terse]
        assert len(missing) == 1, (name, missing)
        assert {p: sandbox.files[p] for p, _ in spec.fixed} == dict(spec.fixed), name
        first, second = trajectory.segments
        replies = expert.unlearned[name]
        assert len(replies) == len(episode.tool_log) - 1  # all but the first read
        seen = TOKENIZER.decode(second.token_ids)
        assert all(TOKENIZER.decode(reply) in seen for reply in replies), name
        assert not any(
            TOKENIZER.decode(reply) in TOKENIZER.decode(first.token_ids) for reply in replies
        ), name


def test_without_a_summary_the_expert_gives_up_and_says_why(tasks: list[Task]) -> None:
    """With summarisation off no summary is asked for after the big file's read: the
    expert notes it and finishes without a fix (no demonstration)."""
    some = [tasks[0], tasks[1], tasks[2]]
    off = HARNESS.model_copy(update={"summarise_at": 0.0})
    expert, outcomes = run_all(some, off)
    for task, (episode, sandbox) in zip(some, outcomes, strict=True):
        spec = long.spec_of(task)
        assert expert.problems[task.instance_id] == [
            "no summary was asked for after the big file's read"
        ]
        assert [r.name for r in episode.tool_log] == ["read_file", "finish"]
        assert episode.trajectory.summaries == [] and len(episode.trajectory.segments) == 1
        assert sandbox.files == dict(spec.files)


def test_the_guide_has_two_plans_and_no_copies(tasks: list[Task], tmp_path: Path) -> None:
    value, chain, multi = tasks[:3]
    assert (value.kind, chain.kind, multi.kind) == ("value", "chain", "multi")
    after = ("read", "edit0", "check", "finish")
    assert LONG_GUIDE.steps(value, "fix") == ("read", "summary", *after)
    assert LONG_GUIDE.steps(multi, "fix") == (
        "read",
        "summary",
        "read",
        "edit0",
        "edit1",
        "check",
        "finish",
    )
    assert LONG_GUIDE.steps(value, "terse") == LONG_GUIDE.steps(value, "fix")
    assert LONG_GUIDE.policy([value], "terse", TOKENIZER).plan == "terse"
    with pytest.raises(ValueError, match="no plan 'slip'"):
        LONG_GUIDE.steps(value, "slip")
    with pytest.raises(ValueError):
        LONG_GUIDE.policy([value], "fix", TOKENIZER, after=1)
    with pytest.raises(ValueError, match="no renamed copies"):
        LONG_GUIDE.copy(value, tmp_path, None, tmp_path / "copy")  # type: ignore[arg-type]
    micro = load_tasks(suite="micro", split="train")[0]
    with pytest.raises(ValueError, match="no task of the long suite"):
        LongExpert([micro], TOKENIZER)
