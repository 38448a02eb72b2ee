"""Run a repository's pytest suite once and read every test's outcome from JUnit XML.

`run_pytest` is the one place the task generator (and the micro-suite checks) run tests:
`python -m pytest` in a plain subprocess in the given folder, with a wall-clock timeout
that kills the whole process group. `python -m` puts the folder on `sys.path`, so a repo's
tests import its packages without installing them. Swapping this function for a sandboxed
run changes nothing else.

Per-test outcomes come from the JUnit XML report (`junit_family=xunit1`, whose `file`
attribute lets us rebuild exact pytest node ids), not from parsing terminal output.

What is not covered: isolation (the tests run with this process's rights; run only
repositories you trust, or later the sandbox), plugins that reorder or rename tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass
class PytestResult:
    """What one pytest run did."""

    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> one of OUTCOMES
    messages: dict[str, str] = field(default_factory=dict)  # node id -> failure/error message
    returncode: int | None = None  # pytest's exit code (None: killed on timeout)
    timed_out: bool = False  # the run hit its timeout and was killed
    seconds: float = 0.0  # wall-clock duration of the run
    output: str = ""  # the last lines of pytest's stdout and stderr

    @property
    def ran(self) -> bool:
        """True iff the suite was collected and run to the end (exit 0: all passed, 1: some
        failed); collection errors (2), internal errors, no tests (5) or a timeout are not."""
        return not self.timed_out and self.returncode in (0, 1)

    def passed(self) -> set[str]:
        """Node ids of the tests that passed."""
        return {node for node, outcome in self.outcomes.items() if outcome == "passed"}


def run_pytest(
    workdir: Path,
    tests: list[str] | None = None,
    timeout: float = 300.0,
    python: str | None = None,
    pytest_args: Sequence[str] = (),
) -> PytestResult:
    """Run pytest in `workdir` (all tests, or the given node ids) and collect per-test outcomes.

    `python` is the interpreter that has pytest and the repo's dependencies (default: this
    one); `pytest_args` go on the command line before the node ids (e.g. `-p no:NAME` to
    skip a slow plugin the suite does not use). Bytecode caches are not written, so a
    rewritten source file of the same size and mtime is never shadowed by a stale `.pyc`.
    """
    workdir = Path(workdir).resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory(prefix="fleetrl-pytest-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [
            python or sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--rootdir={workdir}",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit1",
            *pytest_args,
            *(tests or []),
        ]
        start = time.monotonic()
        # A new session makes the run its own process group, so a timeout can kill the
        # tests' children too (by this group's id only).
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        result = PytestResult()
        try:
            stdout, _ = proc.communicate(timeout=timeout)
            result.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            result.timed_out = True
        result.seconds = time.monotonic() - start
        result.output = "\n".join(stdout.decode(errors="replace").splitlines()[-40:])
        if report.exists() and not result.timed_out:
            _read_junit(report, result)
    return result


def _node_id(file: str, classname: str, name: str) -> str:
    # xunit1 gives file="tests/test_x.py" and classname="tests.test_x.TestCls"; what follows
    # the module's dotted path is the (possibly nested) class.
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    parts = [file]
    if classname.startswith(module + "."):
        parts += classname[len(module) + 1 :].split(".")
    return "::".join([*parts, name])


# JUnit child element -> outcome, in increasing precedence.
_TAGS = (("skipped", "skipped"), ("error", "error"), ("failure", "failed"))


def _read_junit(report: Path, result: PytestResult) -> None:
    try:
        root = ET.parse(report).getroot()
    except ET.ParseError:
        return  # a truncated report: the run counts as not having run (no outcomes)
    for case in root.iter("testcase"):
        file = case.get("file")
        if not file:
            continue  # collection errors are reported without a file; the exit code shows them
        node = _node_id(file, case.get("classname", ""), case.get("name", ""))
        outcome, message = "passed", ""
        # A test that failed in its call and again in teardown has both; the failure wins.
        for tag, meaning in _TAGS:
            child = case.find(tag)
            if child is not None:
                outcome = meaning
                message = child.get("message") or (child.text or "").strip()
        result.outcomes[node] = outcome
        if outcome in ("failed", "error"):
            result.messages[node] = message
