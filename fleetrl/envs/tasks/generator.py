"""Turn a local Python repository with a pytest suite into bug-fix tasks, SWE-smith style.

    repo ──▶ baseline run (which tests pass) ──▶ mutation sites (fleetrl.envs.tasks.mutations)
                                                      │ seeded shuffle, kinds round-robin
                                                      ▼
          >=1 passing test fails and   ◀── run the suite with one mutation applied
          the rest still runs                         │
                 │
                 ▼
          out/repos/<id>/ (one commit: bug in place, tests removed) ──▶ the verifier grades
          the gold fix (must be 1) and the bug (must be 0) ──▶ kept: out/tasks.jsonl

Acceptance rule: a candidate is kept iff the mutated suite still collects and runs to the
end (pytest exit code 0 or 1, no timeout, every baseline-passing test reported), at
least one baseline-passing test fails, the verifier's anti-cheat checks accept the gold
fix itself (restoring `if n > 5: return 5` where a test calls `f(5)` and expects 5 reads
as hard-coded test values: no agent could be rewarded for it), and the verifier itself,
grading the task as it will grade an agent (its sandbox, its grader runner, the hidden
tests restored), scores the gold fix 1 and the unchanged checkout 0: a plain pytest run
agreeing is not enough (the grader refuses what some suites do, reports what some never
do). FAIL_TO_PASS = baseline-passing tests that fail with the mutation; PASS_TO_PASS =
those that still pass. Tests failing at baseline are in neither.

Hidden-test policy: every test file (any `test_*.py`, `*_test.py`, `conftest.py`, and
everything under a `tests/`, `test/` or `testing/` folder) is removed from the base commit
and re-added by `test_patch`, so the agent sees no test and P2P tests still run at grading.

Splits: the functions that kept tasks are shuffled by the seed and put, whole, into
`heldout` and `val` (fractions of the functions, 0.2 and 0.1 by default) and `train`, so
no function has tasks in two splits.

The problem statement lists the failing tests and their assertion messages (as pytest
reports them), never the mutated location; for feature deletion it also names the function
to rebuild. Deterministic for a seed: sorted traversal, seeded shuffle, and candidates
evaluated in a fixed order (in parallel, but kept in that order). Tests run through
`fleetrl.envs.tasks.testrun.run_pytest`, the one function to swap for a sandboxed run.

What is not covered: repositories that need installing or services to test; non-Python code;
source files that are not UTF-8; combined (multi-bug) tasks; a package of the same name
installed in this Python (the grader finds it before the repository's, so no task of it
grades: every candidate is rejected as `base_passes`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import random
import re
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from fleetrl.envs.anticheat import TestFacts, code_flags, test_facts
from fleetrl.envs.sandbox import SandboxUnavailable
from fleetrl.envs.tasks.git import commit_all, git
from fleetrl.envs.tasks.mutations import KINDS, Mutation, find_mutations
from fleetrl.envs.tasks.records import TASKS_FILE, TaskError, write_jsonl
from fleetrl.envs.tasks.testrun import PytestResult, run_pytest
from fleetrl.envs.verifier import verify
from fleetrl.envs.verifier.hidden import VerifierError, added_python_sources
from fleetrl.envs.verifier.runner import GraderUnavailable
from fleetrl.files import file_in_the_way
from fleetrl.types import Task

REPORT_FILE = "report.json"  # per-kind counts of a generation run, next to tasks.jsonl
SPLITS = ("train", "val", "heldout")  # the splits a generated folder's tasks are put in
_TEST_DIRS = {"tests", "test", "testing"}
_SKIP_DIRS = {"__pycache__", "node_modules", "venv", "build", "dist"}
_MAX_LISTED = 5  # failing tests quoted in a problem statement
_MAX_MESSAGE = 400  # characters of one assertion message quoted
# In report.json. `gold_fails`: the verifier scored the gold fix 0; `base_passes`: it scored
# the unchanged checkout 1.
_REJECTIONS = ("no_failing_test", "suite_broken", "gold_flagged", "gold_fails", "base_passes")


def is_test_path(path: str) -> bool:
    """True for files the hidden-test policy treats as tests (see module docstring)."""
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return (
        any(part in _TEST_DIRS for part in parts[:-1])
        or name == "conftest.py"
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
    )


def repo_files(repo_dir: Path) -> list[str]:
    """The repository's files as sorted posix paths: git's view (tracked and not ignored)
    when it is a git checkout, else every file outside hidden and build folders."""
    if (repo_dir / ".git").exists():
        listed = git(repo_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        # Bytecode of the user's own runs, where not ignored, is compiled from the unmutated
        # code and the tests: in a task's repository it would hand the agent the fix.
        return sorted(
            p
            for p in set(listed.split("\0"))
            if p and not p.endswith((".pyc", ".pyo")) and (repo_dir / p).is_file()
        )
    files = []
    for root, dirs, names in os.walk(repo_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        dirs[:] = [d for d in dirs if not d.endswith(".egg-info")]
        for name in names:
            if not name.endswith((".pyc", ".pyo")):
                files.append((Path(root) / name).relative_to(repo_dir).as_posix())
    return sorted(files)


def _copy(repo_dir: Path, files: Iterable[str], dest: Path) -> None:
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo_dir / rel, target, follow_symlinks=False)


def candidate_order(mutations: list[Mutation], seed: int) -> list[Mutation]:
    """Shuffle each kind's sites with the seed, then interleave kinds round-robin (in KINDS
    order), so every kind gets tried early whatever `max_tasks` is."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {kind: [] for kind in KINDS}
    for mutation in mutations:
        by_kind[mutation.kind].append(mutation)
    for sites in by_kind.values():
        rng.shuffle(sites)
    order = []
    for rank in range(max((len(s) for s in by_kind.values()), default=0)):
        order += [sites[rank] for sites in by_kind.values() if rank < len(sites)]
    return order


