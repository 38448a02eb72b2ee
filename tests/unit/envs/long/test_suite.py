"""The long suite's records: sizes, kinds, splits disjoint in names and constants, facts
and edits that hold, determinism, the CLI, and the window it is made to overflow (the
tasks' episodes: test_expert.py here, and under the real verifier tests/env/rollout)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetrl.cli.tasks import tasks_app
from fleetrl.config_files import load_config
from fleetrl.envs.harness.loop import task_prompt
from fleetrl.envs.long import suite as long
from fleetrl.envs.long.expert import LONG_GUIDE
from fleetrl.envs.tasks.suites import guide_for, load_tasks
from fleetrl.model.chat import IM_END, Message, ToolCall, encode_chat, format_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import Task

TOKENIZER = bundled_tokenizer()
EVALUATION = ("val", "heldout")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Task]]:
    # Module-scoped: set the cache here, or the records would point into the real cache.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLEETRL_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield load_tasks(suite="long")


def spec(task: Task) -> long.LongSpec:
    return long.spec_of(task)


def identifiers(task: Task) -> set[str]:
    """The names a task's files define or import: modules, functions, module constants and
    function locals (parameters aside: one or two letters, unique within a task only)."""
    names = set()
    for path, text in spec(task).files:
        names.add(path.removesuffix(".py"))
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
                parameters = {a.arg for a in node.args.args}
                stored = (n for n in ast.walk(node) if isinstance(n, ast.Name))
                names |= {
                    n.id for n in stored if isinstance(n.ctx, ast.Store) and n.id not in parameters
                }
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.ImportFrom):
                names |= {node.module or "", *(a.name for a in node.names)}
    return names


def fact_names(task: Task) -> set[str]:
    """The identifiers the facts name: `v = 76` -> v, `h.py` -> h, `srh` -> srh."""
    return {
        word.removesuffix(".py")
        for fact in task.facts
        for word in re.findall(r"[A-Za-z_][A-Za-z_.]*", fact)
    }


def test_sizes_splits_and_kinds(suite: list[Task]) -> None:
    assert Counter(t.split for t in suite) == {"train": 600, "val": 100, "heldout": 200}
    assert long.SPLIT_SIZES == {"train": 600, "val": 100, "heldout": 200}
    assert len({t.instance_id for t in suite}) == 900
    assert {t.suite for t in suite} == {"long"}
    for split in long.SPLIT_SIZES:
        tasks = [t for t in suite if t.split == split]
        assert [t.instance_id for t in tasks] == [
            f"long-{split}-{i:04d}" for i in range(len(tasks))
        ]
        # Kinds in turn: every split has each kind, as evenly as its size allows.
        assert [t.kind for t in tasks] == [long.KINDS[i % 3] for i in range(len(tasks))]
        counts = Counter(t.kind for t in tasks)
        assert set(counts) == {"value", "chain", "multi"}
        assert max(counts.values()) - min(counts.values()) <= 1
    for task in suite:
        s = spec(task)
        assert (s.split, s.kind, s.instance_id) == (task.split, task.kind, task.instance_id)
        assert len(s.files) == 2 and len(s.edits) == (2 if task.kind == "multi" else 1)
        assert task.origin == f"{s.module}.py::{s.function}"
        nodes = [f"test_{s.function}.py::test_{n}" for n in (1, 2, 3)]
        assert nodes == task.FAIL_TO_PASS
        assert task.test_files == [f"test_{s.function}.py"]
        assert guide_for(task) is LONG_GUIDE


def test_names_are_disjoint_across_splits(suite: list[Task]) -> None:
    by_split: dict[str, set[str]] = defaultdict(set)
    owners: dict[str, set[str]] = defaultdict(set)
    for task in suite:
        names = identifiers(task)
        assert fact_names(task) <= names, task.instance_id  # the facts name the task's own
        assert {spec(task).module, spec(task).function} <= names
        by_split[task.split] |= names
        for name in names:
            owners[name].add(task.instance_id)
    # Every module, function, constant and local is one task's only (the docstring's rule),
    # so no evaluation task names anything a train task does.
    assert {name: ids for name, ids in owners.items() if len(ids) > 1} == {}
    for split in EVALUATION:
        assert not by_split["train"] & by_split[split]
    records = {s: {t.origin for t in suite if t.split == s} for s in long.SPLIT_SIZES}
    assert not records["train"] & (records["val"] | records["heldout"])
    modules = {s: {o.split(".py::")[0] for o in records[s]} for s in records}
    functions = {s: {o.split("::")[1] for o in records[s]} for s in records}
    for split in EVALUATION:
        assert not modules["train"] & modules[split]
        assert not functions["train"] & functions[split]
        facts = {n for t in suite if t.split == split for n in fact_names(t)}
        assert not facts & by_split["train"]


def test_constants_are_disjoint_across_splits(suite: list[Task]) -> None:
    """Every integer of an evaluation task's facts is 3 mod 4, none of a train task's; so
    is every integer literal of its files but the `* 2` every chain task's `f` has."""
    for task in suite:
        evaluation = task.split in EVALUATION
        numbers = [int(n) for fact in task.facts for n in re.findall(r"\d+", fact)]
        assert numbers, task.instance_id  # every task has a number among its facts
        assert all((n % 4 == 3) == evaluation for n in numbers), (task.instance_id, numbers)
        literals = [
            node.value
            for _, text in spec(task).files
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and type(node.value) is int
        ]
        if task.kind == "chain":
            literals.remove(2)  # `return g(a) * 2`, the same in every split
        assert all((n % 4 == 3) == evaluation for n in literals), task.instance_id


