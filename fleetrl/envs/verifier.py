"""The verifier: a reward the agent cannot talk its way into.

    agent's changes ─▶ anti-cheat checks (paths, code, tool log) ─▶ flags
          │
          └─▶ non-test files only ─▶ fresh sandbox over the pristine repository
                 ─▶ hidden tests restored from test_patch ─▶ FAIL_TO_PASS + PASS_TO_PASS
                 ─▶ per-test outcomes from the report plugin ─▶ reward 1 iff all pass, no flag

Grading never happens in the agent's sandbox: the agent's edits to non-test files are
copied into a new copy-on-write view of the repository at its base commit, the hidden test
files are put in place by `git apply` of the task's `test_patch`, and pytest runs there
with no network. Test files, conftest.py and test-run configuration the agent touched are
not applied (and flagged).

Per-test results do not come from pytest's output: a plugin outside the workspace (bound
read-only, imported under a random module name so no file of the agent's can shadow it)
writes one line per test phase, each signed with a per-run key that the plugin removes
from the environment before any test module is imported. Lines with a bad signature are
ignored; a test without a passing record counts as not passed.

Identical submissions are graded once: the hidden tests' outcomes are kept per task and
set of applied files (`OutcomeCache`), since the N samples of a group often end in the same
diff (about 70 % of the episodes of an RL run repeat one of their group's). A grading
that timed out is not kept (its outcome may depend on load), and the anti-cheat checks
run for every submission.

What is not covered: tests that need the network or services; non-pytest test runners;
tests that need third-party pytest plugins (only pytest's own plugins are loaded); flaky
tests (a cached outcome repeats whichever result the first grading saw).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetrl.envs import anticheat
from fleetrl.envs.cache import cache_dir
from fleetrl.envs.sandbox import Limits, Sandbox, open_sandbox
from fleetrl.envs.workspace import ensure_repo
from fleetrl.types import Task

# Files that are never part of a change: VCS state and interpreter caches.
_IGNORED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
PLUGIN_VERSION = "1"
_PLUGIN = """
import hashlib, hmac, json, os

_KEY = os.environ.pop("FLEETRL_REPORT_KEY", "").encode()
_OUT = open(os.environ.pop("FLEETRL_REPORT_PATH"), "a", encoding="utf-8")


def pytest_runtest_logreport(report):
    line = json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome})
    mac = hmac.new(_KEY, line.encode(), hashlib.sha256).hexdigest()
    _OUT.write(line + "\\t" + mac + "\\n")
    _OUT.flush()
