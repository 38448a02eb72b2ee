"""The verifier: a reward the agent cannot talk its way into.

    agent's changes ─▶ anti-cheat checks (paths, code, tool log) ─▶ flags
          │
          └─▶ non-test files only ─▶ fresh sandbox over the pristine repository
                 ─▶ hidden tests restored from test_patch, hashed ─▶ agent's files applied
                 ─▶ grader runner (python -I, read-only workspace) ─▶ JSON lines on stdout
                 ─▶ cross-checked on the host ─▶ reward 1 iff all pass, no flag

Grading never happens in the agent's sandbox. A fresh copy-on-write view of the repository
at its base commit gets the hidden tests first (`git apply` of the task's `test_patch`,
before any file of the agent's is there), and the host hashes them; then the agent's
changes to non-test files are written in. Test files, files where a hidden test goes,
test-run configuration, links, special files, compiled artefacts and oversized files are
never applied (and flagged).

pytest runs under `grader_runner` (read it for what the graded process can and cannot do):
an isolated interpreter that appends the workspace to `sys.path` instead of putting it
first, pytest's configuration pinned to the pristine repository's own (or an empty one), an
audit hook against introspection, and the report written to a private copy of stdout. No
secret exists: the host instead checks the report against what it observes itself.
Exactly one outcome per phase of each expected test, no unknown test, every hidden test
file collected with the hash the host took, a final record whose exit status is the one
the host saw and agrees with the outcomes, and nothing the audit hook refused; anything
else is reward 0 with a flag (`report_inconsistent`, `hidden_tests_changed`,
`runtime_tampering`).

A verdict for every input: names that are not UTF-8, links, FIFOs, huge files, or an
anti-cheat check that fails get a flag, never an exception (`grader_error` for the last);
only a task that cannot be graded at all (its test_patch does not apply to the pristine
repository) raises `VerifierError`. Files are read with `lstat` first and never through a
link on the host, and at most `MAX_FILE_BYTES` each (`MAX_CHANGE_BYTES` in all).

Identical submissions are graded once (`OutcomeCache`), since the N samples of a group often
end in the same diff; a grading that timed out is not kept, and the anti-cheat checks run
for every submission.

What is not covered: tests that need the network or services; non-pytest test runners;
third-party pytest plugins (only pytest's own are loaded); flaky tests (a cached outcome
repeats the first grading's); in the agent's sandbox (`sandbox_changes`), a link that
resolves inside the workspace is read as a copy of its target (the sandbox API reports no
file types); see docs/environments.md for the in-process attacks that remain.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import stat
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fleetrl.envs import anticheat
from fleetrl.envs.cache import cache_dir
from fleetrl.envs.sandbox import ExecResult, Limits, Sandbox, SandboxUnavailable, open_sandbox
from fleetrl.envs.sandbox.bwrap import BwrapSandbox
from fleetrl.envs.workspace import ensure_repo
from fleetrl.types import Task

logger = logging.getLogger(__name__)

# Files that are never part of a change: VCS state and interpreter caches.
_IGNORED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
# A fix is a source edit: no honest change needs a bigger file, and reading a 64 MiB file
# whole tripled the grader's memory. Larger changed files are not read (`oversized_file`).
MAX_FILE_BYTES = 4 << 20
MAX_CHANGE_BYTES = 64 << 20  # all changed files of one submission together
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
_PATCH_NAME = ".fleetrl-hidden-tests.patch"


class Changes(dict[str, tuple[bytes | None, bytes | None]]):
    """The agent's changes, path -> (base bytes, new bytes); None = absent (or unread).

    `skipped` holds the changed paths that cannot be carried into a grading, with the flag
    each raises: `special_file` (a link, FIFO, socket or device) or `oversized_file`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.skipped: dict[str, str] = {}


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


@dataclass(frozen=True)
class RunOutcome:
    """What one run of the hidden tests established (the unit `OutcomeCache` keeps)."""

    tests: dict[str, str]  # node id -> outcome, as in VerifyResult.tests
    flags: frozenset[str] = frozenset()  # what the host's cross-checks of the report found


