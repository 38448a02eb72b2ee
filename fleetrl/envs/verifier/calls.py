"""Calls mode: the hidden tests run where the agent's code never does.

For suites whose hidden tests call the code under test with plain data (`Suite.grading ==
"calls"`: micro, product), a grading is two sandboxed processes joined by two pipes:

    host ── os.pipe() x 2 ──────────────────────────────────────────────┐
     │                                                                   │
     ├─ grader sandbox: an empty folder + the hidden tests (test_patch,  │ requests ──▶
     │    and this grading's honeypots)                                  │
     │    python -I -B call_grader.py   pytest; imports of the code      │
     │    under test are proxies; records ─▶ stdout ─▶ judge_report      │ ◀── replies
     │                                                                   │
     └─ worker sandbox: the pristine repository + the agent's files,     │
          no hidden test;  python -I -B call_worker.py   imports the    ◀┘
          workspace, makes each call, answers with plain data

The host starts both at once (the worker on a thread), the worker with its pipe ends, the
grader with the others; it closes its own copies of a process's ends when that process's
command returns, so the other side reads end-of-file, and ends the worker when the grader
is done. Every request and reply is one JSON line of at most 1 MiB (`call_worker`'s
docstring has the format); the grader waits at most CALL_TIMEOUT_S (or the grading's
limit, if lower) for each reply, and a worker that dies, hangs or breaks the protocol
fails that call and every later one. The grading keeps its wall-clock limit: the grader's
command gets `timeout`, the worker's is ended with it.

What the agent controls is the worker; what decides is the grader, which never imports
the workspace and rebuilds every answer as a fresh value from plain data. So an
always-equal object, a patched pytest, a walk of the caller's frames, an exit at import or
a read of the hidden tests (there are none on the worker's side) changes nothing the grader
decides beyond the answers themselves. The grader writes the grader runner's records, and
`judge_report` cross-checks them as in pytest mode (one record per phase, the hidden
modules' hashes, the exit status).

Not covered: tests that exchange anything but plain data with the code under test (see
`call_grader`); the worker's resources are the sandbox's `Limits`, like the grader's (a
grading holds two processes' worth).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from fleetrl.envs.sandbox import ExecResult, Limits, Sandbox, open_sandbox
from fleetrl.envs.sandbox.bwrap import BwrapSandbox
from fleetrl.envs.verifier.hidden import apply_patch, hidden_paths, restore_hidden_tests
from fleetrl.envs.verifier.honeypots import Honeypots
from fleetrl.envs.verifier.judge import RunOutcome, judge_report
from fleetrl.envs.verifier.runner import apply_changes, runner_dir
from fleetrl.types import Task

CALL_TIMEOUT_S = 30.0  # the longest one call into the code under test may take


def run_calls(
    task: Task,
    repo: Path,
    applied: Mapping[str, tuple[bytes | None, bytes | None]],
    limits: Limits,
    timeout: float,
) -> RunOutcome:
    """Outcome of every graded test, the tests run by the grader and each call into the
    code under test made by the worker (base + applied changes, no hidden test); with a
    gold patch, also the agent's answers on fresh inputs checked against a reference worker
    (base + gold patch)."""
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    hidden = hidden_paths(task)
    runner = runner_dir()
    ro_paths = sorted({sys.prefix, sys.base_prefix, str(runner)})
    with contextlib.ExitStack() as stack:
        grader = stack.enter_context(
            open_sandbox(runner / "empty", limits=limits, ro_paths=ro_paths)
        )
        workers = {
            "agent": stack.enter_context(open_sandbox(repo, limits=limits, ro_paths=ro_paths))
        }
        if task.patch.strip():
            workers["reference"] = stack.enter_context(
                open_sandbox(repo, limits=limits, ro_paths=ro_paths)
            )
            apply_patch(workers["reference"], task.patch, f"{task.instance_id}: the gold patch")
        honeypots = Honeypots()  # fresh for this grading, beside the hidden tests
        hashes = restore_hidden_tests(grader, task, hidden, honeypots)
        apply_changes(workers["agent"], repo, applied)
        run_ids = honeypots.planted.run_ids(tests)  # as the grader's copy names them
        spec = {"rootdir": grader.workdir, "config": str(runner / "pytest.ini"), "tests": run_ids}
        spec["call_timeout"] = min(CALL_TIMEOUT_S, timeout)
        grader_argv = [sys.executable, "-I", "-B", str(runner / "call_grader.py")]
        worker_argv = [sys.executable, "-I", "-B", str(runner / "call_worker.py")]
        run = run_joined(grader, workers, grader_argv, worker_argv, spec, timeout)
    return judge_report(run, tests, hashes, honeypots.planted)


def run_joined(
    grader: Sandbox,
    workers: Mapping[str, Sandbox],
    grader_argv: Sequence[str],
    worker_argv: Sequence[str],
    spec: dict[str, object],
    timeout: float,
) -> ExecResult:
    """Run the grader and its workers at once, each worker joined to it by two pipes; the
    grader's result.

    The last argument of each command is its JSON spec. A worker's holds the numbers of its
    pipe ends ("read", "write"), which it inherits under the same numbers; the grader's is
    `spec` plus the agent worker's ends as "read" and "write", and every other worker's as
    `[READ, WRITE]` under its name.
    """
    ends = {}  # name -> (the worker's read and write ends, the grader's read and write ends)
    for name in workers:
        to_worker, to_grader = os.pipe(), os.pipe()
        ends[name] = ((to_worker[0], to_grader[1]), (to_grader[0], to_worker[1]))
    failed: list[BaseException] = []
    done = threading.Event()

    def serve(sandbox: Sandbox, fds: tuple[int, int]) -> None:
        try:
            worker_spec = {"read": fds[0], "write": fds[1], "rootdir": sandbox.workdir}
            # Outlives the grader's limit: a grading that runs out of time is the grader's
            # timeout (not kept by the outcome cache), not a worker gone before it.
            _exec(sandbox, [*worker_argv, json.dumps(worker_spec)], timeout + 10, fds)
        except BaseException as err:  # raised again on the grading's thread
            if not done.is_set():
                failed.append(err)
        finally:
            for fd in fds:  # the grader now reads end-of-file
                os.close(fd)

    threads = [
        threading.Thread(target=serve, args=(sandbox, ends[name][0]), daemon=True)
        for name, sandbox in workers.items()
    ]
    for thread in threads:
        thread.start()
    grader_fds = [fd for _, theirs in ends.values() for fd in theirs]
    try:
        grader_spec = {**spec, "read": ends["agent"][1][0], "write": ends["agent"][1][1]}
        grader_spec |= {name: list(e[1]) for name, e in ends.items() if name != "agent"}
        run = _exec(grader, [*grader_argv, json.dumps(grader_spec)], timeout, grader_fds)
    finally:
        done.set()
        for fd in grader_fds:
            os.close(fd)
        for sandbox in workers.values():
            sandbox.close()  # ends the worker (it would leave at end-of-file anyway)
        for thread in threads:
            thread.join()
    if failed:  # a worker could not start at all: no fault of the agent's
        raise failed[0]
    return run


def _exec(sandbox: Sandbox, argv: list[str], timeout: float, fds: Sequence[int]) -> ExecResult:
    """`argv` in `sandbox` with `fds` inherited; read-only workspace where the backend can."""
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if isinstance(sandbox, BwrapSandbox):
        return sandbox.exec(argv, timeout=timeout, env=env, pass_fds=fds, read_only=True)
    return sandbox.exec(argv, timeout=timeout, env=env, pass_fds=fds)
