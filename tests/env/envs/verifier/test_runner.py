"""The graded run, for real: the graded code cannot shadow what the grader imports, holds no
secret, cannot rewrite the hidden tests, introspect the process or rebind the runner's
machinery."""

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


SHADOWS = ["json.py", "pluggy.py", "_pytest/__init__.py", "hashlib.py", "pytest.py"]


@pytest.mark.parametrize("shadow", SHADOWS)
def test_workspace_files_cannot_shadow_what_the_grader_imports(task, workspace, shadow):
    # If the grader imported the agent's copy, the run would break (gold fix) or pass
    # (unfixed code): neither happens, the real module is found first.
    apply_patch(workspace, task.patch)
    path = workspace / shadow
    path.parent.mkdir(exist_ok=True)
    path.write_text("raise ImportError('the grader imported the workspace copy')\n")
    result = verify_workspace(task, workspace)
    assert set(result.tests.values()) == {"passed"}, result
    assert not {"report_inconsistent", "grader_error"} & set(result.flags)


def test_the_graded_process_holds_no_secret(task, workspace):
    # The fix only works if the graded process's environment holds nothing but the
    # sandbox's fixed variables: no key, no report path.
    apply_patch(workspace, task.patch)
    allowed = {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "TERM",
        "USER",
        "PWD",
        "PYTHONDONTWRITEBYTECODE",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        "PYTEST_CURRENT_TEST",
        "PYTEST_VERSION",
    }
    append(
        module_path(workspace),
        f"\nimport os as _os\n_fixed = nkims\n\n\ndef nkims(j):\n"
        f"    return _fixed(j) if set(_os.environ) <= set({sorted(allowed)!r}) else None\n",
    )
    result = verify_workspace(task, workspace)
    assert result.reward == 1, result
    # Reading the process's environment through /proc is refused and flagged.
    append(module_path(workspace), "\n_ENV = open('/proc/self/environ', 'rb').read()\n")
    result = verify_workspace(task, workspace)
    assert result.reward == 0 and "runtime_tampering" in result.flags, result


def guarded(code: str, caught: str) -> str:
    """`code` wrapped in try/except `caught`, as an agent hiding its attempt would write it."""
    body = "".join(f"    {line}\n" for line in code.splitlines())
    return f"\ntry:\n{body}except {caught}:\n    pass\n"


REWRITES = [
    ("open for writing", "open('test_nkims.py', 'w').write('def test_1():\\n    pass\\n')"),
    ("rename over it",
     "import os\nopen('/tmp/t.py', 'w').write('')\nos.replace('/tmp/t.py', 'test_nkims.py')"),
    ("a child process", "import subprocess\nsubprocess.run(['sh', '-c', 'echo > test_nkims.py'])"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "code"), REWRITES, ids=[r[0] for r in REWRITES])
def test_rewriting_the_hidden_tests_while_graded_fails(task, workspace, name, code):
    # The unfixed code tries to replace the hidden test file when the test imports it:
    # the workspace is read-only for the test run, and the attempt itself is flagged
    # when it happens in the graded process.
    append(module_path(workspace), guarded(code, "Exception"))
    result = verify_workspace(task, workspace)
    assert result.reward == 0 and "passed" not in result.tests.values(), result
    if name != "a child process":
        assert "runtime_tampering" in result.flags, result.flags


INTROSPECTION = [
    "import gc\n_objs = gc.get_objects()",
    "import sys\n_frames = sys._current_frames()",
    "import ctypes\n_libc = ctypes.CDLL(None)",
    "import sys\nsys.settrace(None)",
    "import os, signal\nos.kill(os.getpid(), signal.SIGCONT)",
]


@pytest.mark.parametrize("code", INTROSPECTION, ids=lambda c: c.split("\n")[1][:24])
def test_introspection_in_the_graded_process_is_refused(task, workspace, code):
    apply_patch(workspace, task.patch)
    append(module_path(workspace), guarded(code, "RuntimeError"))
    result = verify_workspace(task, workspace)
    assert result.reward == 0 and "runtime_tampering" in result.flags, result.flags


def test_rebinding_the_runners_machinery_is_flagged(task, workspace):
    apply_patch(workspace, task.patch)
    append(module_path(workspace), "\nimport os as _os\n_os.write = _os.write.__call__\n")
    result = verify_workspace(task, workspace)
    assert result.reward == 0 and "runtime_tampering" in result.flags, result.flags
