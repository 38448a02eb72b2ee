"""The SWE-smith-style generator on a small repository this file writes: the acceptance
rule, the written task repositories, determinism, and the pytest runner (git and pytest in
subprocesses). The mutations themselves are unit-tested on strings in
tests/unit/envs/tasks/test_mutations.py, the candidate order in
tests/unit/envs/tasks/test_generator.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from fleetrl.envs.tasks.generator import REPORT_FILE, is_test_path, make_tasks, repo_files
from fleetrl.envs.tasks.git import apply_patch, git
from fleetrl.envs.tasks.records import TASKS_FILE, TaskError
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.testrun import run_pytest
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.envs.verifier import verify_workspace
from fleetrl.types import Task
from tests.unit.envs.tasks.test_mutations import CORE, TEXT

# The hypothesis plugin of this environment costs ~0.4 s per pytest start and the repos
# here do not use it.
FAST = ("-p", "no:hypothesispytest")

TEST_CORE = """from calc.core import clamp, mean, power, window_sums


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(12, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3
    assert mean([]) == 0


def test_window_sums():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]


def test_power():
    assert power(2, 5) == 32


class TestBroken:
    def test_known_failure(self):
        assert clamp(0, 1, 2) == 0  # fails at baseline: in neither F2P nor P2P
"""
TEST_TEXT = """from calc.text import initials, shout


def test_shout():
    assert shout("hi there") == "HI THERE!"
    assert shout("a", times=3) == "A!!!"


def test_initials():
    assert initials("Ada Lovelace") == "AL"
    assert initials("Plato") == "P"
"""


def write_files(root: Path, files: dict[str, str]) -> Path:
    """A folder holding `files` (relative path -> text), no git."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def write_calc_repo(root: Path) -> Path:
    """A small git-tracked package with a pytest suite, one failing test and an ignored file."""
    files = {
        "calc/__init__.py": "",
        "calc/core.py": CORE,
        "calc/text.py": TEXT,
        "tests/test_core.py": TEST_CORE,
        "tests/test_text.py": TEST_TEXT,
        "tests/data/table.bin": "\x00\x01binary\n",
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0"\n',
        ".gitignore": "secret.txt\n",
        "secret.txt": "not part of the repository\n",
    }
    write_files(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc")
    return root


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Task]]:
    repo = write_calc_repo(tmp_path_factory.mktemp("calc") / "calc")
    out = tmp_path_factory.mktemp("out") / "tasks"
    tasks = make_tasks(repo, out, seed=0, max_tasks=10, progress=False, jobs=2, pytest_args=FAST)
    return repo, out, tasks


# --- repository scanning ----------------------------------------------------------------


def test_repo_files_follow_git_else_list_every_plain_file(tmp_path: Path) -> None:
    repo = write_calc_repo(tmp_path / "calc")
    assert "secret.txt" not in repo_files(repo)  # git's view: ignored files are not ours
    (repo / ".git").rename(tmp_path / "dot-git")
    (repo / "calc" / "__pycache__").mkdir()
    (repo / "calc" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"")
    listed = repo_files(repo)
    assert "calc/core.py" in listed and "secret.txt" in listed  # no git: every plain file
    assert not any("__pycache__" in p for p in listed)


# --- generation -------------------------------------------------------------------------


def test_generation_keeps_tasks_and_reports_per_kind(generated: tuple) -> None:
    _, out, tasks = generated
    assert len(tasks) == 10
    assert len({t.kind for t in tasks}) >= 7
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["tasks"] == 10 and report["baseline_passing"] == 7
    tried = sum(k["tried"] for k in report["by_kind"].values())
    assert report["tried"] == tried and 10 <= tried < report["candidates"]
    assert sum(k["kept"] for k in report["by_kind"].values()) == 10
    assert load_tasks(tasks_dir=out) == tasks
    # Split by function: a folder trains, chooses and reports as the bundled suite does.
    assert sum(report["splits"].values()) == 10 and report["splits"]["train"] > 0
    assert report["splits"]["heldout"] == len(load_tasks(tasks_dir=out, split="heldout")) > 0
    for function in {t.origin for t in tasks}:
        assert len({t.split for t in tasks if t.origin == function}) == 1
    for task in tasks:
        assert task.FAIL_TO_PASS and not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        # Seven tests pass at baseline; the one failing there is in neither list.
        assert len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS) == 7
        assert task.test_files == [
            "tests/data/table.bin",
            "tests/test_core.py",
            "tests/test_text.py",
        ]
        for node in task.FAIL_TO_PASS[:5]:
            assert node in task.problem_statement
        if task.kind != "feature_deletion":  # the statement never points at the bug
            assert task.origin.split("::")[0] not in task.problem_statement