"""

Changes = dict[str, tuple[bytes | None, bytes | None]]  # path -> (base bytes, new bytes)


class VerifierError(RuntimeError):
    """The task itself could not be graded (its test_patch does not apply, ...)."""


@dataclass
class VerifyResult:
    """The grade of one submission."""

    reward: float  # 1.0 iff every FAIL_TO_PASS and PASS_TO_PASS test passed and no flag
    tests: dict[str, str]  # node id -> passed | failed | error | skipped | missing | timeout
    flags: list[str]  # anti-cheat flags raised (any one forces reward 0)
    duration_s: float  # wall time of the grading
    applied: list[str] = field(default_factory=list)  # agent files applied to the copy

    def to_json(self) -> dict[str, Any]:
        """The `fleetrl verify --json` document."""
        return {
            "reward": self.reward,
            "tests": self.tests,
            "flags": self.flags,
            "duration_s": self.duration_s,
        }


def _files(root: Path) -> dict[str, Path]:
    out = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _IGNORED_DIRS]
        for name in names:
            if not name.endswith((".pyc", ".pyo")):
                path = Path(dirpath) / name
                out[path.relative_to(root).as_posix()] = path
    return out


def workspace_changes(base: Path, workspace: Path) -> Changes:
    """What differs between a workspace directory and the repository it started from."""
    before, after = _files(base), _files(workspace)
    changes: Changes = {}
    for path in sorted(before.keys() | after.keys()):
        old = before[path].read_bytes() if path in before else None
        new = after[path].read_bytes() if path in after else None
        if old != new:
            changes[path] = (old, new)
    return changes


def sandbox_changes(sandbox: Sandbox, base: Path) -> Changes:
    """What the agent changed in its sandbox, relative to the base repository."""
    changes: Changes = {}
    for change in sandbox.changes():
        if set(Path(change.path).parts) & _IGNORED_DIRS:
            continue
        old_path = base / change.path
        old = old_path.read_bytes() if change.kind != "added" and old_path.is_file() else None
        new = None if change.kind == "deleted" else sandbox.read_file(change.path)
        changes[change.path] = (old, new)
    return changes


def _plugin_dir() -> Path:
    """A directory holding the report plugin, outside every workspace."""
    directory = cache_dir() / f"verifier-plugin-{PLUGIN_VERSION}"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _read_report(text: str, key: bytes) -> dict[str, str]:
    """Per-test outcomes from signed report lines: passed only if every phase passed."""
    outcomes: dict[str, str] = {}
    for line in text.splitlines():
        record, _, mac = line.rpartition("\t")
        expected = hmac.new(key, record.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected):
            continue
        entry = json.loads(record)
        node, outcome, when = entry["nodeid"], entry["outcome"], entry["when"]
        if outcome == "failed":
            outcomes[node] = "failed" if when == "call" else "error"
        elif outcome == "skipped":
            outcomes.setdefault(node, "skipped")
        elif when == "call":
            outcomes.setdefault(node, "passed")
    return outcomes


def _hidden_test_sources(task: Task) -> list[str]:
    """The hidden test files' added lines, read from test_patch (for the literal checks)."""
    lines = [
        line[1:]
        for line in task.test_patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return ["\n".join(lines)]


def _run_hidden_tests(
    task: Task, repo: Path, applied: Changes, limits: Limits, timeout: float
) -> dict[str, str]:
    """Outcome of every graded test in a fresh sandbox holding base + applied changes."""
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    plugin = _plugin_dir()
    module = f"fleetrl_report_{secrets.token_hex(8)}"
    (plugin / f"{module}.py").write_text(_PLUGIN)
    key = secrets.token_hex(16)
    report = f"/tmp/{module}.jsonl"
    ro_paths = sorted({sys.prefix, sys.base_prefix, str(plugin)})
    try:
        with open_sandbox(repo, limits=limits, ro_paths=ro_paths) as sandbox:
            for path, (_, new) in applied.items():
                if new is None:
                    sandbox.exec(["rm", "-f", "--", path])
                else:
                    sandbox.write_file(path, new)
            if task.test_patch.strip():
                patch_name = f".{module}.patch"
                sandbox.write_file(patch_name, task.test_patch)
                applied_tests = sandbox.exec(
                    ["git", "apply", "--whitespace=nowarn", patch_name], timeout=60
                )
                sandbox.exec(["rm", "-f", patch_name])
                if not applied_tests.ok:
                    raise VerifierError(
                        f"{task.instance_id}: test_patch does not apply: {applied_tests.stderr}"
                    )
            env = {
                "PYTHONPATH": str(plugin),
                "PYTHONDONTWRITEBYTECODE": "1",
                # Only pytest's own plugins and the report plugin: whatever the host's
                # Python has installed (hypothesis, anyio, ...) is not the task's, and
                # loading it doubled the cost of a grading (0.28 s -> 0.13 s per run).
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "FLEETRL_REPORT_KEY": key,
                "FLEETRL_REPORT_PATH": report,
            }
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            argv += ["-p", module, "--", *tests]
            run = sandbox.exec(argv, timeout=timeout, env=env)
            written = sandbox.exec(["cat", report])
    finally:
        (plugin / f"{module}.py").unlink(missing_ok=True)
    outcomes = _read_report(written.stdout if written.ok else "", key.encode())
    missing = "timeout" if run.timed_out else "missing"
    return {test: outcomes.get(test, missing) for test in tests}


class OutcomeCache:
    """Hidden-test outcomes by submission, shared by the threads of a process.

    A submission being graded is graded once: other threads asking for the same key wait
    for its result rather than start a second pytest.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._done: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._running: dict[str, threading.Event] = {}

    def outcomes(self, key: str, grade: Callable[[], dict[str, str]]) -> dict[str, str]:
        """The outcomes stored under `key`, or those `grade()` returns (then stored)."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return dict(self._done[key])
                running = self._running.get(key)
                if running is None:
                    running = self._running[key] = threading.Event()
                    break
            running.wait()  # then look again; if that grading failed, grade here
        try:
            tests = grade()
            with self._lock:
                self.misses += 1
                if "timeout" not in tests.values():
                    self._done[key] = tests
                    while len(self._done) > self.capacity:
                        self._done.popitem(last=False)
            return dict(tests)
        finally:
            with self._lock:
                del self._running[key]
            running.set()


OUTCOMES = OutcomeCache()


def submission_key(task: Task, applied: Changes) -> str:
    """What the hidden tests' outcomes depend on: the task's tests and the applied files."""
    digest = hashlib.sha256()
    header = [task.instance_id, task.base_commit, task.test_patch]
    digest.update(json.dumps([*header, task.FAIL_TO_PASS, task.PASS_TO_PASS]).encode())
    for path in sorted(applied):
        new = applied[path][1]
        digest.update(f"\0{path}\0{-1 if new is None else len(new)}\0".encode())
        digest.update(new or b"")
    return digest.hexdigest()


def verify(
    task: Task,
    changes: Changes,
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    limits: Limits | None = None,
    timeout: float = 120.0,
) -> VerifyResult:
    """Grade the agent's `changes` to `task` (and its tool calls, when known)."""
    start = time.monotonic()
    repo = ensure_repo(task)
    flags = anticheat.path_flags(changes)
    graded = {
        path: change
        for path, change in changes.items()
        if not (anticheat.is_test_file(path) or anticheat.is_config_file(path))
    }
    facts = anticheat.test_facts(_hidden_test_sources(task))
    as_text = {
        path: tuple(None if b is None else b.decode("utf-8", "replace") for b in change)
        for path, change in graded.items()
    }
    flags |= anticheat.code_flags(as_text, facts)
    flags |= anticheat.episode_flags(tool_calls or [])
    tests = OUTCOMES.outcomes(
        submission_key(task, graded),
        lambda: _run_hidden_tests(task, repo, graded, limits or Limits(wall_s=timeout), timeout),
    )
    passed = bool(tests) and all(outcome == "passed" for outcome in tests.values())
    return VerifyResult(
        reward=1.0 if passed and not flags else 0.0,
        tests=tests,
        flags=sorted(flags),
        duration_s=time.monotonic() - start,
        applied=sorted(graded),
    )


def verify_workspace(task: Task, workspace: Path, timeout: float = 120.0) -> VerifyResult:
    """Grade a workspace directory (e.g. one written by `fleetrl tasks checkout`)."""
    if not workspace.is_dir():
        raise FileNotFoundError(f"workspace {workspace} is not a directory")
    return verify(task, workspace_changes(ensure_repo(task), workspace), timeout=timeout)
