"""A run in its store carries what its processes need, so that one on another machine can
join it from the store URL alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetrl.config import RunConfig
from fleetrl.config_files import with_overrides
from fleetrl.envs.tasks.suites import training_tasks
from fleetrl.orchestrate.run import create_run, open_run, read_run_config
from fleetrl.store.objectstore import open_store


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


def test_a_region_elsewhere_leaves_out_the_tasks_skip_solved_names(tmp_path, tiny_checkpoint):
    ids = [task.instance_id for task in training_tasks(RunConfig().tasks)]
    evaluation = tmp_path / "creator" / "eval.json"
    evaluation.parent.mkdir()
    passes = {ids[0]: 4, ids[1]: 4, ids[2]: 1}
    doc = {"split": "train", "samples_per_task": 4, "task_passes": passes}
    evaluation.write_text(json.dumps(doc))
    config = with_overrides(
        RunConfig(),
        {"model": {"path": str(tiny_checkpoint)}, "tasks": {"skip_solved": str(evaluation)}},
    )
    url = str(tmp_path / "store")
    create_run(config, url)
    evaluation.unlink()  # the region's machine does not have the creator's file

    store = open_store(url)
    joined = open_run(store, read_run_config(store), tmp_path / "region")

    assert Path(joined.tasks.skip_solved) == tmp_path / "region" / "skip_solved.json"
    kept = [task.instance_id for task in training_tasks(joined.tasks)]
    assert kept == ids[2:]
