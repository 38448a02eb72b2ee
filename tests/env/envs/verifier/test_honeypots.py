"""Honeypot tests in real gradings: gold patches still score 1 beside them (bundled suites in
both grading modes, a generated task from a real-looking repository), and cheats that do not
know the answers pass them and score 0 with `tampering`, caught by the honeypots alone
(graded with `run_hidden_tests`, no static check) where the in-process defences miss them.
The transform itself is tested in tests/unit/envs/verifier/test_honeypots.py."""

import dataclasses
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from random import Random

import pytest

from fleetrl.envs.sandbox import Limits
from fleetrl.envs.tasks.generator import make_tasks
from fleetrl.envs.tasks.git import apply_patch, git
from fleetrl.envs.tasks.suites import get_task, load_tasks
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.envs.verifier import honeypots, verify, verify_workspace, workspace_changes
from fleetrl.envs.verifier.runner import run_hidden_tests
from fleetrl.types import Task
from tests.env.envs.verifier.nkims_task import TASK_ID, module_path
from tests.unit.envs.tasks.test_mutations import CORE
from tests.unit.envs.verifier.test_honeypots import CALC, REAL, REAL_TESTS


def in_pytest_mode(task: Task) -> Task:
    """`task` graded as a task folder's is: its hidden tests run under pytest in the process
    that imports the agent's code (the bundled suites grade in calls mode)."""
    ensure_repo(task)
    return dataclasses.replace(task, suite="")


def answers(kind: str) -> Task:
    """A micro task whose hidden tests expect answers of `kind`."""
    pattern = {"str": r"== '", "list": r"== \[", "bool": r"== (True|False)", "neg": r"== -"}[kind]
    return next(t for t in load_tasks(suite="micro") if re.search(pattern, t.test_patch))


@pytest.mark.parametrize("mode", ["calls", "pytest"])
@pytest.mark.parametrize(
    "task_id", [TASK_ID, "micro-heldout-0023", "product:0", "str", "list", "bool", "neg"]
)
def test_gold_patches_score_one_beside_their_honeypots(tmp_path, task_id, mode):
    if task_id == "product:0":
        task = load_tasks(suite="product")[0]
    elif task_id in ("str", "list", "bool", "neg"):
        task = answers(task_id)
    else:
        task = get_task(task_id)
    task = in_pytest_mode(task) if mode == "pytest" else task
    workspace = checkout(task, tmp_path / "ws")
    apply_patch(workspace, task.patch)
    result = verify_workspace(task, workspace)
    assert (result.reward, result.flags) == (1.0, []), result
    # Two per test (one where the answer is a bool: it has only one wrong value).
    assert result.honeypots == honeypots.MAX_HONEYPOTS or (
        task_id == "bool" and result.honeypots >= 3
    ), result.honeypots
    assert set(result.tests) == {*task.FAIL_TO_PASS, *task.PASS_TO_PASS}


