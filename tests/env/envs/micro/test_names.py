"""A renamed copy is a task of the same meaning: fixed by the expert, graded by the real
verifier with its renamed hidden tests."""

import asyncio
import random
from pathlib import Path

import torch

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import run_episode
from fleetrl.envs.micro.expert import Expert
from fleetrl.envs.micro.names import renamed_copy
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.git import git
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import SamplingParams

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()


def test_renamed_copies_keep_their_meaning_under_the_real_verifier(tmp_path):
    """A copy of each of three templates: fixed by the expert, graded with renamed tests."""

    def name(task):
        return task.problem_statement[1 : task.problem_statement.index("(")]

    tasks = load_tasks(suite="micro", split="train")[:3]
    copies = [
        renamed_copy(task, ensure_repo(task), random.Random(i), tmp_path / str(i))
        for i, task in enumerate(tasks)
    ]
    for task, copy in zip(tasks, copies, strict=True):
        assert copy.task.test_files == [f"test_{name(copy.task)}.py"]
        assert copy.path == f"{name(copy.task)}.py"
        assert name(task) not in copy.task.patch + copy.task.test_patch + copy.source
        assert (
            copy.task.problem_statement.split("(", 1)[1]
            == (task.problem_statement.split("(", 1)[1])
        )
        repo = copy.write()  # its one commit is the base commit the record names
        assert git(repo, "log", "--format=%H").split() == [copy.task.base_commit]
    expert = Expert([copy.task for copy in copies], "fix", TOKENIZER)

    async def graded(task):
        with open_sandbox(task.repo) as sandbox:
            episode = await run_episode(
                expert, TOKENIZER, sandbox, task, HarnessSection(), SamplingParams()
            )
            changes = sandbox_changes(sandbox, Path(task.repo))
        calls = [(r.name, r.arguments) for r in episode.tool_log]
        return verify(task, changes, calls)

    for copy in copies:
        result = asyncio.run(graded(copy.task))
        assert expert.problems[copy.task.instance_id] == []
        assert result.reward == 1.0, (copy.task.instance_id, result.tests, result.flags)
