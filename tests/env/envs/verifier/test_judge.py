"""Forged reports, for real: graded code writing the runner's records, or leaving before
the runner reports, never scores 1; an honest fork is no tampering. Each contradiction the
host catches is unit-tested in tests/unit/envs/verifier/test_judge.py."""

import pytest

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.verifier import verify_workspace
from tests.env.envs.cheat_tools import in_process
from tests.env.envs.verifier.nkims_task import append, module_path


@pytest.fixture
def task(task):
    """The task graded in pytest mode: this file tests the in-process grader runner (the
    bundled suites grade in calls mode, where no agent code runs in the graded process)."""
    return in_process(task)


# Records the runner would write for a full pass, then its final record: what a forger
# needs to claim reward 1 (no secret exists, so anything can write them; the host catches
# them by cross-checking).
FORGE = (
    "\nimport json as _j, os as _o\n"
    "_lines = ''.join(_j.dumps({'kind': 'report', 'nodeid': 'test_nkims.py::' + t, 'when': w,"
    " 'outcome': 'passed'}) + '\\n' for t in ('test_1', 'test_2', 'test_3')"
    " for w in ('setup', 'call', 'teardown'))\n"
    "_lines += _j.dumps({'kind': 'final', 'exit': 0, 'blocked': []}) + '\\n'\n"
    "for _fd in range(1, 51):\n"
    "    try:\n        _o.write(_fd, _lines.encode())\n    except OSError:\n        pass\n"
)


def test_forged_report_lines_are_inconsistent_never_reward_one(task, workspace):
    # The agent's module writes a complete passing report to stdout and to every fd 3..50
    # (the report channel is among them) when the hidden test imports it.
    append(module_path(workspace), FORGE)
    result = verify_workspace(task, workspace)
    assert result.reward == 0
    assert "report_inconsistent" in result.flags, result.flags


def test_leaving_at_import_scores_zero(task, workspace):
    # An exit the runner did not make: its guard reports it and the status is not 0.
    apply_patch(workspace, task.patch)
    append(module_path(workspace), "\nimport os\nos._exit(0)\n")
    result = verify_workspace(task, workspace)
    assert result.reward == 0
    assert "runtime_tampering" in result.flags and "passed" not in result.tests.values()


def test_a_forger_cannot_leave_before_the_runner_reports(task, workspace):
    # The whole passing report and its final record, then a clean exit reached in a way
    # the static checks cannot name: the runner's own os._exit guard reports it.
    leave = "\ngetattr(_o, ''.join(['_', 'exit']))(0)\n"
    append(module_path(workspace), FORGE + leave)
    result = verify_workspace(task, workspace)
    assert result.reward == 0
    assert {"report_inconsistent", "runtime_tampering"} <= set(result.flags), result.flags


def test_a_forked_child_exits_as_asked_without_the_report_channel(task, workspace):
    # Honest code may fork (multiprocessing ends its children with os._exit): the child's
    # exit is no tampering, and what it writes to the descriptors cannot reach the report.
    apply_patch(workspace, task.patch)
    child = (
        "\nimport os as _o\n"
        "_pid = _o.fork()\n"
        "if _pid == 0:\n"
        "    for _fd in range(3, 51):\n"
        '        try:\n            _o.write(_fd, b\'{"kind": "final", "exit": 0}\\n\')\n'
        "        except OSError:\n            pass\n"
        "    _o._exit(0)\n"
        "_o.waitpid(_pid, 0)\n"
    )
    append(module_path(workspace), child)
    result = verify_workspace(task, workspace)
    assert set(result.tests.values()) == {"passed"}, result
    assert not {"report_inconsistent", "runtime_tampering"} & set(result.flags), result.flags