def _read_regular(path: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """Bytes of `path` if it is a regular file of at most `limit` bytes, reached without
    following a final link (FIFOs do not block: opened non-blocking); else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _same_bytes(a: str, b: str) -> bool:
    """Whether two regular files hold the same bytes, compared in chunks."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        with open(os.open(a, flags), "rb") as fa, open(os.open(b, flags), "rb") as fb:
            while True:
                chunk = fa.read(1 << 20)
                if chunk != fb.read(1 << 20):
                    return False
                if not chunk:
                    return True
    except OSError:
        return False


def _same_link(a: str, b: str) -> bool:
    """Whether both paths are links with the same target (read, never followed)."""
    try:
        return os.readlink(a) == os.readlink(b)
    except OSError:
        return False


def _tree(root: str) -> dict[str, os.stat_result]:
    """lstat of every non-directory under `root`, by relative path; links are listed, never
    followed; names that are not UTF-8 come back with surrogate escapes."""
    out: dict[str, os.stat_result] = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _IGNORED_DIRS]
        for name in [*names, *dirs]:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                out[os.path.relpath(path, root).replace(os.sep, "/")] = st
    return out


def workspace_changes(base: Path, workspace: Path) -> Changes:
    """What differs between a workspace directory and the repository it started from.

    Nothing in the workspace is followed or read whole before its lstat says it is a
    regular file within the size limits.
    """
    before, after = _tree(str(base)), _tree(str(workspace))
    changes, budget = Changes(), MAX_CHANGE_BYTES
    for path in sorted(before.keys() | after.keys()):
        old_st, new_st = before.get(path), after.get(path)
        old_path, new_path = os.path.join(base, path), os.path.join(workspace, path)
        old_regular = old_st is not None and stat.S_ISREG(old_st.st_mode)
        if new_st is None:
            changes[path] = (_read_regular(old_path) if old_regular else None, None)
        elif not stat.S_ISREG(new_st.st_mode):
            if not (old_st is not None and _same_link(old_path, new_path)):
                changes.skipped[path] = "special_file"
        elif new_st.st_size > min(MAX_FILE_BYTES, budget):
            unchanged = old_st is not None and old_regular and old_st.st_size == new_st.st_size
            if not (unchanged and _same_bytes(old_path, new_path)):
                changes.skipped[path] = "oversized_file"
        else:
            new = _read_regular(new_path)
            old = _read_regular(old_path) if old_regular else None
            if new is None:
                changes.skipped[path] = "special_file"  # replaced while being read
            elif not (old_regular and old == new):
                budget -= len(new)
                changes[path] = (old, new)
    return changes


def sandbox_changes(sandbox: Sandbox, base: Path) -> Changes:
    """What the agent changed in its sandbox, relative to the base repository.

    Reads go through the sandbox, which never leaves the workspace: a link that points out
    of it (or at a directory) cannot be read and is flagged `special_file`.
    """
    changes, budget = Changes(), MAX_CHANGE_BYTES
    for change in sandbox.changes():
        if set(Path(change.path).parts) & _IGNORED_DIRS:
            continue
        old = None if change.kind == "added" else _read_regular(str(base / change.path))
        if change.kind == "deleted":
            changes[change.path] = (old, None)
            continue
        limit = min(MAX_FILE_BYTES, budget)
        try:
            new = sandbox.read_file(change.path, max_bytes=limit + 1)
        except OSError:
            changes.skipped[change.path] = "special_file"
            continue
        if len(new) > limit:
            changes.skipped[change.path] = "oversized_file"
        else:
            budget -= len(new)
            changes[change.path] = (old, new)
    return changes


class GraderUnavailable(RuntimeError):
    """This Python cannot grade at all (no pytest): every reward would be 0 for a reason that
    is not the agent's, so grading refuses to start."""


