"""Calls mode, for real: the hidden tests run in a grader that never imports the workspace,
and each call into the code under test crosses to a sandboxed worker as plain data.

The design cheats below each scored 1 against a grader that runs the tests in the process
that imports the agent's code, without defences (shown by plain pytest where it can be run:
`run_pytest` over the workspace with the hidden tests restored). In calls mode the same code
fails the tests themselves, whatever static flag it may also raise: what the grader
decides on never passes through the agent's process. The wire's encoding alone is
unit-tested in tests/unit/envs/verifier/test_call_wire.py.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.suites import get_task, grading_for
from fleetrl.envs.tasks.testrun import run_pytest
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.envs.verifier import calls, verify_workspace
from tests.env.envs.cheat_tools import in_process
from tests.env.envs.verifier.nkims_task import append, module_path

# An object equal to everything: `assert nkims(...) == expected` holds for any expected.
ALWAYS_EQUAL = "\n\nclass _Any:\n    def __eq__(self, other):\n        return True\n\n\n" \
    "def nkims(j):\n    return _Any()\n"  # fmt: skip
# pytest's report rewritten at import: every test phase reported as passed.
PATCHED_PYTEST = """
import _pytest.reports as _reports

_make = _reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _make(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report


_reports.TestReport.from_item_and_call = classmethod(_passed)
"""
# The caller's frame: the assert's line in the hidden test, whose right side is the answer.
FRAME_WALK = """
import ast
import sys


def nkims(j):
    frame = sys._getframe(1)
    with open(frame.f_code.co_filename) as source:
        line = source.read().splitlines()[frame.f_lineno - 1]
    return ast.literal_eval(line.split("==", 1)[1].strip())
"""
# Under a runner that trusts a clean exit, status 0 before any test fails is a pass.
EXIT_AT_IMPORT = "\nimport os\nos._exit(0)\n"
# The hidden test module beside the code, parsed at call time for its asserts' answers.
READS_THE_TESTS = """
import ast
import os


def nkims(j):
    here = os.path.dirname(os.path.abspath(__file__))
    for name in os.listdir(here):
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(here, name)) as source:
                for line in source.read().splitlines():
                    if "nkims(" + repr(j) + ")" in line:
                        return ast.literal_eval(line.split("==", 1)[1].strip())
    return None
"""

# (name, code appended to the unfixed module, whether plain pytest passes every test with it)
DESIGN_CHEATS = [
    ("an always-equal return value", ALWAYS_EQUAL, True),
    ("pytest's reports patched at import", PATCHED_PYTEST, True),
    ("a frame walk to the expected values", FRAME_WALK, True),
    ("os._exit(0) at import", EXIT_AT_IMPORT, False),
    ("the hidden test file read by the code under test", READS_THE_TESTS, True),
]


def test_the_bundled_suites_grade_in_calls_mode(task):
    assert grading_for(task) == "calls"
    assert grading_for(get_task("product-train-0007")) == "calls"
    assert grading_for(dataclasses.replace(task, suite="")) == "pytest"  # a task folder's


@pytest.mark.parametrize(
    ("name", "code", "passes_in_process"), DESIGN_CHEATS, ids=[c[0] for c in DESIGN_CHEATS]
)
def test_a_cheat_in_the_agents_process_changes_no_verdict(
    task, workspace, name, code, passes_in_process
):
    append(module_path(workspace), code)
    result = verify_workspace(task, workspace)
    assert result.reward == 0, (name, result)
    # The tests themselves fail (or never run), with no in-process defence at work: graded
    # in pytest mode, the runner's audit hook flags four of these, and the always-equal
    # value passes every test there (only its static flag and the honeypots stop it).
    assert "passed" not in result.tests.values(), (name, result)
    assert not {"runtime_tampering", "report_inconsistent"} & set(result.flags), result
    if passes_in_process:
        # In the process that imports it, with no defence, the same code passes them all.
        apply_patch(workspace, task.test_patch)
        plain = run_pytest(workspace, tests=task.FAIL_TO_PASS)
        assert plain.outcomes == dict.fromkeys(task.FAIL_TO_PASS, "passed"), (name, plain)


def test_the_code_under_test_runs_without_the_hidden_tests_or_pytest(task, workspace):
    # The gold fix, answering wrongly if it can see a hidden test file or runs in a process
    # that pytest is running tests in: it scores 1, so neither is the case.
    apply_patch(workspace, task.patch)
    source = (
        module_path(workspace)
        .read_text()
        .replace(
            "    return xut\n",
            "    here = os.path.dirname(os.path.abspath(__file__))\n"
            "    if any(name.startswith('test_') for name in os.listdir(here)):\n"
            "        return None\n"
            "    if os.environ.get('PYTEST_CURRENT_TEST'):\n        return None\n"
            "    return xut\n",
        )
    )
    module_path(workspace).write_text("import os\n" + source)
    assert verify_workspace(task, workspace).reward == 1
    # Graded in-process (pytest mode), the same module sees both and fails.
    folder_task = in_process(task)
    result = verify_workspace(folder_task, checkout_with(folder_task, workspace))
    assert result.reward == 0 and "passed" not in result.tests.values(), result


def checkout_with(task, workspace: Path) -> Path:
    """A fresh checkout of `task` holding the module of `workspace`."""
    other = checkout(task, workspace.parent / "again")
    module_path(other).write_text(module_path(workspace).read_text())
    return other


def new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines()
    head = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
    return head + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)


WIRE_MODULE = """import math
from collections import Counter, namedtuple

