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

Suites whose hidden tests call the code under test with plain data only (micro, product:
`Suite.grading == "calls"`) grade in calls mode instead (`calls`): pytest runs the hidden
tests in a sandbox that holds no code of the agent's (`call_grader`), and each call crosses
to a second sandbox over the agent's files that holds no hidden test (`call_worker`), as
plain data both ways. No agent code runs where the outcome is decided.

A verdict for every input: names that are not UTF-8, links, FIFOs, huge files, or an
anti-cheat check that fails get a flag, never an exception (`grader_error` for the last);
only a task that cannot be graded at all (its test_patch does not apply to the pristine
repository) raises `VerifierError`. Files are read with `lstat` first and never through a
link on the host, and at most `MAX_FILE_BYTES` each (`MAX_CHANGE_BYTES` in all).

Identical submissions are graded once (`OutcomeCache`), since the N samples of a group often
end in the same diff; a grading that timed out is not kept, and the anti-cheat checks run
for every submission.

Modules, in the order a submission meets them: `changes` (what the agent changed, read
without trusting it), `hidden` (which files the hidden tests are, and their restoration into
the grading copy), `honeypots` and `honeypot_checks` (tests every correct solution fails,
planted beside the hidden tests in every grading: one that passes along with the test it
copies is `tampering`),
`runner` (the graded run: a fresh sandbox, pytest's configuration, the
agent's files applied, the grader runner started), `calls` (the graded run in calls mode:
the grader and the worker, joined by two pipes), `judge` (the runner's report,
cross-checked on the host), `cache` (one grading per identical submission: the process's
`OUTCOMES`) and `verdict` (`verify`: the anti-cheat screening, the cached graded run, the
reward).

What is not covered: tests that need the network or services; non-pytest test runners;
third-party pytest plugins (only pytest's own are loaded); flaky tests (a cached outcome
repeats the first grading's); in the agent's sandbox (`sandbox_changes`), a link that
resolves inside the workspace is read as a copy of its target (the sandbox API reports no
file types); see docs/environments.md for the in-process attacks that remain.
"""

from __future__ import annotations

from fleetrl.envs.verifier.cache import OutcomeCache
from fleetrl.envs.verifier.changes import sandbox_changes, workspace_changes
from fleetrl.envs.verifier.judge import RunOutcome, judge_report
from fleetrl.envs.verifier.verdict import VerifyResult, verify, verify_workspace

__all__ = [
    "OutcomeCache",
    "RunOutcome",
    "VerifyResult",
    "judge_report",
    "sandbox_changes",
    "verify",
    "verify_workspace",
    "workspace_changes",
]
