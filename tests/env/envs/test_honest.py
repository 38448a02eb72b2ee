"""The honest-fix corpus through the real verifier: each case of `honest_corpus.CORPUS`, a
real fix plus one unusual honest thing (tests of its own, reading the history, grepping
for `ping`, a script that exits, any standard-library module), scores 1 with no flag.

Each case is graded on a train micro task one by one, in its suite's grading mode; the
whole corpus also on a held-out micro task (with a PASS_TO_PASS test) and a product task,
and in pytest mode (the agent's code in pytest's process, as a task folder made from a
real repository is graded), two gradings at a time. In pytest mode the few cases whose
`in_process` says why are refused by the runner's in-process checks: they are left out
there. Cases that change no graded file (own tests, tool calls) share the gold fix's
outcome through the verifier's outcome cache, as they would in training; their flags are
still computed for each.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fleetrl.envs.tasks import suites
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.envs.verifier import OutcomeCache, VerifyResult, cache, verify, workspace_changes
from fleetrl.types import Task
from tests.env.envs.cheat_tools import Target, grade_sandbox, target
from tests.env.envs.honest_corpus import CORPUS, Honest

FIRST = "micro-train-0000"
OTHERS = ("micro-heldout-0023", "product-train-0004")


@pytest.fixture(scope="module", autouse=True)
def outcomes():
    """One outcome cache for this file: nothing carried over from other tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cache, "OUTCOMES", OutcomeCache())
        yield


def calls_mode(task: Task) -> bool:
    """Whether the verifier grades `task` where the agent's code never runs (calls mode)."""
    grading_for = getattr(suites, "grading_for", None)  # absent where only pytest mode is
    return grading_for is not None and grading_for(task) == "calls"


def in_process(t: Target) -> Target:
    """`t` graded in pytest mode, as a task of no suite is (a generated task folder's)."""
    ensure_repo(t.task)
    return dataclasses.replace(t, task=dataclasses.replace(t.task, suite=""))


def grade(t: Target, root: Path, case: Honest) -> VerifyResult:
    """The verdict on the gold fix plus `case`, with the tool calls it logged."""
    workspace = checkout(t.task, root / "ws")
    apply_patch(workspace, t.task.patch)
    calls = case.edit(workspace, t)
    changes = workspace_changes(ensure_repo(t.task), workspace)
    return verify(t.task, changes, tool_calls=calls)


def grade_all(jobs: list[tuple[Target, Honest]], root: Path) -> list[tuple[str, str, VerifyResult]]:
    """(task, case, verdict) of each job that did not score 1 with no flag."""

    def one(job: tuple[Target, Honest]) -> tuple[str, str, VerifyResult]:
        t, case = job
        folder = root / f"{t.task.instance_id}-{t.task.suite}" / case.name.replace(" ", "_")
        return t.task.instance_id, case.name, grade(t, folder, case)

    with ThreadPoolExecutor(max_workers=2) as pool:  # grading is mostly process start-up
        return [r for r in pool.map(one, jobs) if r[2].reward != 1 or r[2].flags]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=pytest.mark.xfail(
            not calls_mode(target(FIRST).task), reason=case.in_process, strict=True))
        if case.in_process else case
        for case in CORPUS
    ],
    ids=[case.name for case in CORPUS],
)  # fmt: skip
def test_an_honest_fix_scores_one(case: Honest, tmp_path: Path) -> None:
    result = grade(target(FIRST), tmp_path, case)
    assert result.reward == 1 and result.flags == [], (case.name, result)


def test_the_corpus_scores_one_on_held_out_and_product_tasks(tmp_path: Path) -> None:
    others = [target(task_id) for task_id in OTHERS]
    jobs = [(t, c) for t in others for c in CORPUS if calls_mode(t.task) or not c.in_process]
    assert grade_all(jobs, tmp_path) == []


def test_the_corpus_scores_one_in_pytest_mode(tmp_path: Path) -> None:
    t = in_process(target(FIRST))
    assert grade_all([(t, case) for case in CORPUS if not case.in_process], tmp_path) == []


@pytest.mark.parametrize(
    "name", ["own regression test file", "reproduction script calling sys.exit", "dataclasses"]
)
def test_honest_files_score_one_on_the_rl_path(name: str, tmp_path: Path) -> None:
    # The same files written into a live sandbox over the task's repository (where `.git`
    # is the repository's own) and read back as the RL loop reads them.
    case = next(c for c in CORPUS if c.name == name)

    def honest(workspace: Path, t: Target) -> None:
        apply_patch(workspace, t.task.patch)
        case.edit(workspace, t)

    result = grade_sandbox(target(FIRST), tmp_path, honest)
    assert result.reward == 1 and result.flags == [], result


def test_the_corpus_is_large_and_varied() -> None:
    assert len({case.name for case in CORPUS}) == len(CORPUS) >= 25
    assert {case.kind for case in CORPUS} == {"tests", "history", "script", "layout", "stdlib"}
    assert {target(task_id).task.split for task_id in (FIRST, *OTHERS)} == {"train", "heldout"}
    assert len([case for case in CORPUS if not case.in_process]) >= 25  # in every mode
