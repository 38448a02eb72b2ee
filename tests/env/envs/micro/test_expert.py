"""The scripted expert fixes every bug kind under the real verifier, one expert serving
the episodes of many tasks at once."""

import asyncio

import torch

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import run_episode
from fleetrl.envs.micro.expert import Expert
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import SamplingParams, Task

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
HARNESS = HarnessSection()


def sample_tasks(n: int) -> list[Task]:
    """n training tasks covering every bug kind (first task of each kind, then the rest)."""
    tasks = load_tasks(suite="micro", split="train")
    firsts: dict[str, Task] = {}
    for task in tasks:
        firsts.setdefault(task.kind, task)
    rest = [task for task in tasks if task not in firsts.values()]
    return [*firsts.values(), *rest][:n]


def test_one_expert_fixes_ten_tasks_at_once_under_the_real_verifier():
    """Ten tasks of every bug kind, their episodes concurrent against one expert, each
    graded here independently."""
    tasks = sample_tasks(10)
    assert len({task.kind for task in tasks}) == 8
    expert = Expert(tasks, "fix", TOKENIZER)

    async def graded(task):
        repo = await asyncio.to_thread(ensure_repo, task)
        with open_sandbox(repo) as sandbox:
            episode = await run_episode(expert, TOKENIZER, sandbox, task, HARNESS, SamplingParams())
            changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
        calls = [(r.name, r.arguments) for r in episode.tool_log]
        return episode, await asyncio.to_thread(verify, task, changes, calls)

    async def all_of_them():
        return await asyncio.gather(*(graded(task) for task in tasks))

    for task, (episode, result) in zip(tasks, asyncio.run(all_of_them()), strict=True):
        assert expert.problems[task.instance_id] == [], task.instance_id
        assert [r.name for r in episode.tool_log] == ["read_file", "edit_file", "run", "finish"]
        assert episode.tool_log[1].output.startswith("edited ")
        assert episode.tool_log[2].output.startswith("exit code: 0\n")
        assert result.reward == 1.0, (task.instance_id, result.tests, result.flags)