def test_facts_are_in_the_big_file_and_the_edits_are_unique(suite: list[Task]) -> None:
    for task in suite:
        s = spec(task)
        big = s.files[0][1]
        assert s.first.endswith(".py") and s.second.endswith(".py") and s.first != s.second
        assert task.facts == list(s.facts) and len(task.facts) >= 2
        for fact in task.facts:
            # Read before the summary: the big file holds every fact, the path of the small
            # file as the module it imports or names.
            module = s.second.removesuffix(".py")
            assert fact in big or (fact == s.second and re.search(rf"\b{module}\b", big)), (
                task.instance_id,
                fact,
            )
        assert s.second in task.facts  # where to go next
        # The problem statement names the call and the big file, nothing the facts hold.
        assert task.problem_statement == s.statement
        assert s.call in task.problem_statement and s.first in task.problem_statement
        assert not any(fact in task.problem_statement for fact in task.facts if not fact.isdigit())
        files = dict(s.files)
        for edit in s.edits:
            assert files[edit.path].count(edit.old) == 1, (task.instance_id, edit)
            files[edit.path] = files[edit.path].replace(edit.old, edit.new)
        assert {p: files[p] for p, _ in s.fixed} == dict(s.fixed)
        assert {p for p, t in files.items() if t != dict(s.files)[p]} == {p for p, _ in s.fixed}
        assert s.expected != s.got
        assert f"def {s.function}(a):" in big


def test_materialise_writes_the_two_modules(suite: list[Task], tmp_path: Path) -> None:
    task = suite[0]
    long.materialise(task, tmp_path)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == dict(spec(task).files)
    micro = dataclasses.replace(task, suite="micro")
    with pytest.raises(ValueError, match="no task of the long suite"):
        long.spec_of(micro)


# sha256 of the suite's records (repo paths left out). Any change to the suite changes every
# number measured on it: when this fails after an intended change, update this value, and
# bump long.LONG_VERSION too if an existing task's record changed (its cached repository
# would be stale).
SUITE_DIGEST = "e825bde823796c3f8729f87641bb0221ca66b6cf28947eed6f688d95e34a4316"


def _digest(tasks: list[Task]) -> str:
    records = [{**dataclasses.asdict(t), "repo": ""} for t in tasks]
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def test_the_suite_is_deterministic(suite: list[Task]) -> None:
    long._specs.cache_clear()
    long._spec_by_id.cache_clear()
    again = long.build_suite()
    assert [dataclasses.replace(t, repo="") for t in again] == [
        dataclasses.replace(t, repo="") for t in suite
    ]
    assert _digest(again) == _digest(suite) == SUITE_DIGEST


def test_tasks_list_shows_the_heldout_split(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(tasks_app, ["list", "--suite", "long", "--split", "heldout"])
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [f"long-heldout-{i:04d}" for i in range(200)]
    as_json = CliRunner().invoke(tasks_app, ["list", "--suite", "long", "--json"])
    assert len(json.loads(as_json.stdout)) == 900
    wrong = CliRunner().invoke(tasks_app, ["list", "--suite", "long", "--split", "dev"])
    assert wrong.exit_code == 2 and "no split 'dev'" in wrong.stderr


def _read(path: str) -> list[int]:
    reply = Message("assistant", "", [ToolCall("read_file", {"path": path})])
    return TOKENIZER.encode(format_reply(reply) + IM_END)


def test_both_reads_overflow_the_window(suite: list[Task]) -> None:
    """The system prompt and task of the `long` preset, then the big file's read and the
    small one's, as the harness renders them (call, result), pass WINDOW: a policy that
    does not summarise cannot hold both. Each file alone is in its size range."""
    harness = load_config(Path("long")).harness
    assert harness.max_context == long.WINDOW == 1024
    for task in suite:
        s = spec(task)
        big, small = (long._numbered_tokens(text) for _, text in s.files)
        assert long.BIG_TOKENS[0] <= big <= long.BIG_TOKENS[1], task.instance_id
        assert long.SMALL_TOKENS[0] <= small <= long.SMALL_TOKENS[1], task.instance_id
        conversation = [*task_prompt(task, harness)]
        for path, text in s.files:
            numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1))
            conversation += [
                Message("assistant", "", [ToolCall("read_file", {"path": path})]),
                Message("tool", numbered),
            ]
        rendered = encode_chat(TOKENIZER, conversation, None)
        assert len(rendered) > long.WINDOW, (task.instance_id, len(rendered))
