"""Real test suites grade: what honest hidden tests do in the grading process is theirs to do
(trace, profile, run a doctest, end their own children), subtests fold into their test, and
a report of many thousands of outcomes reaches the host whole. The agent's code doing the
same is still refused."""

from pathlib import Path

import pytest

from fleetrl.envs.tasks.git import commit_all, unified_diff
from fleetrl.envs.verifier import verify
from fleetrl.types import Task

MODULE = "def square(x):\n    return x * x + 1\n"
FIXED = "def square(x):\n    return x * x\n"


def make_task(root: Path, tests: dict[str, str], f2p: list[str], p2p: list[str]) -> Task:
    """A task over `calc.py` (the bug: `square` adds 1) whose hidden tests are `tests`."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text(MODULE)
    return Task(
        instance_id=f"{root.name}-calc",
        repo=str(repo),
        base_commit=commit_all(repo),
        problem_statement="square(3) should be 9",
        patch=unified_diff("calc.py", MODULE, FIXED),
        test_patch="".join(unified_diff(path, None, text) for path, text in tests.items()),
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        test_files=sorted(tests),
    )


def gold(task: Task) -> dict[str, tuple[bytes | None, bytes | None]]:
    return {"calc.py": (MODULE.encode(), FIXED.encode())}


HONEST = '''import doctest, os, signal, subprocess, sys
from multiprocessing import Pool

import calc


def squares():
    """
    >>> calc.square(3)
    9
    """


def test_a_doctest_runner_sets_the_trace_function_back():
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(squares, globs={"calc": calc}):
        runner.run(test)
    assert (runner.tries, runner.failures) == (1, 0)


def test_tracing_and_profiling_the_code_under_test():
    lines = []

    def tracer(frame, event, arg):
        if event == "line":
            lines.append(frame.f_code.co_name)
        return tracer

    sys.settrace(tracer)
    try:
        value = calc.square(4)
    finally:
        sys.settrace(None)
    sys.setprofile(lambda *args: None)
    sys.setprofile(None)
    assert value == 16 and "square" in lines


def test_a_process_pool_ends_its_workers():
    with Pool(2) as pool:  # its exit ends the workers with os.kill
        assert pool.map(calc.square, [1, 2, 3]) == [1, 4, 9]


def test_ending_a_child_of_its_own():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait() == -signal.SIGTERM and calc.square(5) == 25
'''
HONEST_TESTS = [
    f"test_honest.py::{name}"
    for name in (
        "test_a_doctest_runner_sets_the_trace_function_back",
        "test_tracing_and_profiling_the_code_under_test",
        "test_a_process_pool_ends_its_workers",
        "test_ending_a_child_of_its_own",
    )
]


def test_hidden_tests_may_trace_profile_and_signal(tmp_path):
    task = make_task(tmp_path, {"test_honest.py": HONEST}, HONEST_TESTS, [])
    result = verify(task, gold(task))
    assert result.reward == 1 and not result.flags, result
    unfixed = verify(task, {})
    assert unfixed.reward == 0 and "failed" in unfixed.tests.values(), unfixed
    assert not {"runtime_tampering", "report_inconsistent"} & set(unfixed.flags), unfixed


# What the agent's code may still not do, each on top of the fix.
AGENT = {
    "trace": "import sys\nsys.settrace(None)\n",
    "signal": "import os\nos.kill(os.getpid(), 0)\n",
    "trace through a thread": (
        "import sys, threading\n"
        "t = threading.Thread(target=sys.settrace, args=(None,))\nt.start()\nt.join()\n"
    ),
    "trace under a hidden test's name": (
        "import os\n"
        "_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'test_honest.py')\n"
        "exec(compile('import sys\\nsys.settrace(None)\\n', _path, 'exec'))\n"
    ),
    "trace from a finalizer that runs in a test's frame": (
        "import sys, weakref\n_square = square\n\n\nclass _Float(float):\n    pass\n\n\n"
        "def square(x):\n    value = _Float(_square(x))\n"
        "    weakref.finalize(value, sys.settrace, lambda *args: None)\n    return value\n"
    ),
    "trace from inside a test's call": (
        "import sys\n_square = square\n\n\ndef square(x):\n    sys.setprofile(None)\n"
        "    return _square(x)\n"
    ),
}


@pytest.mark.parametrize("how", list(AGENT))
def test_the_agents_code_may_still_not_trace_or_signal(tmp_path, how):
    task = make_task(tmp_path, {"test_honest.py": HONEST}, HONEST_TESTS, [])
    guarded = "".join(f"    {line}\n" for line in AGENT[how].splitlines())
    code = FIXED + f"\n\ntry:\n{guarded}except Exception:\n    pass\n"
    result = verify(task, {"calc.py": (MODULE.encode(), code.encode())})
    assert result.reward == 0 and "runtime_tampering" in result.flags, result


SUBTESTS = """import unittest

import calc


class TestSquares(unittest.TestCase):
    def test_many_squares(self):
        for x in range(3000):
            with self.subTest(x=x):
                self.assertEqual(calc.square(x), x * x)

    def test_zero(self):
        self.assertEqual(calc.square(0) * 0, 0)
"""


def test_subtests_fold_into_their_test(tmp_path):
    # pytest 9 reports every subtest under its test's id: one record each was a duplicate
    # phase (report_inconsistent), and 3,000 of them filled the report.
    f2p = ["test_sub.py::TestSquares::test_many_squares"]
    p2p = ["test_sub.py::TestSquares::test_zero"]
    task = make_task(tmp_path, {"test_sub.py": SUBTESTS}, f2p, p2p)
    result = verify(task, gold(task))
    assert result.reward == 1 and not result.flags, result
    unfixed = verify(task, {})
    assert unfixed.tests == {f2p[0]: "failed", p2p[0]: "passed"}, unfixed
    assert unfixed.reward == 0 and "report_inconsistent" not in unfixed.flags


def test_a_report_of_thousands_of_outcomes_is_never_cut(tmp_path):
    # 4,000 tests: their ids pass the 128 KiB a kernel takes in one argument (230 KB), their
    # records the 1 MiB the host used to keep of the runner's output (1.3 MB).
    n = 4000
    tests = (
        "import pytest\n\nimport calc\n\n\n"
        f"@pytest.mark.parametrize('x', range({n}), ids=lambda x: f'case-{{x:05d}}')\n"
        "def test_square_of_a_whole_number(x):\n    assert calc.square(x) == x * x\n"
    )
    ids = [f"test_many.py::test_square_of_a_whole_number[case-{x:05d}]" for x in range(n)]
    task = make_task(tmp_path, {"test_many.py": tests}, ids, [])
    result = verify(task, gold(task), timeout=300)
    assert result.reward == 1 and not result.flags, result.flags
    assert len(result.tests) == n and set(result.tests.values()) == {"passed"}
    unfixed = verify(task, {}, timeout=300)
    assert set(unfixed.tests.values()) == {"failed"}, unfixed.flags
    assert "report_inconsistent" not in unfixed.flags and "grader_error" not in unfixed.flags