def gold_flags(mutation: Mutation, text: str, facts: TestFacts) -> set[str]:
    """The anti-cheat flags the verifier would raise on the fix that undoes `mutation` in
    `text` (the file's original source), given the hidden tests' `facts`."""
    return code_flags({mutation.path: (mutation.apply(text).encode(), text.encode())}, facts)


def problem_statement(mutation: Mutation, failing: list[str], result: PytestResult) -> str:
    """Issue text from the failing tests: their ids and assertion messages, nothing of the fix."""
    if mutation.kind == "feature_deletion":
        head = (
            f"`{mutation.function}` in `{mutation.path}` has no implementation any more "
            "(it raises NotImplementedError). Implement it so that these tests pass:"
        )
    else:
        head = "These tests fail but should pass:"
    lines = [head, ""]
    for node in failing[:_MAX_LISTED]:
        message = result.messages.get(node, "").strip() or result.outcomes[node]
        if len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + " ..."
        quoted = "\n".join("    " + line for line in message.splitlines())
        lines.append(f"- {node}\n{quoted}")
    if len(failing) > _MAX_LISTED:
        lines.append(f"- ... and {len(failing) - _MAX_LISTED} more")
    return "\n".join(lines) + "\n"


def make_tasks(
    repo_dir: Path,
    out_dir: Path,
    seed: int = 0,
    max_tasks: int = 50,
    kinds: Iterable[str] = KINDS,
    progress: bool = True,
    jobs: int | None = None,
    timeout: float | None = None,
    pytest_args: Sequence[str] = (),
    val: float = 0.1,
    heldout: float = 0.2,
) -> list[Task]:
    """Generate up to `max_tasks` tasks from `repo_dir` into `out_dir` (absent or empty).

    Each task gets the split `train`, `val` or `heldout` (`assign_splits`: about the
    fractions `val` and `heldout` of the functions, all tasks of a function in one split),
    so a folder trains, chooses and reports as the bundled suite does.

    Writes `out_dir/tasks.jsonl`, one repository per task under `out_dir/repos/`, and
    `out_dir/report.json` (candidates tried and kept per kind, rejection reasons). `jobs`
    test runs go in parallel (default: up to 4); `timeout` bounds one mutated run (default:
    5x the baseline run plus 10 s, since a mutation can make code loop forever).
    `pytest_args` are added to every test run (see `run_pytest`).
    """
    repo_dir, out_dir = Path(repo_dir).resolve(), Path(out_dir).resolve()
    kinds = list(kinds)
    if val < 0 or heldout < 0 or val + heldout >= 1:
        raise TaskError(f"split fractions val {val} and heldout {heldout}: each >= 0, sum < 1")
    if max_tasks < 1:
        raise TaskError(f"max_tasks must be >= 1, not {max_tasks}")
    if timeout is not None and timeout <= 0:
        raise TaskError(f"timeout must be > 0 seconds, not {timeout}")
    if unknown := sorted(set(kinds) - set(KINDS)):
        raise TaskError(f"unknown mutation kinds {unknown}; known: {', '.join(KINDS)}")
    if not repo_dir.is_dir():
        raise TaskError(f"{repo_dir} is not a directory")
    if (file := file_in_the_way(out_dir)) == out_dir:
        raise TaskError(f"output folder {out_dir} is a file")
    if file:
        raise TaskError(f"cannot create {out_dir}: {file} is a file")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise TaskError(f"output folder {out_dir} is not empty")
    files = repo_files(repo_dir)
    tests = [f for f in files if is_test_path(f)]
    sources = [f for f in files if f.endswith(".py") and not is_test_path(f)]
    if not tests or not sources:
        raise TaskError(f"{repo_dir} needs both Python source files and test files")

    texts: dict[str, str] = {}
    mutations = []
    for path in sources:
        try:
            # Bytes, not read_text: universal newlines would turn a CRLF file's gold patch
            # into a whole-file rewrite.
            texts[path] = (repo_dir / path).read_bytes().decode("utf-8")
            mutations += find_mutations(path, texts[path], kinds)
        except (SyntaxError, ValueError):
            continue  # not UTF-8 or not parseable by this Python: not mutated
    order = candidate_order(mutations, seed)
    test_patch = _test_patch(repo_dir, tests)

    with tempfile.TemporaryDirectory(prefix="fleetrl-taskgen-") as tmp:
        jobs = max(1, jobs or min(4, os.cpu_count() or 1))
        workdirs = [Path(tmp) / f"work{i}" for i in range(jobs)]
        for workdir in workdirs:
            _copy(repo_dir, files, workdir)
        baseline = run_pytest(
            workdirs[0], timeout=max(600.0, timeout or 0), pytest_args=pytest_args
        )
        passing = baseline.passed()
        if not baseline.ran or not passing:
            last = next((x for x in reversed(baseline.output.splitlines()) if x.strip()), "")
            raise TaskError(
                f"the test suite of {repo_dir} does not run cleanly (pytest exit code "
                f"{baseline.returncode}, {len(passing)} passing; last line: {last.strip()!r})"
                f"\n{baseline.output[-2000:]}"
            )
        limit = timeout or 5 * baseline.seconds + 10
        run = functools.partial(run_pytest, timeout=limit, pytest_args=pytest_args)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", repo_dir.name).strip("-.") or "repo"
        source = _Source(
            repo_dir=repo_dir,
            files=[f for f in files if not is_test_path(f)],
            texts=texts,
            tests=tests,
            test_patch=test_patch,
            passing=passing,
            facts=test_facts(added_python_sources(test_patch)),  # as the verifier reads them
            repos=out_dir / "repos",
            slug=slug,
            grading_timeout=limit + 60,  # the whole suite once more, in a fresh sandbox
        )
        source.repos.mkdir(parents=True, exist_ok=True)
        try:
            tasks, stats = _evaluate(order, source, workdirs, run, max_tasks, progress)
        except (SandboxUnavailable, GraderUnavailable, VerifierError) as err:
            shutil.rmtree(source.repos, ignore_errors=True)
            raise TaskError(
                f"tasks make keeps a task only when the verifier grades it, and it cannot: {err}"
            ) from err

    tasks = assign_splits(tasks, seed, val, heldout)
    write_jsonl(tasks, out_dir / TASKS_FILE)
    report = {
        "repo": str(repo_dir),
        "seed": seed,
        "baseline_passing": len(passing),
        "candidates": len(order),
        "tried": sum(stats[k, "tried"] for k in kinds),
        "tasks": len(tasks),
        "by_kind": {k: {"tried": stats[k, "tried"], "kept": stats[k, "kept"]} for k in kinds},
        "rejected": {r: stats[r] for r in _REJECTIONS if stats[r]},
        "splits": {name: sum(t.split == name for t in tasks) for name in SPLITS},
    }
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return tasks


