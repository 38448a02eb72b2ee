"""The micro suite's tasks are valid: real pytest on a sample, every patch applied with git
and every test file executed in-process."""

from __future__ import annotations

from pathlib import Path

from fleetrl.envs.micro import suite as micro
from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.testrun import run_pytest
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.types import Task


def test_every_task_patches_and_tests_check_out_in_process(
    suite: list[Task], tmp_path: Path
) -> None:
    """All 1,120 tasks at once: one `git apply` of every gold patch and test patch over the
    buggy modules, then each test file executed in-process before and after the fix."""
    specs = micro._spec_by_id()
    for task in suite:
        (tmp_path / f"{specs[task.instance_id].function}.py").write_text(
            specs[task.instance_id].buggy
        )
    apply_patch(tmp_path, "".join(task.test_patch for task in suite))
    before = {task.instance_id: _run_tests_in_process(tmp_path, task) for task in suite}
    apply_patch(tmp_path, "".join(task.patch for task in suite))
    for task in suite:
        spec = specs[task.instance_id]
        assert (tmp_path / f"{spec.function}.py").read_text() == spec.correct
        failed = before[task.instance_id]
        assert failed == set(task.FAIL_TO_PASS), task.instance_id
        assert sorted(task.FAIL_TO_PASS + task.PASS_TO_PASS) == [
            f"{task.test_files[0]}::test_{i}" for i in (1, 2, 3)
        ]
        assert _run_tests_in_process(tmp_path, task) == set(), task.instance_id


def _run_tests_in_process(folder: Path, task: Task) -> set[str]:
    """Node ids of the task's tests that fail when run as plain functions."""
    test_file = task.test_files[0]
    module = test_file.removeprefix("test_")
    namespace: dict[str, object] = {}
    exec((folder / module).read_text(), namespace)
    function = module.removesuffix(".py")
    tests = (folder / test_file).read_text().replace(f"from {function} import {function}\n", "")
    exec(tests, namespace)
    failed = set()
    for name, test in namespace.items():
        if name.startswith("test_"):
            try:
                test()  # type: ignore[operator]
            except Exception:
                failed.add(f"{test_file}::{name}")
    return failed


def test_sample_passes_real_pytest_before_and_after_the_gold_patch(
    suite: list[Task], tmp_path: Path
) -> None:
    """30 tasks (every template, both splits) checked out, hidden tests restored, run by
    pytest in one process: FAIL_TO_PASS fail and PASS_TO_PASS pass; with the gold patch
    all pass."""
    first_of: dict[tuple[str, str], Task] = {}
    for task in suite:
        first_of.setdefault((task.split, task.origin), task)
    sample = [t for (split, _), t in first_of.items() if split == "train"]
    sample += [t for (split, _), t in first_of.items() if split == "heldout"][:10]
    assert len(sample) == 30
    _assert_gold_fixes(sample, tmp_path)


def _assert_gold_fixes(tasks: list[Task], root: Path) -> None:
    """Check out `tasks` under `root` with their hidden tests and run pytest over all of
    them at once: FAIL_TO_PASS fail and PASS_TO_PASS pass; with the gold patches all pass."""
    for task in tasks:
        apply_patch(checkout(task, root / task.instance_id), task.test_patch)
    before = run_pytest(root, timeout=120)
    for task in tasks:
        apply_patch(root / task.instance_id, task.patch)
    after = run_pytest(root, timeout=120)
    assert before.ran and after.ran, before.output + after.output
    for task in tasks:
        for node in task.FAIL_TO_PASS:
            assert before.outcomes[f"{task.instance_id}/{node}"] == "failed"
        for node in task.PASS_TO_PASS:
            assert before.outcomes[f"{task.instance_id}/{node}"] == "passed"
    assert len(after.outcomes) == 3 * len(tasks) and set(after.outcomes.values()) == {"passed"}


def test_product_suite_trains_in_the_evaluation_conventions_and_checks_out(
    suite: list[Task], tmp_path: Path
) -> None:
    """The bundled `product` suite: micro's evaluation splits unchanged, and train tasks of
    micro's templates written with the evaluation symbols (every template integer 3 mod 4,
    every letter from HELDOUT_LETTERS) under function names micro never uses; its
    repositories are written through the registry on first use and real pytest takes the
    gold patches of a sample."""
    product = load_tasks(suite="product")
    train = [t for t in product if t.split == "train"]
    assert len(train) == micro.PRODUCT_TRAIN_SIZE and {t.suite for t in train} == {"product"}
    evaluation = [(t.instance_id, t.base_commit, t.patch) for t in product if t.split != "train"]
    assert evaluation == [
        (t.instance_id, t.base_commit, t.patch) for t in suite if t.split != "train"
    ]
    specs = micro._product_specs()
    symbols = [v for t in train for v in dict(specs[t.instance_id].constants).values()]
    ints = [v for v in symbols if isinstance(v, int)]
    letters = "".join(v for v in symbols if isinstance(v, str))
    assert ints and {micro.split_of_int(v) for v in ints} == {"heldout"}
    assert letters and {micro.split_of_letter(c) for c in letters} == {"heldout"}
    assert not {t.test_files[0] for t in train} & {t.test_files[0] for t in suite}
    assert {t.origin for t in train} == {t.origin for t in suite if t.split == "val"}
    _assert_gold_fixes(train[:: len(train) // 8][:8], tmp_path / "work")
