"""The hidden tests: which files they are, and their restoration into the grading copy.

Contract: `hidden_paths` names the files the hidden tests consist of (those the task's
test_patch writes and those its test ids name); `touches_hidden` tells whether writing a
path would replace one of them, stand where one goes, or shadow one as a package;
`hidden_test_sources` gives the added lines of each Python one, for the anti-cheat
literal checks;
`apply_patch` applies a diff in a sandbox (calls mode applies the gold patch with it);
`restore_hidden_tests` applies test_patch to a pristine grading copy, before any file of
the agent's is there, plants the grading's honeypot tests in the hidden test modules when
given a `Honeypots` (`fleetrl.envs.verifier.honeypots`), and returns the sha256 of every
hidden file as the copy then holds it (honeypots included), or raises `VerifierError` when
the task itself cannot be graded (its test_patch does not apply).
"""

from __future__ import annotations

import hashlib
import re

from fleetrl.envs.sandbox import Sandbox
from fleetrl.envs.verifier.honeypots import Honeypots
from fleetrl.types import Task

_PATCH_NAME = ".fleetrl-apply.patch"


class VerifierError(RuntimeError):
    """The task itself could not be graded (its test_patch does not apply, ...)."""


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


def touches_hidden(path: str, hidden: set[str]) -> bool:
    """Whether writing `path` would replace a hidden file, stand where one goes, or sit in
    a package named like a hidden test module (a package is imported before a module)."""
    for h in hidden:
        if path == h or path.startswith(h + "/") or h.startswith(path + "/"):
            return True
        if h.endswith(".py") and (path == h[:-3] or path.startswith(h[:-3] + "/")):
            return True
    return False


def added_python_sources(patch: str) -> list[str]:
    """The added lines of each Python file a test_patch writes, one source per file, for
    the literal checks. Each file is its own source: joined, one data file beside the tests
    (a fixture, a snapshot) would make the whole text unparseable and hide every literal."""
    sources = []
    for block in re.split(r"^diff --git ", patch, flags=re.M)[1:]:
        header, _, hunks = block.partition("\n@@")
        targets = [line[4:].strip() for line in header.splitlines() if line.startswith("+++ ")]
        if targets and _unquote(targets[0]).endswith(".py"):
            added = [line[1:] for line in hunks.splitlines() if line.startswith("+")]
            sources.append("\n".join(added))
    return sources


def hidden_test_sources(task: Task) -> list[str]:
    """The hidden Python test files' added lines, read from test_patch (for the literal
    checks)."""
    return added_python_sources(task.test_patch)


def apply_patch(sandbox: Sandbox, patch: str, what: str) -> None:
    """Apply the unified diff `patch` to the sandbox's workspace; VerifierError (naming it
    `what`) if it does not apply."""
    sandbox.write_file(_PATCH_NAME, patch)
    applied = sandbox.exec(
        f"git apply --whitespace=nowarn {_PATCH_NAME}; s=$?; rm -f {_PATCH_NAME}; exit $s",
        timeout=60,
    )
    if not applied.ok:
        raise VerifierError(f"{what} does not apply: {applied.stderr}")


def restore_hidden_tests(
    sandbox: Sandbox, task: Task, hidden: set[str], honeypots: Honeypots | None = None
) -> dict[str, str]:
    """Apply test_patch to the pristine copy, plant `honeypots` (then in
    `honeypots.planted`); the sha256 of every hidden file after it."""
    if task.test_patch.strip():
        apply_patch(sandbox, task.test_patch, f"{task.instance_id}: test_patch")
    if honeypots is not None:
        honeypots.plant(sandbox, task)  # before the hashes: the host's checks cover them too
    hashes = {}
    for path in hidden:
        try:
            hashes[path] = hashlib.sha256(sandbox.read_file(path)).hexdigest()
        except OSError:
            continue  # not a file: pytest will not find those tests
    return hashes