def assign_splits(tasks: list[Task], seed: int, val: float, heldout: float) -> list[Task]:
    """The tasks with their split set: the functions they mutate, in a seeded order, go
    a fraction `heldout` to `heldout`, `val` to `val`, the rest to `train` (a repository
    of one or two functions has only `train`). Two bugs in one function are never in two
    splits: a model trained on one would have seen the other's code."""
    functions = sorted({task.origin for task in tasks})
    random.Random(f"splits-{seed}").shuffle(functions)
    n = len(functions)
    # Rounded up, so that a few functions still give each asked-for split one, unless that
    # would leave train nothing; then to the nearest.
    n_heldout, n_val = math.ceil(round(heldout * n, 9)), math.ceil(round(val * n, 9))
    if n_heldout + n_val >= n:
        n_heldout, n_val = round(heldout * n), round(val * n)
    split_of = {f: "heldout" for f in functions[:n_heldout]}
    split_of |= {f: "val" for f in functions[n_heldout : n_heldout + n_val]}
    return [dataclasses.replace(t, split=split_of.get(t.origin, "train")) for t in tasks]


@dataclasses.dataclass(frozen=True)
class _Source:
    """What judging a candidate needs of the repository and the run so far."""

    repo_dir: Path  # the user's repository (never written)
    files: list[str]  # its non-test files, copied into every task repository
    texts: dict[str, str]  # source file -> its original text
    tests: list[str]  # its test files (hidden: re-added by test_patch)
    test_patch: str  # the diff that re-adds them
    passing: set[str]  # node ids passing at baseline
    facts: TestFacts  # what the anti-cheat checks know of the hidden tests
    repos: Path  # out_dir/repos: one folder per task
    slug: str  # instance id prefix, from the repository's folder name
    grading_timeout: float  # seconds the verifier may take for one grading