@cache
def _runner_source() -> tuple[bytes, str]:
    """The runner's bytes and their hash (read, not imported: importing pulls in pytest)."""
    if importlib.util.find_spec("pytest") is None:
        raise GraderUnavailable(
            f"the verifier runs hidden tests with pytest, which {sys.executable} lacks: "
            "pip install pytest"
        )
    source = Path(__file__).with_name("grader_runner.py").read_bytes()
    return source, hashlib.sha256(source).hexdigest()[:16]


def runner_dir() -> Path:
    """A folder outside every workspace holding the grader runner and the empty pytest
    configuration used when the repository has none; named by its content's hash, and
    bound read-only into grading sandboxes."""
    source, digest = _runner_source()
    directory = cache_dir() / f"verifier-runner-{digest}"
    if not (directory / "grader_runner.py").is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.with_name(f".{directory.name}-{os.getpid()}-{threading.get_ident()}")
        staging.mkdir(exist_ok=True)
        (staging / "grader_runner.py").write_bytes(source)
        (staging / "pytest.ini").write_text("[pytest]\n")
        try:
            staging.rename(directory)
        except OSError:  # another process won the race; its copy is identical
            for name in ("grader_runner.py", "pytest.ini"):
                (staging / name).unlink()
            staging.rmdir()
    return directory


def _unquote(path: str) -> str:
    """A path as git writes it in a patch header ("C-quoted" when unusual)."""
    if not path.startswith('"'):
        return path
    raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw.encode("latin-1").decode("utf-8", "surrogateescape")


def hidden_paths(task: Task) -> set[str]:
    """Files the hidden tests consist of: those test_patch writes and those test ids name."""
    paths = {test.split("::")[0] for test in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]}
    for line in task.test_patch.splitlines():
        if line.startswith("+++ ") and line[4:].strip() != "/dev/null":
            paths.add(_unquote(line[4:].strip()).removeprefix("b/"))
    return paths


def _touches(path: str, hidden: set[str]) -> bool:
    """Whether writing `path` would replace a hidden file, stand where one goes, or sit in
    a package named like a hidden test module (a package is imported before a module)."""
    for h in hidden:
        if path == h or path.startswith(h + "/") or h.startswith(path + "/"):
            return True
        if h.endswith(".py") and (path == h[:-3] or path.startswith(h[:-3] + "/")):
            return True
    return False


