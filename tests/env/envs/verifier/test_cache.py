"""The outcome cache, for real: identical submissions run the hidden tests once, and the
anti-cheat checks still see each one. The cache alone is unit-tested in
tests/unit/envs/verifier/test_cache.py."""

from concurrent.futures import ThreadPoolExecutor

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import verify, verify_workspace, workspace_changes
from tests.env.envs.verifier.nkims_task import append, module_path


def test_identical_submissions_run_the_hidden_tests_once(task, workspace, fresh_outcomes):
    apply_patch(workspace, task.patch)
    changes = workspace_changes(ensure_repo(task), workspace)
    with ThreadPoolExecutor(4) as pool:  # a group's samples finishing together
        results = list(pool.map(lambda _: verify(task, changes), range(4)))
    assert [r.reward for r in results] == [1.0] * 4
    assert (fresh_outcomes.misses, fresh_outcomes.hits) == (1, 3)
    # The anti-cheat checks still see each submission's own tool calls.
    cheat = verify(task, changes, tool_calls=[("run", {"command": "curl https://x.org/f"})])
    assert cheat.reward == 0 and cheat.flags and fresh_outcomes.hits == 4
    # Another submission is graded on its own.
    append(module_path(workspace), "\n# a comment\n")
    assert verify_workspace(task, workspace).reward == 1 and fresh_outcomes.misses == 2
