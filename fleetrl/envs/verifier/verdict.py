"""The verdict on one submission: anti-cheat screening, the graded run, the reward.

Contract: `verify` screens the agent's changes (the anti-cheat flags, and the changes that
may be applied: no test file, nothing where a hidden test goes, no configuration, no
compiled artefact), gets the hidden tests' outcome through the process's outcome cache (the
anti-cheat checks still run for every submission), and returns a `VerifyResult`: reward 1
iff every graded test passed and no flag was raised (a honeypot test that passed along
with the test it copies, which every correct solution fails, is the flag `tampering`). It
never raises for the agent's content (a check or a grading that fails on it is
`grader_error`); only `VerifierError` (the task is broken), `SandboxUnavailable` and
`GraderUnavailable` (this machine cannot grade: no sandbox, no pytest) get through.
`verify_workspace` grades a workspace directory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetrl.envs import anticheat
from fleetrl.envs.sandbox import Limits, SandboxUnavailable
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import cache
from fleetrl.envs.verifier.changes import Changes, workspace_changes
from fleetrl.envs.verifier.hidden import (
    VerifierError,
    hidden_paths,
    hidden_test_sources,
    touches_hidden,
)
from fleetrl.envs.verifier.runner import GraderUnavailable, run_hidden_tests
from fleetrl.types import Task

log = logging.getLogger(__name__)


@dataclass
class VerifyResult:
    """The grade of one submission."""

    reward: float  # 1.0 iff every graded test passed, no fresh input differed, no flag
    tests: dict[str, str]  # node id -> passed | failed | error | skipped | missing | timeout
    flags: list[str]  # anti-cheat flags raised (any one forces reward 0)
    duration_s: float  # wall time of the grading
    applied: list[str] = field(default_factory=list)  # agent files applied to the copy
    # Honeypot tests graded beside the real ones (0: none could be made from this task's
    # tests); one that passed along with the test it copies is the flag `tampering`.
    honeypots: int = 0
    # Calls mode: fresh inputs checked against the gold solution, and where the agent's
    # code answered otherwise (any difference is reward 0).
    fresh_inputs: int = 0
    fresh_differ: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The `fleetrl verify --json` document."""
        return {
            "reward": self.reward,
            "tests": self.tests,
            "flags": self.flags,
            "duration_s": self.duration_s,
            "honeypots": self.honeypots,
            "fresh_inputs": self.fresh_inputs,
            "fresh_differ": self.fresh_differ,
        }


def _screen(
    task: Task,
    changes: Mapping[str, tuple[bytes | None, bytes | None]],
    tool_calls: list[tuple[str, dict[str, Any]]],
) -> tuple[set[str], dict[str, tuple[bytes | None, bytes | None]]]:
    """The anti-cheat flags of a submission and the changes that may be applied."""
    skipped = changes.skipped if isinstance(changes, Changes) else {}
    flags = set(skipped.values()) | anticheat.path_flags([*changes, *skipped], changes)
    hidden = hidden_paths(task)
    graded = {}
    for path, change in changes.items():
        if touches_hidden(path, hidden):
            # A test of the agent's own where a hidden test goes (test_<module>.py is the
            # natural name) is replaced by the hidden one; anything else there (a folder, a
            # package named like a test module) only aims at the hidden tests.
            if not (path in hidden and anticheat.is_test_file(path)):
                flags.add("tests_modified")
        elif not (
            anticheat.is_test_file(path)
            or anticheat.is_config_file(path)
            or anticheat.is_importable_artefact(path)
        ):
            graded[path] = change
    try:
        facts = anticheat.test_facts(hidden_test_sources(task))
        flags |= anticheat.code_flags(graded, facts)
    except Exception:  # a check that cannot judge a file must not pass it, nor crash
        log.exception("%s: an anti-cheat check failed", task.instance_id)
        flags.add("grader_error")
    flags |= anticheat.episode_flags(tool_calls)
    return flags, graded


def verify(
    task: Task,
    changes: Mapping[str, tuple[bytes | None, bytes | None]],
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    limits: Limits | None = None,
    timeout: float = 120.0,
) -> VerifyResult:
    """Grade the agent's `changes` to `task` (and its tool calls, when known).

    Never raises for what the agent's content is; `VerifierError` means the task is
    broken, `SandboxUnavailable` or `GraderUnavailable` that this machine cannot grade at
    all (every reward would be 0 for a reason that is not the agent's).
    """
    start = time.monotonic()
    repo = ensure_repo(task)
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    try:
        flags, graded = _screen(task, changes, tool_calls or [])
        run = cache.OUTCOMES.outcomes(
            cache.submission_key(task, graded),
            lambda: run_hidden_tests(task, repo, graded, limits or Limits(wall_s=timeout), timeout),
        )
    except (VerifierError, SandboxUnavailable, GraderUnavailable):
        raise
    except Exception:
        log.exception("%s: grading failed on the agent's content", task.instance_id)
        return VerifyResult(
            0.0, dict.fromkeys(tests, "missing"), ["grader_error"], time.monotonic() - start
        )
    flags |= run.flags
    passed = bool(run.tests) and all(outcome == "passed" for outcome in run.tests.values())
    passed = passed and not run.fresh_differ
    return VerifyResult(
        reward=1.0 if passed and not flags else 0.0,
        tests=dict(run.tests),
        flags=sorted(flags),
        duration_s=time.monotonic() - start,
        applied=sorted(graded),
        honeypots=len(run.honeypots),
        fresh_inputs=run.fresh_checked,
        fresh_differ=list(run.fresh_differ),
    )


def verify_workspace(task: Task, workspace: Path, timeout: float = 120.0) -> VerifyResult:
    """Grade a workspace directory (e.g. one written by `fleetrl tasks checkout`)."""
    if not workspace.is_dir():
        raise FileNotFoundError(f"workspace {workspace} is not a directory")
    return verify(task, workspace_changes(ensure_repo(task), workspace), timeout=timeout)
