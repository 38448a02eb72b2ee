"""The demonstrations' cache key moves with everything their tokens depend on, and with
nothing else (generating them, with sandboxes: tests/env/rollout)."""

from dataclasses import replace

from fleetrl.config import HarnessSection
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout import demos as demos_module
from fleetrl.rollout.demos import demos_key

TOKENIZER = bundled_tokenizer()
HARNESS = HarnessSection()


def test_cache_key_moves_with_what_the_tokens_depend_on(tmp_path, monkeypatch):
    tasks = load_tasks(suite="micro", split="train")[:2]
    key = demos_key(tasks, TOKENIZER, HARNESS, ["fix"], 0)
    assert key == demos_key(list(tasks), TOKENIZER, HarnessSection(), ["fix"], 0)
    moved = replace(tasks[0], repo="/elsewhere")  # where the repository lives does not count
    assert demos_key([moved, tasks[1]], TOKENIZER, HARNESS, ["fix"], 0) == key
    changed = [
        demos_key(tasks[:1], TOKENIZER, HARNESS, ["fix"], 0),
        demos_key(tasks, TOKENIZER, HARNESS.model_copy(update={"max_turns": 5}), ["fix"], 0),
        demos_key(tasks, TOKENIZER, HARNESS, ["fix", "reproduce"], 0),
        demos_key(tasks, TOKENIZER, HARNESS, ["fix"], 1),
    ]
    # An edit of the expert's source: a copy of every source file, then one line more.
    sources = demos_module._sources(tasks)
    copies = []
    for path in sources:
        copy = tmp_path / str(len(copies)) / path.name
        copy.parent.mkdir()
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    monkeypatch.setattr(demos_module, "_sources", lambda tasks: tuple(copies))
    assert demos_key(tasks, TOKENIZER, HARNESS, ["fix"], 0) == key
    (expert,) = [copy for copy in copies if copy.name == "expert.py"]
    expert.write_text(expert.read_text() + "# edited\n")
    changed.append(demos_key(tasks, TOKENIZER, HARNESS, ["fix"], 0))
    assert len({key, *changed}) == 1 + len(changed)
    # The micro guide's files and the harness's are hashed; the suite's own files are not:
    # what they make is in the task records.
    names = {p.name for p in sources}
    assert {"expert.py", "names.py", "loop.py", "tools.py", "demos.py"} <= names
    assert names.isdisjoint({"suite.py", "shapes.py"})
