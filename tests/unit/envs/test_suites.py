"""The suite registry: suites and splits resolve, unknown ids get a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetrl.envs.records import TaskError
from fleetrl.envs.suites import get_task, load_tasks


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


def test_load_tasks_resolves_suites_and_splits(tmp_path: Path) -> None:
    assert len(load_tasks(suite="micro", split="heldout")) == 310
    with pytest.raises(TaskError, match="exactly one"):
        load_tasks()
    with pytest.raises(TaskError, match="exactly one"):
        load_tasks(suite="micro", tasks_dir=tmp_path)
    with pytest.raises(TaskError, match=r"unknown suite 'nope'.*micro"):
        load_tasks(suite="nope")
    with pytest.raises(TaskError, match=r"no split 'dev'.*heldout, heldout-templates, train, val"):
        load_tasks(suite="micro", split="dev")
    with pytest.raises(TaskError, match="neither a task folder nor a JSONL file"):
        load_tasks(tasks_dir=tmp_path / "missing")


def test_get_task_finds_bundled_ids_and_suggests_close_ones() -> None:
    assert get_task("micro-heldout-0007").split == "heldout"
    with pytest.raises(TaskError, match=r"unknown task id 'micro-heldout-07'.*did you mean"):
        get_task("micro-heldout-07")
