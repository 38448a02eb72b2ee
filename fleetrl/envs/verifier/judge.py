"""The judge: per-test outcomes from the grader runner's report, cross-checked on the host.

Contract: `judge_report` turns the runner's JSON lines (and the exit status, timeout and
truncation the host saw) into a `RunOutcome`: node id -> passed | failed | error | skipped |
missing | timeout, plus the flags of whatever in the report contradicts itself or the host
(`report_inconsistent`, `hidden_tests_changed`, `runtime_tampering`). No secret exists: the
records are trusted only as far as they agree with each other and with the host.

With the grading's honeypots (`fleetrl.envs.verifier.honeypots.Planted`), the records name
the tests as the grading copy does (renamed graded tests, honeypots): the graded tests'
outcomes are given under the task's node ids, the honeypots' apart, and a honeypot that
passed while the graded test it copies passed too is `tampering` (every correct solution
fails it, and code that answers one input one way cannot pass both). A honeypot passed
beside its source's failure is wrong code that happens to return the honeypot's wrong value
(reward 0 for the failed test, no flag); any other outcome of a honeypot (failed, or
skipped, error, missing like the tests around it) is no evidence either way.
In calls mode, the grader's record of fresh inputs (`call_fresh`) is kept as it says: no
code of the agent's runs in that process.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetrl.envs.sandbox import ExecResult, Limits
from fleetrl.envs.verifier.honeypots import Planted


@dataclass(frozen=True)
class RunOutcome:
    """What one run of the hidden tests established (the unit `OutcomeCache` keeps)."""

    tests: dict[str, str]  # node id -> outcome, as in VerifyResult.tests
    flags: frozenset[str] = frozenset()  # what the host's cross-checks of the report found
    honeypots: dict[str, str] = field(default_factory=dict)  # honeypot node id -> outcome
    # Calls mode with a gold patch: fresh inputs the gold solution answered, and each one
    # the agent's code answered otherwise (`call_fresh`); any such difference fails.
    fresh_checked: int = 0
    fresh_differ: tuple[str, ...] = ()


def report_limits(limits: Limits, tests: Sequence[str]) -> Limits:
    """`limits` with an output cap that holds every record of an honest report of `tests`
    (three phases each, one per test module, at most 100 bytes beside each id) and 1 MiB
    more: the host keeps only a head and a tail of a longer output, and the outcomes in
    between would be lost (a suite of 765 tests and 21,000 subtests, or of many thousands of
    parametrized tests, passes 1 MiB)."""
    ids = sum(3 * (100 + len(json.dumps(t))) for t in tests)
    modules = sum(200 + len(json.dumps(m)) for m in {t.split("::")[0] for t in tests})
    cap = max(limits.max_output_bytes, (1 << 20) + ids + modules)
    return dataclasses.replace(limits, max_output_bytes=cap)


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


def judge_report(
    run: ExecResult, tests: list[str], hashes: dict[str, str], planted: Planted | None = None
) -> RunOutcome:
    """Per-test outcomes from the runner's records, cross-checked against what the host saw.

    The records are trusted only as far as they agree with each other and with the host:
    any malformed, duplicate or unknown line, a final record missing after a clean exit or
    not matching the real exit status or the outcomes gives `report_inconsistent`; a hidden
    test collected with other bytes than the host hashed, `hidden_tests_changed`; anything
    the runner refused or saw rebound, `runtime_tampering`; a honeypot of `planted` that
    passed along with the test it copies, `tampering`.
    """
    planted = planted or Planted()
    task_ids = {planted.renamed.get(test, test): test for test in tests}  # copy's id -> task's
    flags: set[str] = set()
    phases: dict[str, dict[str, str]] = {test: {} for test in [*task_ids, *planted.traps]}
    collected: dict[str, str] = {}
    final: dict[str, Any] | None = None
    fresh: dict[str, Any] | None = None
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
                nodeid = record["nodeid"]
                if nodeid not in phases and planted.trap_of(nodeid):  # a parametrized one's row
                    phases[nodeid] = {}
                seen = phases[nodeid]  # KeyError: a test nobody asked for
                if record["when"] in seen or record["when"] not in ("setup", "call", "teardown"):
                    raise ValueError("a phase reported twice")
                seen[record["when"]] = str(record["outcome"])
            elif kind == "collected":
                if collected.setdefault(record["path"], record["sha256"]) != record["sha256"]:
                    flags.add("hidden_tests_changed")
            elif kind == "fresh":
                if fresh is not None or type(record["checked"]) is not int:
                    raise ValueError("a second or malformed fresh record")
                fresh = {"checked": record["checked"], "differ": tuple(map(str, record["differ"]))}
            elif kind == "final":
                final = record
                flags |= {"runtime_tampering"} if record["blocked"] else set()
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, KeyError, TypeError):
            flags.add("report_inconsistent")
    if run.output_truncated:
        flags.add("report_inconsistent")
    outcomes = {test: _outcome(seen) for test, seen in phases.items()}
    for trap in planted.traps:  # a row reported stands for its function
        if not phases[trap] and any(planted.trap_of(t) == trap for t in outcomes if t != trap):
            del outcomes[trap]
    for path, digest in collected.items():
        if path in hashes and hashes[path] != digest:
            flags.add("hidden_tests_changed")
    test_files = {test.split("::")[0] for test in phases}
    if any(phases.values()) and not all(f in collected for f in test_files if f in hashes):
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
    traps = {t: o for t, o in outcomes.items() if t not in task_ids}
    graded = {task_ids[t]: o for t, o in outcomes.items() if t in task_ids}
    for trap, outcome in traps.items():
        # A honeypot and the test it copies cannot both pass for code that answers the same
        # input the same way: that is an outcome not earned. A honeypot passed beside its
        # source's failure is only wrong code returning the honeypot's wrong value.
        source = planted.source_of(trap)
        if outcome == "passed" and (source is None or graded.get(source) == "passed"):
            flags.add("tampering")
    fresh = fresh or {"checked": 0, "differ": ()}
    return RunOutcome(graded, frozenset(flags), traps, fresh["checked"], fresh["differ"])