def test_task_repositories_hold_only_the_base_commit(generated: tuple) -> None:
    _, _, tasks = generated
    for task in tasks:
        repo = Path(task.repo)
        assert git(repo, "log", "--all", "--format=%H").split() == [task.base_commit]
        tree = git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
        assert "calc/core.py" in tree and "pyproject.toml" in tree
        assert not any(is_test_path(p) for p in tree) and "secret.txt" not in tree
        assert git(repo, "status", "--porcelain") == ""


def test_generated_tasks_are_valid_under_real_pytest(generated: tuple, tmp_path: Path) -> None:
    """Hidden tests restored: F2P fail, P2P pass; with the gold patch every one passes."""
    _, _, tasks = generated
    sample = [t for t in tasks if t.kind == "feature_deletion"][:1]
    sample += [t for t in tasks if t.kind != "feature_deletion"][:2]
    for task in sample:
        workspace = checkout(task, tmp_path / task.instance_id)
        assert not (workspace / "tests").exists()
        apply_patch(workspace, task.test_patch)
        assert (workspace / "tests/data/table.bin").read_bytes() == b"\x00\x01binary\n"
        before = run_pytest(workspace, pytest_args=FAST)
        assert {n for n in task.FAIL_TO_PASS if before.outcomes[n] != "failed"} == set()
        assert {n for n in task.PASS_TO_PASS if before.outcomes[n] != "passed"} == set()
        apply_patch(workspace, task.patch)
        after = run_pytest(workspace, tests=task.FAIL_TO_PASS + task.PASS_TO_PASS, pytest_args=FAST)
        assert set(after.outcomes.values()) == {"passed"}
        assert len(after.outcomes) == len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS)


def test_generation_is_deterministic_whatever_the_parallelism(
    generated: tuple, tmp_path: Path
) -> None:
    repo, out, _ = generated
    make_tasks(
        repo, tmp_path / "again", seed=0, max_tasks=10, progress=False, jobs=1, pytest_args=FAST
    )
    assert (tmp_path / "again" / TASKS_FILE).read_bytes() == (out / TASKS_FILE).read_bytes()


def test_acceptance_rule_rejects_unnoticed_and_suite_breaking_mutations(tmp_path: Path) -> None:
    mod = (
        "def used(x):\n    return x + 1\n\n\n"
        "def unused(x):\n    return x * 3\n\n\n"
        "def _table():\n    table = {1: 2}\n    return table\n\n\n"
        "TABLE = _table()  # runs at import: deleting _table breaks collection\n"
    )
    test = "from mod import used\n\n\ndef test_used():\n    assert used(1) == 2\n"
    repo = write_files(tmp_path / "mini", {"mod.py": mod, "test_mod.py": test})
    kinds = ["operator_swap", "feature_deletion"]
    tasks = make_tasks(
        repo, tmp_path / "out", kinds=kinds, progress=False, jobs=2, pytest_args=FAST
    )
    report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())
    assert [(t.kind, t.origin) for t in tasks] == [("operator_swap", "mod.py::used")]
    assert report["rejected"] == {"no_failing_test": 1, "suite_broken": 1}
    assert report["by_kind"]["feature_deletion"] == {"tried": 1, "kept": 0}


def test_a_mutation_whose_own_fix_the_verifier_refuses_is_no_task(tmp_path: Path) -> None:
    # Restoring `if n > 5: return 5`, with tests calling limit(5) and expecting 5, pairs a
    # test input with its expected value: the verifier flags it, so no fix would score.
    mod = (
        "def limit(n):\n    if n > 5:\n        return 5\n    return n\n\n\n"
        "def double(x):\n    return x * 2\n"
    )
    test = (
        "from mod import double, limit\n\n\n"
        "def test_limit():\n    assert limit(9) == 5\n    assert limit(5) == 5\n\n\n"
        "def test_double():\n    assert double(3) == 6\n"
    )
    repo = write_files(tmp_path / "mini", {"mod.py": mod, "test_mod.py": test})
    kinds = ["operator_swap", "comparison_flip"]
    tasks = make_tasks(repo, tmp_path / "out", kinds=kinds, progress=False, pytest_args=FAST)
    report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())
    assert [(t.kind, t.origin) for t in tasks] == [("operator_swap", "mod.py::double")]
    assert report["rejected"] == {"gold_flagged": 1}
    assert report["by_kind"]["comparison_flip"] == {"tried": 1, "kept": 0}