def _judge(source: _Source, mutation: Mutation, result: PytestResult) -> tuple[str, Task | None]:
    """("kept", the task written under `source.repos`) or (the rejection reason, None).

    The verifier has the last word: it grades the written task as it will grade an agent,
    and a task whose gold fix it does not score 1, or whose unchanged checkout it does not
    score 0, is removed again."""
    passing = source.passing
    if not result.ran or not passing <= set(result.outcomes):
        return "suite_broken", None
    if passing <= result.passed():
        return "no_failing_test", None
    original = source.texts[mutation.path]
    if gold_flags(mutation, original, source.facts):
        return "gold_flagged", None
    task = _write_task(source, mutation, result)
    fix = {mutation.path: (mutation.apply(original).encode(), original.encode())}
    reason, seconds = None, source.grading_timeout
    if verify(task, fix, timeout=seconds).reward != 1:
        reason = "gold_fails"
    # The bug alone must fail a FAIL_TO_PASS test: the rest need not run again.
    elif verify(dataclasses.replace(task, PASS_TO_PASS=[]), {}, timeout=seconds).reward != 0:
        reason = "base_passes"
    if reason is not None:
        shutil.rmtree(task.repo)
        return reason, None
    return "kept", task


def _write_task(source: _Source, mutation: Mutation, result: PytestResult) -> Task:
    """The task of a candidate, its repository written: one commit with the bug in place
    and the tests removed."""
    original = source.texts[mutation.path]
    mutated = mutation.apply(original)
    digest = hashlib.sha1(f"{mutation.path}\0{mutated}".encode()).hexdigest()[:8]
    instance_id = f"{source.slug}__{mutation.kind}_{digest}"
    repo = source.repos / instance_id
    _copy(source.repo_dir, source.files, repo)
    (repo / mutation.path).write_bytes(mutated.encode())
    base_commit = commit_all(repo)
    (repo / mutation.path).write_bytes(original.encode())
    patch = git(repo, "diff", "--no-ext-diff", "--no-color", "--binary")
    git(repo, "checkout", "-q", "--", mutation.path)
    failing = sorted(n for n in source.passing if result.outcomes.get(n) != "passed")
    return Task(
        instance_id=instance_id,
        repo=str(repo),
        base_commit=base_commit,
        problem_statement=problem_statement(mutation, failing, result),
        patch=patch,
        test_patch=source.test_patch,
        FAIL_TO_PASS=failing,
        PASS_TO_PASS=sorted(source.passing - set(failing)),
        test_files=source.tests,
        kind=mutation.kind,
        origin=f"{mutation.path}::{mutation.function}",
    )


