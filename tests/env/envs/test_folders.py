"""A task folder of one's own train tasks and the bundled evaluation splits loads on a
fresh cache, its bundled repositories written inside it, at their base commits."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetrl.envs.folders import EVAL_SPLITS, write_micro_folder
from fleetrl.envs.suites import load_tasks


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