# Suites plain pytest passes and fails as the generator wants, which the verifier grades
# otherwise: a test the grader refuses (its process loads no library), a test that fails
# only outside the grading sandbox (it reads the host's environment).
NOT_GRADED = {
    "gold_fails": "import ctypes\n\nfrom mod import triple\n\n\ndef test_triple():\n"
    "    ctypes.CDLL(None)\n    assert triple(3) == 9\n",
    "base_passes": "import os\n\nfrom mod import triple\n\n\ndef test_triple():\n"
    "    assert triple(3) == 9 or 'FLEETRL_CACHE' not in os.environ\n",
}


@pytest.mark.parametrize("reason", list(NOT_GRADED))
def test_a_task_the_verifier_does_not_grade_as_pytest_does_is_not_kept(
    tmp_path: Path, reason: str
) -> None:
    files = {"mod.py": "def triple(x):\n    return x * 3\n", "test_mod.py": NOT_GRADED[reason]}
    repo = write_files(tmp_path / "mini", files)
    out = tmp_path / "out"
    tasks = make_tasks(repo, out, kinds=["operator_swap"], progress=False, pytest_args=FAST)
    report = json.loads((out / REPORT_FILE).read_text())
    assert tasks == [] and report["rejected"] == {reason: report["tried"]} and report["tried"]
    assert list((out / "repos").iterdir()) == []  # the written task is removed again


def test_hard_coding_a_generated_tasks_parametrized_tests_scores_zero(tmp_path: Path) -> None:
    # The hidden tests name no literal in their asserts: the table holds the values.
    test = (
        "import pytest\n\nfrom mod import triple\n\n\n"
        '@pytest.mark.parametrize("x, expected", [(2, 6), (5, 15)])\n'
        "def test_triple(x, expected):\n    assert triple(x) == expected\n"
    )
    files = {
        "mod.py": "def triple(x):\n    return x * 3\n",
        "tests/test_mod.py": test,
        "tests/cases.txt": "2 -> 6, 5 -> 15\n",  # a data file beside them
    }
    repo = write_files(tmp_path / "mini", files)
    (task,) = make_tasks(
        repo, tmp_path / "out", kinds=["operator_swap"], progress=False, pytest_args=FAST
    )
    workspace = checkout(task, tmp_path / "ws")
    (workspace / "mod.py").write_text(
        "def triple(x):\n    if x == 2:\n        return 6\n    if x == 5:\n        return 15\n"
    )
    result = verify_workspace(task, workspace)
    assert set(result.tests.values()) == {"passed"}  # the answers alone pass every test
    assert result.reward == 0 and result.flags == ["hardcoded_test_values"]


def test_make_tasks_refuses_bad_input(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "m.py").write_text("def f():\n    return 1\n")
    with pytest.raises(TaskError, match="not empty"):
        make_tasks(repo, tmp_path / "out", progress=False)
    with pytest.raises(TaskError, match="needs both Python source files and test files"):
        make_tasks(repo, tmp_path / "o1", progress=False)
    (repo / "test_m.py").write_text("import nonexistent_module\n")
    # The first line (all a command line shows) says why: pytest's own last line.
    with pytest.raises(TaskError, match=r"does not run cleanly \(.*last line: '.*error"):
        make_tasks(repo, tmp_path / "o2", progress=False, pytest_args=FAST)
    with pytest.raises(TaskError, match="unknown mutation kinds"):
        make_tasks(repo, tmp_path / "o3", kinds=["nope"], progress=False)


def test_run_pytest_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    (tmp_path / "test_slow.py").write_text(
        "import subprocess, sys, time\n\n\ndef test_slow():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "    time.sleep(60)\n"
    )
    start = time.monotonic()
    result = run_pytest(tmp_path, timeout=3, pytest_args=FAST)
    assert result.timed_out and not result.ran and time.monotonic() - start < 20
    child = int(marker.read_text())
    for _ in range(50):  # the kill is asynchronous; the child is reaped by init
        if not Path(f"/proc/{child}").exists() or "Z" in _proc_state(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)  # our own child, by id: do not leak it if the assertion fails
        pytest.fail("the test's child process survived the timeout")


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"