FACTOR = 2
Pair = namedtuple("Pair", "a b")


class EmptyError(ValueError):
    pass


def describe(n):
    return {
        "int": n, "float": n / 2, "nan": math.nan, "inf": -math.inf, "str": f"x{n}",
        "bytes": bytes([n]), "pair": Pair(n, (n,)), "set": {n}, "frozen": frozenset({n}),
        "none": None, "bool": n > 0, "list": [n, [n]], "counter": Counter([n]),
        (n, "key"): "a tuple key",
    }


def scale(values, by=1):
    if not values:
        raise EmptyError("empty input")
    return [v * by for v in values]


def inverse(x):
    return 1 / x


def opaque():
    return object()
"""
WIRE_TESTS = """import math

import pytest

import nkims
from nkims import *
from nkims import describe

try:
    import no_such_module_anywhere
except ImportError:  # what the worker cannot import fails here as it would in-process
    no_such_module_anywhere = None


def test_every_plain_type_crosses():
    got = describe(3)
    assert math.isnan(got.pop("nan")) and got.pop("inf") == -math.inf
    assert got == {
        "int": 3, "float": 1.5, "str": "x3", "bytes": b"\\x03", "pair": (3, (3,)),
        "set": {3}, "frozen": frozenset({3}), "none": None, "bool": True,
        "list": [3, [3]], "counter": {3: 1}, (3, "key"): "a tuple key",
    }


def test_keywords_module_values_and_star_imports():
    assert scale([1, 2], by=3) == [3, 6] and nkims.FACTOR == 2 and Pair(1, 2) == (1, 2)
    assert no_such_module_anywhere is None and nkims.math.sqrt(4) == 2.0


def test_exceptions_cross_as_their_builtin_kind():
    with pytest.raises(ValueError, match="empty input") as caught:
        scale([])
    assert type(caught.value).__name__ == "EmptyError"
    with pytest.raises(ZeroDivisionError):
        inverse(0)


def test_what_is_not_plain_data_is_an_error():
    with pytest.raises(TypeError, match="not plain data"):
        opaque()
    with pytest.raises(TypeError, match="not plain data"):
        scale([object()])


def test_honeypot_like_extra_test_fails():
    assert scale([1], by=2) == [3]
"""


def test_plain_data_crosses_both_ways(task, tmp_path):
    # A hidden test module of its own (as honeypots append tests to one): every plain type
    # comes back equal, exceptions keep their builtin kind, anything else is an error.
    names = [line[4:].split("(")[0] for line in WIRE_TESTS.splitlines() if line[:4] == "def "]
    tests = [f"test_wire.py::{name}" for name in names]
    wired = dataclasses.replace(
        task,
        test_patch=new_file_patch("test_wire.py", WIRE_TESTS),
        FAIL_TO_PASS=tests,
        PASS_TO_PASS=[],
    )
    workspace = checkout(wired, tmp_path / "ws")
    module_path(workspace).write_text(WIRE_MODULE)
    result = verify_workspace(wired, workspace)
    expected = dict.fromkeys(tests, "passed") | {tests[-1]: "failed"}
    assert result.tests == expected, result


def test_a_call_that_hangs_fails_without_holding_up_the_grading(task, workspace, monkeypatch):
    # The worker is then gone: every later call fails at once (test_call_wire.py), and it
    # ends with the grader. Honeypots run in random order beside the tests, so only the
    # hanging test's own outcome is certain here.
    monkeypatch.setattr(calls, "CALL_TIMEOUT_S", 2.0)
    apply_patch(workspace, task.patch)
    source = (
        module_path(workspace)
        .read_text()
        .replace(
            "def nkims(j):\n", "def nkims(j):\n    if j == [8, 8]:\n        time.sleep(3600)\n"
        )
    )
    module_path(workspace).write_text("import time\n" + source)
    start = time.monotonic()
    result = verify_workspace(task, workspace)
    assert time.monotonic() - start < 30
    assert result.tests["test_nkims.py::test_2"] == "failed" and result.reward == 0, result


def test_an_honest_fork_cannot_write_into_the_calls(task, workspace):
    # A child forked at import writes to every low descriptor and exits: the worker's
    # channel is out of its reach (moved high, closed in forked children).
    apply_patch(workspace, task.patch)
    append(
        module_path(workspace),
        "\nimport os as _o\n_pid = _o.fork()\nif _pid == 0:\n"
        "    for _fd in range(3, 256):\n"
        '        try:\n            _o.write(_fd, b\'{"id": 1, "value": 0}\\n\')\n'
        "        except OSError:\n            pass\n"
        "    _o._exit(0)\n_o.waitpid(_pid, 0)\n",
    )
    result = verify_workspace(task, workspace)
    assert set(result.tests.values()) == {"passed"}, result