def _hidden_test_sources(task: Task) -> list[str]:
    """The hidden test files' added lines, read from test_patch (for the literal checks)."""
    lines = [
        line[1:]
        for line in task.test_patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return ["\n".join(lines)]


def _restore_hidden_tests(sandbox: Sandbox, task: Task, hidden: set[str]) -> dict[str, str]:
    """Apply test_patch to the pristine copy; the sha256 of every hidden file after it."""
    if task.test_patch.strip():
        sandbox.write_file(_PATCH_NAME, task.test_patch)
        applied = sandbox.exec(
            f"git apply --whitespace=nowarn {_PATCH_NAME}; s=$?; rm -f {_PATCH_NAME}; exit $s",
            timeout=60,
        )
        if not applied.ok:
            raise VerifierError(f"{task.instance_id}: test_patch does not apply: {applied.stderr}")
    hashes = {}
    for path in hidden:
        try:
            hashes[path] = hashlib.sha256(sandbox.read_file(path)).hexdigest()
        except OSError:
            continue  # not a file: pytest will not find those tests
    return hashes


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


def _apply(
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


def _outcome(phases: dict[str, str]) -> str:
    """One test's outcome from its phases' (setup, call, teardown) pytest outcomes."""
    setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
    if setup == "failed" or teardown == "failed":
        return "error"
    if setup == "skipped" or call == "skipped":
        return "skipped"
    if setup is None or call is None or teardown is None:
        return "missing"
    return "passed" if call == "passed" else "failed"


def judge_report(run: ExecResult, tests: list[str], hashes: dict[str, str]) -> RunOutcome:
    """Per-test outcomes from the runner's records, cross-checked against what the host saw.

    The records are trusted only as far as they agree with each other and with the host:
    any malformed, duplicate or unknown line, a final record missing after a clean exit or
    not matching the real exit status or the outcomes gives `report_inconsistent`; a hidden
    test collected with other bytes than the host hashed, `hidden_tests_changed`; anything
    the runner refused or saw rebound, `runtime_tampering`.
    """
    flags: set[str] = set()
    phases: dict[str, dict[str, str]] = {test: {} for test in tests}
    collected: dict[str, str] = {}
    final: dict[str, Any] | None = None
    for line in run.stdout.splitlines():
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "blocked":  # whenever it comes: the runner's guards report late too
                flags.add("runtime_tampering")
                continue
            if final is not None:
                raise ValueError("a record after the final one")
            if kind == "report":
                seen = phases[record["nodeid"]]  # KeyError: a test nobody asked for
                if record["when"] in seen or record["when"] not in ("setup", "call", "teardown"):
                    raise ValueError("a phase reported twice")
                seen[record["when"]] = str(record["outcome"])
            elif kind == "collected":
                if collected.setdefault(record["path"], record["sha256"]) != record["sha256"]:
                    flags.add("hidden_tests_changed")
            elif kind == "final":
                final = record
                flags |= {"runtime_tampering"} if record["blocked"] else set()
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, KeyError, TypeError):
            flags.add("report_inconsistent")
    if run.output_truncated:
        flags.add("report_inconsistent")
    outcomes = {test: _outcome(phases[test]) for test in tests}
    for path, digest in collected.items():
        if path in hashes and hashes[path] != digest:
            flags.add("hidden_tests_changed")
    test_files = {test.split("::")[0] for test in tests}
    if any(phases[t] for t in tests) and not all(f in collected for f in test_files if f in hashes):
        flags.add("report_inconsistent")  # outcomes of a test file nobody saw collected
    if final is None:
        if run.exit_code == 0 and not run.timed_out:
            flags.add("report_inconsistent")  # a clean exit the runner did not make
        missing = "timeout" if run.timed_out else "missing"
        outcomes = {t: o if o in ("failed", "error") else missing for t, o in outcomes.items()}
    else:
        # pytest exits 0 iff nothing failed (skips and xfails are no failure).
        all_passed = all(o == "passed" for o in outcomes.values())
        none_failed = all(o in ("passed", "skipped") for o in outcomes.values())
        clean = final["exit"] == 0
        if (
            final["exit"] != run.exit_code
            or (all_passed and not clean)
            or (clean and not none_failed)
        ):
            flags.add("report_inconsistent")
    return RunOutcome(outcomes, frozenset(flags))


def _run_hidden_tests(
    task: Task,
    repo: Path,
    applied: Mapping[str, tuple[bytes | None, bytes | None]],
    limits: Limits,
    timeout: float,
) -> RunOutcome:
    """Outcome of every graded test in a fresh sandbox holding base + applied changes."""
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    hidden = hidden_paths(task)
    runner = runner_dir()
    ro_paths = sorted({sys.prefix, sys.base_prefix, str(runner)})
    with open_sandbox(repo, limits=limits, ro_paths=ro_paths) as sandbox:
        hashes = _restore_hidden_tests(sandbox, task, hidden)
        config = _pytest_config(sandbox, repo, hidden)
        _apply(sandbox, repo, applied)
        spec = {"rootdir": sandbox.workdir, "config": config, "tests": tests}
        spec["protected"] = sorted(hidden)
        argv = [sys.executable, "-I", "-B", str(runner / "grader_runner.py"), json.dumps(spec)]
        # Only pytest's own plugins: whatever the host's Python has installed (hypothesis,
        # anyio, ...) is not the task's, and loading it doubled the cost of a grading.
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        if isinstance(sandbox, BwrapSandbox):
            run = sandbox.exec(argv, timeout=timeout, env=env, read_only=True)
        else:
            run = sandbox.exec(argv, timeout=timeout, env=env)
    return judge_report(run, tests, hashes)


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
        self._done: OrderedDict[str, RunOutcome] = OrderedDict()
        self._running: dict[str, threading.Event] = {}

    def outcomes(self, key: str, grade: Callable[[], RunOutcome]) -> RunOutcome:
        """The outcome stored under `key`, or the one `grade()` returns (then stored)."""
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return self._done[key]
                running = self._running.get(key)
                if running is None:
                    running = self._running[key] = threading.Event()
                    break
            running.wait()  # then look again; if that grading failed, grade here
        try:
            outcome = grade()
            with self._lock:
                self.misses += 1
                if "timeout" not in outcome.tests.values():
                    self._done[key] = outcome
                    while len(self._done) > self.capacity:
                        self._done.popitem(last=False)
            return outcome
        finally:
            with self._lock:
                del self._running[key]
            running.set()


OUTCOMES = OutcomeCache()


def submission_key(task: Task, applied: Mapping[str, tuple[bytes | None, bytes | None]]) -> str:
    """What the hidden tests' outcomes depend on: the task's tests and the applied files."""
    digest = hashlib.sha256()
    header = [task.instance_id, task.base_commit, task.test_patch]
    digest.update(json.dumps([*header, task.FAIL_TO_PASS, task.PASS_TO_PASS]).encode())
    for path in sorted(applied):
        new = applied[path][1]
        name = path.encode("utf-8", "surrogateescape")
        digest.update(b"\0" + name + f"\0{-1 if new is None else len(new)}\0".encode())
        digest.update(new or b"")
    return digest.hexdigest()


def _screen(
    task: Task,
    changes: Mapping[str, tuple[bytes | None, bytes | None]],
    tool_calls: list[tuple[str, dict[str, Any]]],
) -> tuple[set[str], dict[str, tuple[bytes | None, bytes | None]]]:
    """The anti-cheat flags of a submission and the changes that may be applied."""
    skipped = changes.skipped if isinstance(changes, Changes) else {}
    flags = set(skipped.values()) | anticheat.path_flags([*changes, *skipped])
    hidden = hidden_paths(task)
    graded = {}
    for path, change in changes.items():
        if _touches(path, hidden):
            flags.add("tests_modified")
        elif not (
            anticheat.is_test_file(path)
            or anticheat.is_config_file(path)
            or anticheat.is_importable_artefact(path)
        ):
            graded[path] = change
    try:
        facts = anticheat.test_facts(_hidden_test_sources(task))
        flags |= anticheat.code_flags(graded, facts)
    except Exception:  # a check that cannot judge a file must not pass it, nor crash
        logger.exception("%s: an anti-cheat check failed", task.instance_id)
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
    broken, `SandboxUnavailable` that this machine cannot grade at all.
    """
    start = time.monotonic()
    repo = ensure_repo(task)
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    try:
        flags, graded = _screen(task, changes, tool_calls or [])
        run = OUTCOMES.outcomes(
            submission_key(task, graded),
            lambda: _run_hidden_tests(
                task, repo, graded, limits or Limits(wall_s=timeout), timeout
            ),
        )
    except (VerifierError, SandboxUnavailable):
        raise
    except Exception:
        logger.exception("%s: grading failed on the agent's content", task.instance_id)
        return VerifyResult(
            0.0, dict.fromkeys(tests, "missing"), ["grader_error"], time.monotonic() - start
        )
    flags |= run.flags
    passed = bool(run.tests) and all(outcome == "passed" for outcome in run.tests.values())
    return VerifyResult(
        reward=1.0 if passed and not flags else 0.0,
        tests=dict(run.tests),
        flags=sorted(flags),
        duration_s=time.monotonic() - start,
        applied=sorted(graded),
    )


def verify_workspace(task: Task, workspace: Path, timeout: float = 120.0) -> VerifyResult:
    """Grade a workspace directory (e.g. one written by `fleetrl tasks checkout`)."""
    if not workspace.is_dir():
        raise FileNotFoundError(f"workspace {workspace} is not a directory")
    return verify(task, workspace_changes(ensure_repo(task), workspace), timeout=timeout)
