"""A task folder of one's own train tasks and the bundled evaluation splits loads on a
fresh cache, its bundled repositories written inside it, at their base commits."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from lab.folders import EVAL_SPLITS, fresh_train_tasks, write_micro_folder

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.testrun import run_pytest
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.types import Task


def test_a_micro_folder_holds_the_bundled_evaluation_splits_and_their_repositories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))  # nothing written yet
    own = load_tasks(suite="micro", split="train")[:4]
    folder = tmp_path / "folder"
    path = write_micro_folder(own, folder)
    assert path == folder / "tasks.jsonl"
    moved = folder.rename(tmp_path / "moved")  # the folder must not point outside itself
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    splits = {"train": own} | {
        split: load_tasks(suite="micro", split=split) for split in EVAL_SPLITS
    }
    for split, expected in splits.items():
        loaded = load_tasks(tasks_dir=moved, split=split)
        assert [dataclasses.replace(t, repo="") for t in loaded] == [
            dataclasses.replace(t, repo="") for t in expected
        ]
        for task in loaded:
            assert Path(task.repo).is_relative_to(moved / "repos")
            head = subprocess.run(
                ["git", "-C", task.repo, "rev-parse", "HEAD"], capture_output=True, text=True
            )
            assert head.stdout.strip() == task.base_commit


def test_fresh_train_tasks_draw_evaluation_symbols_and_check_out(
    suite: list[Task], tmp_path: Path
) -> None:
    """Tasks beyond the suite (the positive control's): filed as train, seeded, function
    names unused by the suite, repositories at their base commit (checked as they are
    written), gold patches passing real pytest."""
    fresh = fresh_train_tasks(8, "val", "test-seed", "extra", tmp_path / "repos")
    assert [t.instance_id for t in fresh] == [f"extra-{i:04d}" for i in range(8)]
    assert {t.split for t in fresh} == {"train"}
    suite_modules = {f for t in suite for f in t.test_files}
    for task in fresh:
        assert task.test_files[0] not in suite_modules
        workspace = checkout(task, tmp_path / "work" / task.instance_id)
        apply_patch(workspace, task.test_patch)
        apply_patch(workspace, task.patch)
    done = run_pytest(tmp_path / "work", timeout=120)
    assert done.ran and len(done.outcomes) == 8 * 3, done.output
    assert set(done.outcomes.values()) == {"passed"}
    again = fresh_train_tasks(8, "val", "test-seed", "extra", tmp_path / "again")
    assert [t.patch for t in again] == [t.patch for t in fresh]  # seeded
