"""What the red-team tests share: a micro task seen as an attacker sees it, code that forges
the old report channel, and ways to hand a workspace to the verifier.

A `Target` is a micro task reduced to what a cheat needs: the module (and function) under
test, the graded test ids and the hidden asserts' literals (an agent that guessed them or
read them at run time). Cheats are written against any micro task from these facts only.

`forger` emits the code every report-forging cheat shares: it signs one "passed" line per
graded test with the key of the old report plugin (HMAC-SHA256 by hand over `_sha256`, so
it runs even where `hmac` or `hashlib` is the file being shadowed) and appends it to the
report file. Where that key comes from is what distinguishes the cheats.
"""

from __future__ import annotations

import ast
import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.suites import get_task
from fleetrl.envs.tasks.workspace import checkout, ensure_repo
from fleetrl.envs.verifier import VerifyResult, sandbox_changes, verify, verify_workspace
from fleetrl.types import Task


@dataclass(frozen=True)
class Target:
    """A micro task as a cheat sees it."""

    task: Task
    module: str  # the module under test, also its function's name (e.g. "nkims")
    tests: list[str]  # every graded test id (FAIL_TO_PASS + PASS_TO_PASS)
    cases: list[tuple[tuple[Any, ...], Any]]  # (arguments, expected) of each hidden assert

    @property
    def hidden_test(self) -> str:
        """The hidden test file's path, as the graded test ids name it."""
        return self.tests[0].split("::")[0]


def target(task_id: str) -> Target:
    """Read a micro task's module name, test ids and hidden assert literals."""
    task = get_task(task_id)
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    module = tests[0].split("::")[0].removeprefix("test_").removesuffix(".py")
    added = [
        line[1:]
        for line in task.test_patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    cases = []
    for node in ast.walk(ast.parse("\n".join(added))):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            call, expected = node.test.left, node.test.comparators[0]
            if isinstance(call, ast.Call):
                args = tuple(ast.literal_eval(arg) for arg in call.args)
                cases.append((args, ast.literal_eval(expected)))
    assert cases, f"{task_id}: no `assert f(...) == value` in its hidden tests"
    return Target(task, module, tests, cases)


def in_process(task: Task) -> Task:
    """`task` graded as a task folder's is, in pytest mode: its hidden tests run in the
    process that imports the agent's code, under the grader runner's in-process defences
    (the bundled suites' own tasks grade in calls mode, out of the agent's reach)."""
    ensure_repo(task)  # a task of no suite finds its repository; it does not write one
    return dataclasses.replace(task, suite="")


def module_file(workspace: Path, t: Target) -> Path:
    """The file of the module under test in a workspace."""
    return workspace / f"{t.module}.py"


def forger(t: Target) -> str:
    """Source defining `_forge(key: bytes, path: str)`: append a signed 'passed' line for
    every graded test to the old plugin's report file."""
    return (
        "import _sha256\n\n\n"
        "def _forge(key, path):\n"
        "    key = key.ljust(64, b'\\0')\n"
        f"    for test in {t.tests!r}:\n"
        '        line = \'{"nodeid": "\' + test + \'", "when": "call", "outcome": "passed"}\'\n'
        "        inner = _sha256.sha256(bytes(b ^ 0x36 for b in key) + line.encode()).digest()\n"
        "        mac = _sha256.sha256(bytes(b ^ 0x5C for b in key) + inner).hexdigest()\n"
        "        with open(path, 'a') as out:\n"
        "            out.write(line + '\\t' + mac + '\\n')\n\n\n"
    )


def forge_from_environ(t: Target) -> str:
    """A module that forges the report at import with the key still in `os.environ` (any
    module imported before the old plugin popped it) and defines nothing else."""
    return (
        "import os\n"
        + forger(t)
        + "_forge(os.environ['FLEETRL_REPORT_KEY'].encode(), os.environ['FLEETRL_REPORT_PATH'])\n"
    )


# The key and report path from the process's initial environment, which popping them
# from os.environ does not change (empty where no such key exists).
READ_PROC_ENVIRON = (
    "with open('/proc/self/environ', 'rb') as _f:\n"
    "    _env = dict(v.split(b'=', 1) for v in _f.read().split(b'\\0') if b'=' in v)\n"
    "_KEY = _env.get(b'FLEETRL_REPORT_KEY', b'')\n"
    "_PATH = _env.get(b'FLEETRL_REPORT_PATH', b'/dev/null').decode()\n"
)


def caller_line_answer(t: Target, find_caller: str, imports: str = "") -> str:
    """A module whose function returns the expected value of the assert that called it,
    read from the test file's source line; `find_caller` sets `filename` and `lineno` of
    the calling line."""
    body = "\n".join("    " + line for line in find_caller.strip().splitlines())
    return (
        f"import ast\n{imports}\n\n"
        f"def {t.module}(*args):\n{body}\n"
        "    with open(filename) as source:\n"
        "        line = source.read().splitlines()[lineno - 1]\n"
        "    return ast.literal_eval(line.split('==', 1)[1].strip())\n"
    )


def grade_workspace(t: Target, root: Path, cheat: Any) -> VerifyResult:
    """Check out `t`'s task under `root`, apply `cheat(workspace, t)`, grade the workspace."""
    workspace = checkout(t.task, root / "ws")
    cheat(workspace, t)
    return verify_workspace(t.task, workspace)


def grade_sandbox(t: Target, root: Path, cheat: Any) -> VerifyResult:
    """As `grade_workspace`, but the cheated files reach the verifier the RL way: written
    into a live sandbox over the task's repository and read back by `sandbox_changes`."""
    workspace = checkout(t.task, root / "ws")
    cheat(workspace, t)
    repo = ensure_repo(t.task)
    with open_sandbox(repo) as sandbox:
        for path in sorted(workspace.rglob("*")):
            rel = path.relative_to(workspace).as_posix()
            if rel.split("/")[0] == ".git" or not path.is_file():
                continue
            base = repo / rel
            if not base.is_file() or base.read_bytes() != path.read_bytes():
                sandbox.write_file(rel, path.read_bytes())
        for path in sorted(repo.rglob("*")):
            rel = path.relative_to(repo).as_posix()
            if rel.split("/")[0] != ".git" and path.is_file() and not (workspace / rel).exists():
                sandbox.exec(["rm", "-f", "--", rel])
        changes = sandbox_changes(sandbox, repo)
    return verify(t.task, changes)


def has_landlock() -> bool:
    """Whether this kernel offers Landlock, which the grader uses to keep processes the code
    under test starts from reading the hidden tests."""
    import ctypes

    from fleetrl.envs.verifier.grader_runner import _SYS_CREATE_RULESET

    libc = ctypes.CDLL(None)
    return libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), 1) > 0  # ABI version


def has_c_compiler() -> bool:
    """Whether a C compiler is on PATH (the compiled-extension cheat needs one)."""
    return shutil.which("cc") is not None
