"""The suite registry: suites and splits resolve, unknown ids get a suggestion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetrl.config import TasksSection
from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import get_task, load_tasks, training_tasks
from fleetrl.model.checkpoint import resolve_checkpoint, weights_digest


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


def evaluation(
    tmp_path: Path, passes: dict[str, int], split: str = "train", weights: str | None = None
) -> str:
    """The JSON `fleetrl eval --split SPLIT --samples 4 --json` writes, these passes in it."""
    path = tmp_path / "eval.json"
    doc = {"split": split, "samples_per_task": 4, "task_passes": passes, "pass_at_1": 0.5}
    path.write_text(json.dumps(doc | ({"weights": weights} if weights else {})))
    return str(path)


def test_rl_leaves_out_the_tasks_the_starting_model_solved_in_every_sample(tmp_path: Path):
    everything = training_tasks(TasksSection(suite="micro"))
    ids = [task.instance_id for task in everything]
    passes = {ids[0]: 4, ids[1]: 3, ids[2]: 0, "micro-train-9999": 4}  # the last: not a task
    source = TasksSection(suite="micro", skip_solved=evaluation(tmp_path, passes))
    kept = [task.instance_id for task in training_tasks(source)]
    assert kept == ids[1:]  # only the task passed in all 4 samples is left out
    assert len(load_tasks(suite="micro", split="train")) == len(ids)  # evaluations keep all


def test_a_skip_solved_file_that_cannot_be_used_is_refused_clearly(tmp_path: Path) -> None:
    def refused(skip_solved: str, match: str) -> None:
        with pytest.raises(TaskError, match=match):
            training_tasks(TasksSection(suite="micro", skip_solved=skip_solved))

    refused(str(tmp_path / "missing.json"), "cannot read .*missing.json")
    (tmp_path / "bad.json").write_text("{")
    refused(str(tmp_path / "bad.json"), "is not JSON")
    for other in ({"pass_at_1": 0.5}, {"split": "train", "task_passes": {}}, [1, 2]):
        (tmp_path / "other.json").write_text(json.dumps(other))
        refused(str(tmp_path / "other.json"), r"not the JSON of `fleetrl eval MODEL --split train")
    refused(evaluation(tmp_path, {"micro-val-0000": 4}, split="val"), "evaluated split 'val'")
    refused(evaluation(tmp_path, {"product-train-0000": 4}), "none of the tasks .* another suite")
    every = {task.instance_id: 4 for task in load_tasks(suite="micro", split="train")}
    refused(evaluation(tmp_path, every), "solves every task; none left")


def test_a_skip_solved_file_of_another_models_weights_is_refused(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    base = resolve_checkpoint("base")
    first = training_tasks(TasksSection(suite="micro"))[0].instance_id
    of_base = evaluation(tmp_path, {first: 4}, weights=weights_digest(base))
    source = TasksSection(suite="micro", skip_solved=of_base)
    assert first not in {task.instance_id for task in training_tasks(source, base)}
    with pytest.raises(TaskError, match=r"evaluated other weights, not those of model\.path"):
        training_tasks(source, tiny_checkpoint)
    unnamed = TasksSection(suite="micro", skip_solved=evaluation(tmp_path, {first: 4}))
    with pytest.raises(TaskError, match="evaluated weights it does not name"):
        training_tasks(unnamed, base)
    assert len(training_tasks(unnamed)) == len(training_tasks(source))  # unchecked: a region
