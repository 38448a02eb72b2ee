"""The report's summaries before and after training: `summary_examples` runs one episode
per model on the first held-out tasks with facts, and says which facts each kept."""

from pathlib import Path

from fleetrl.config_files import load_config, with_overrides
from fleetrl.orchestrate.local import SUMMARY_EXAMPLES, summary_examples


def test_each_model_summarises_the_same_held_out_tasks(tiny_checkpoint):
    config = load_config(Path("long"))
    models = [("base", tiny_checkpoint), ("final", tiny_checkpoint)]
    examples = summary_examples(config, models, {"final": {"temperature": 0.0}})
    assert examples is not None
    ids = [task["task_id"] for task in examples["tasks"]]
    assert ids == [f"long-heldout-{i:04d}" for i in range(SUMMARY_EXAMPLES)]
    assert all(len(task["facts"]) >= 2 for task in examples["tasks"])
    for label in ("base", "final"):
        assert [e["task_id"] for e in examples[label]] == ids
        for episode, task in zip(examples[label], examples["tasks"], strict=True):
            assert set(episode["kept"]) <= set(task["facts"])
            assert episode["reward"] in (0.0, 1.0)


def test_no_examples_without_facts_or_summarisation(tiny_checkpoint):
    models = [("final", tiny_checkpoint)]
    assert summary_examples(load_config(None), models, {}) is None  # micro: no facts
    off = with_overrides(load_config(Path("long")), {"harness": {"summarise_at": 0.0}})
    assert summary_examples(off, models, {}) is None