def _evaluate(
    order: list[Mutation],
    source: _Source,
    workdirs: list[Path],
    run_tests: Callable[[Path], PytestResult],
    max_tasks: int,
    progress: bool,
) -> tuple[list[Task], Counter]:
    """Judge candidates in `order` until `max_tasks` are kept; the kept tasks, in order.

    Candidates run `len(workdirs)` at a time, each in its own copy of the repo and then
    through the verifier; results are taken strictly in `order`, so parallelism never
    changes which candidates are kept.
    """
    free = list(workdirs)
    lock = threading.Lock()

    def evaluate(mutation: Mutation) -> tuple[str, Task | None]:
        text = source.texts[mutation.path]
        mutated = mutation.apply(text)
        with lock:
            workdir = free.pop()
        target = workdir / mutation.path
        try:
            target.write_bytes(mutated.encode())
            result = run_tests(workdir)
        finally:
            target.write_bytes(text.encode())
            with lock:
                free.append(workdir)
        # Messages may quote paths; which copy ran a candidate must not show in a task.
        prefix = f"{workdir}{os.sep}"
        result.messages = {k: v.replace(prefix, "") for k, v in result.messages.items()}
        return _judge(source, mutation, result)

    kept: list[Task] = []
    stats: Counter = Counter()
    with (
        ThreadPoolExecutor(len(workdirs)) as pool,
        _progress(progress, len(order), max_tasks) as advance,
    ):
        for start in range(0, len(order), len(workdirs)):
            batch = order[start : start + len(workdirs)]
            for mutation, (verdict, task) in zip(batch, pool.map(evaluate, batch), strict=True):
                if len(kept) >= max_tasks:
                    if task is not None:  # the rest of the last batch ran, but is not counted
                        shutil.rmtree(task.repo)
                    continue
                stats[mutation.kind, "tried"] += 1
                if task is None:
                    stats[verdict] += 1
                else:
                    stats[mutation.kind, "kept"] += 1
                    kept.append(task)
                advance(len(kept))
            if len(kept) >= max_tasks:
                break
    return kept, stats


def _test_patch(repo_dir: Path, tests: list[str]) -> str:
    """A diff creating every test file (binary ones too), made by git from an empty repo."""
    with tempfile.TemporaryDirectory(prefix="fleetrl-tests-") as tmp:
        scratch = Path(tmp)
        _copy(repo_dir, tests, scratch)
        git(scratch, "init", "-q")
        git(scratch, "add", "-A", "-f", ".")
        return git(scratch, "diff", "--cached", "--no-ext-diff", "--no-color", "--binary")


@contextlib.contextmanager
def _progress(enabled: bool, total: int, wanted: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (or nothing): the candidates tried of all there are,
    and the tasks kept of the `wanted`; yields `advance(kept)`, called per candidate tried."""
    if not enabled:
        yield lambda kept: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("candidates tried"), BarColumn(), MofNCompleteColumn())
    kept_column = TextColumn(f"kept {{task.fields[kept]}} of {wanted}")
    with Progress(*columns, kept_column, console=Console(stderr=True)) as bar:
        task = bar.add_task("candidates", total=total, kept=0)
        yield lambda kept: bar.update(task, advance=1, kept=kept)
