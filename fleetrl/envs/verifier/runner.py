"""The graded run: the hidden tests under the grader runner, in a fresh sandbox.

Contract: `run_hidden_tests` opens a fresh sandbox over the pristine repository, restores
the hidden tests there with the grading's honeypot tests beside them
(`fleetrl.envs.verifier.honeypots`; hashed, before any file of the agent's lands), pins pytest's
configuration to the pristine repository's own (or the runner's empty one), writes the
applied changes in, runs `fleetrl/envs/verifier/grader_runner.py` on them (python -I, a read-only
workspace under bwrap, only pytest's own plugins) and returns what `judge_report` makes of
its report. A task whose suite grades in calls mode (`fleetrl.envs.tasks.suites.Suite.grading`)
goes to `fleetrl.envs.verifier.calls` instead: there the tests run where the agent's code
never does. `runner_dir` is the folder outside every workspace that holds the grading
scripts; `GraderUnavailable` means this Python cannot grade at all (no pytest).

What is not covered: tests that need the network or services; non-pytest test runners;
third-party pytest plugins.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from fleetrl.envs.sandbox import Limits, Sandbox, open_sandbox
from fleetrl.envs.sandbox.bwrap import BwrapSandbox
from fleetrl.envs.tasks.suites import grading_for
from fleetrl.envs.verifier.changes import MAX_FILE_BYTES
from fleetrl.envs.verifier.hidden import hidden_paths, restore_hidden_tests
from fleetrl.envs.verifier.honeypots import Honeypots
from fleetrl.envs.verifier.judge import RunOutcome, judge_report, report_limits
from fleetrl.files import cache_dir
from fleetrl.types import Task

# pytest's configuration files in its own order of precedence (pytest 9), with the section
# that makes a shared file pytest's (None: the file is pytest's whatever it holds).
_PYTEST_CONFIGS = {
    "pytest.toml": None,
    ".pytest.toml": None,
    "pytest.ini": None,
    ".pytest.ini": None,
    "pyproject.toml": b"[tool.pytest",
    "tox.ini": b"[pytest]",
    "setup.cfg": b"[tool:pytest]",
}


class GraderUnavailable(RuntimeError):
    """This Python cannot grade at all (no pytest): every reward would be 0 for a reason that
    is not the agent's, so grading refuses to start."""


# The scripts run by path in grading sandboxes (pytest mode: the first; calls mode: the others).
_SCRIPTS = ("grader_runner.py", "call_grader.py", "call_worker.py", "call_fresh.py")


@cache
def _runner_source() -> tuple[dict[str, bytes], str]:
    """The scripts' bytes and their hash (read, not imported: importing pulls in pytest)."""
    if importlib.util.find_spec("pytest") is None:
        raise GraderUnavailable(
            f"the verifier runs hidden tests with pytest, which {sys.executable} lacks: "
            "pip install pytest"
        )
    sources = {name: (Path(__file__).parent / name).read_bytes() for name in _SCRIPTS}
    digest = hashlib.sha256(b"\0".join(sources.values())).hexdigest()[:16]
    return sources, digest


def runner_dir() -> Path:
    """A folder outside every workspace holding the grading scripts, the empty pytest
    configuration used when the repository has none and an empty folder (the base of calls
    mode's grader sandbox); named by its content's hash, and bound read-only into grading
    sandboxes."""
    sources, digest = _runner_source()
    directory = cache_dir() / f"verifier-runner-{digest}"
    if not (directory / "empty").is_dir():
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.with_name(f".{directory.name}-{os.getpid()}-{threading.get_ident()}")
        staging.mkdir(exist_ok=True)
        for name, source in sources.items():
            (staging / name).write_bytes(source)
        (staging / "pytest.ini").write_text("[pytest]\n")
        (staging / "empty").mkdir(exist_ok=True)  # made last: its presence means complete
        try:
            staging.rename(directory)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(staging)
    return directory


def _pytest_config(sandbox: Sandbox, repo: Path, hidden: set[str]) -> str:
    """The pytest configuration file of the pristine repository (or of test_patch), as the
    sandbox sees it; else the grader's empty one. Called before the agent's files land."""
    for name, section in _PYTEST_CONFIGS.items():
        if not ((repo / name).is_file() or name in hidden):
            continue
        try:
            text = sandbox.read_file(name, max_bytes=MAX_FILE_BYTES)
        except OSError:
            continue
        if section is None or section in text:
            return f"{sandbox.workdir}/{name}"
    return str(runner_dir() / "pytest.ini")


def apply_changes(
    sandbox: Sandbox, repo: Path, applied: Mapping[str, tuple[bytes | None, bytes | None]]
) -> None:
    """Write the agent's files into the grading copy. Deleted paths, and paths where the
    base has a link or a directory (never written through), are removed first."""
    remove = [path for path, (_, new) in applied.items() if new is None or _not_a_file(repo / path)]
    for start in range(0, len(remove), 500):
        sandbox.exec(["rm", "-rf", "--", *remove[start : start + 500]], timeout=60)
    for path, (_, new) in applied.items():
        if new is not None:
            sandbox.write_file(path, new)


def _not_a_file(path: Path) -> bool:
    """Whether the base has something other than a regular file (a link, a folder) there."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def run_hidden_tests(
    task: Task,
    repo: Path,
    applied: Mapping[str, tuple[bytes | None, bytes | None]],
    limits: Limits,
    timeout: float,
) -> RunOutcome:
    """Outcome of every graded test in a fresh sandbox holding base + applied changes, in
    the grading mode of the task's suite (`fleetrl.envs.tasks.suites.grading_for`)."""
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    limits = report_limits(limits, tests)  # every record of the report fits the output cap
    if grading_for(task) == "calls":
        # Imported here: calls mode builds on this module's helpers.
        from fleetrl.envs.verifier.calls import run_calls

        return run_calls(task, repo, applied, limits, timeout)
    hidden = hidden_paths(task)
    runner = runner_dir()
    ro_paths = sorted({sys.prefix, sys.base_prefix, str(runner)})
    with open_sandbox(repo, limits=limits, ro_paths=ro_paths) as sandbox:
        honeypots = Honeypots()  # fresh for this grading, planted before the agent's files
        hashes = restore_hidden_tests(sandbox, task, hidden, honeypots)
        config = _pytest_config(sandbox, repo, hidden)
        apply_changes(sandbox, repo, applied)
        spec = {"rootdir": sandbox.workdir, "config": config, "protected": sorted(hidden)}
        argv = [sys.executable, "-I", "-B", str(runner / "grader_runner.py"), json.dumps(spec)]
        # One argument each (a kernel takes at most 128 KiB in one argument): the graded
        # tests as the copy names them, then the honeypots.
        argv += honeypots.planted.run_ids(tests)
        # Only pytest's own plugins: whatever the host's Python has installed (hypothesis,
        # anyio, ...) is not the task's, and loading it doubled the cost of a grading.
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        if isinstance(sandbox, BwrapSandbox):
            run = sandbox.exec(argv, timeout=timeout, env=env, read_only=True)
        else:
            run = sandbox.exec(argv, timeout=timeout, env=env)
    return judge_report(run, tests, hashes, honeypots.planted)