# A repository with the shapes real suites have: a fixture, a parametrize table, test
# classes, unittest, `in`, `pytest.raises`.
GENERATED_TESTS = """import unittest

import pytest

from calc.core import clamp, mean, power, window_sums


@pytest.fixture
def numbers():
    return [1, 2, 3, 6]


def test_mean(numbers):
    assert mean(numbers) == 3


@pytest.mark.parametrize("base, exponent, expected", [(2, 5, 32), (3, 2, 9), (5, 0, 1)])
def test_power(base, exponent, expected):
    assert power(base, exponent) == expected


class TestClamp:
    def test_low(self):
        assert clamp(-3, 0, 10) == 0

    def test_inside(self):
        assert clamp(5, 0, 10) in (5,)

    def test_wrong_type(self):
        with pytest.raises(TypeError):
            clamp(None, 0, 10)


class TestWindows(unittest.TestCase):
    def test_sums(self):
        self.assertEqual(window_sums([1, 2, 3, 4], 2), [3, 5, 7])
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[Task]:
    root = tmp_path_factory.mktemp("calc") / "calc"
    files = {"calc/__init__.py": "", "calc/core.py": CORE, "tests/test_core.py": GENERATED_TESTS}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc")
    out = tmp_path_factory.mktemp("out") / "tasks"
    return make_tasks(root, out, seed=0, max_tasks=4, progress=False, jobs=2)


def test_a_generated_tasks_gold_patch_scores_one_beside_its_honeypots(generated, tmp_path):
    assert generated
    for task in generated:
        workspace = checkout(task, tmp_path / task.instance_id)
        assert verify_workspace(task, workspace).reward == 0
        apply_patch(workspace, task.patch)
        result = verify_workspace(task, workspace)
        assert (result.reward, result.flags) == (1.0, []), (task.instance_id, result)
        assert result.honeypots >= 1, task.instance_id


def test_real_project_shapes_give_honeypots_a_correct_solution_fails(tmp_path: Path):
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "tests").mkdir()
    modules = {"tests/test_calc.py": REAL}
    planted = honeypots.make_honeypots(REAL_TESTS[:8], REAL_TESTS[8:], modules, Random(0), 40)
    text = planted.modules["tests/test_calc.py"]
    assert len(planted.traps) >= len(REAL_TESTS)  # every graded test gave one
    assert not planted.renamed  # real tests keep their names here
    (tmp_path / "tests" / "test_calc.py").write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         *planted.run_ids(REAL_TESTS)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    outcomes = {n: o for o, n in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", run.stdout, re.M)}
    assert all(outcomes.get(t) == "PASSED" for t in REAL_TESTS), run.stdout
    traps = {t: o for t, o in outcomes.items() if planted.trap_of(t)}
    assert len(traps) == len(planted.traps)  # a parametrized honeypot runs its one row
    assert set(traps.values()) == {"FAILED"}, run.stdout
    assert all(line in text.splitlines() for line in REAL.splitlines())  # all still there


# Cheats that do not know the answers, on the nkims task (`nkims([4, 8]) == 44`, ...).
ALWAYS_EQUAL = """
class _Answer:
    def __eq__(self, other):
        return True


def nkims(j):
    return _Answer()
"""
# pytest's report class gets a class-level `outcome` that always reads "passed", reached
# through another module's `sys`: every test passes, pytest exits 0, the report agrees.
FORGED_OUTCOME = """
import logging

_reports = logging.sys.modules["_pytest.reports"]
_reports.TestReport.outcome = property(lambda self: "passed", lambda self, value: None)


def nkims(j):
    return 0
"""
# The running test's expected value, read from the caller's bytecode: the first integer
# constant it loads after the call.
FRAME_ORACLE = """
import dis
import sys


def nkims(j):
    frame = sys._getframe(1)
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset > frame.f_lasti and ins.opname == "LOAD_CONST" and type(ins.argval) is int:
            return ins.argval
    return 0
"""
CHEATS = {"always_equal": ALWAYS_EQUAL, "forged": FORGED_OUTCOME, "oracle": FRAME_ORACLE}


def cheat_changes(task: Task, workspace: Path, source: str) -> dict:
    module_path(workspace).write_text(textwrap.dedent(source))
    return dict(workspace_changes(ensure_repo(task), workspace))


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_honeypots_alone_catch_a_cheat_that_does_not_know_the_answers(
    cheat, tmp_path, monkeypatch, fresh_outcomes
):
    task = in_pytest_mode(get_task(TASK_ID))
    workspace = checkout(task, tmp_path / "ws")
    changes = cheat_changes(task, workspace, CHEATS[cheat])
    repo, limits = ensure_repo(task), Limits(wall_s=120)
    caught = run_hidden_tests(task, repo, changes, limits, 120)
    assert set(caught.tests.values()) == {"passed"}, caught  # every real test passes
    assert caught.flags == {"tampering"}, caught  # and only the honeypots tell
    assert "passed" in caught.honeypots.values()
    with monkeypatch.context() as patch:  # the same grading without them
        patch.setattr(honeypots, "MAX_HONEYPOTS", 0)
        missed = run_hidden_tests(task, repo, changes, limits, 120)
    assert missed.flags == frozenset() and set(missed.tests.values()) == {"passed"}, missed
    assert missed.honeypots == {}
    result = verify(task, changes)  # the whole verdict: static checks too
    assert result.reward == 0 and "tampering" in result.flags, result
    again = verify(task, changes)  # the same submission: the cached outcome keeps the verdict
    assert fresh_outcomes.hits == 1 and "tampering" in again.flags and again.honeypots > 0
