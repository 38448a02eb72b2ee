"""The micro suite: size, split policy, statements, determinism (the records only; the
tasks' repositories, patches and tests are checked in tests/env/envs/micro)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetrl.envs.micro import suite as micro
from fleetrl.envs.micro.templates import TEMPLATES, UNSEEN_TEMPLATES, Template
from fleetrl.envs.tasks.mutations import KINDS
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.types import Task

# sha256 of the suite's records (repo paths left out). Any change to the suite changes
# every number measured on it: when this fails after an intended change, update this value,
# and bump micro.MICRO_VERSION too if an existing task's record changed (its cached
# repository would be stale); new tasks alone need no bump.
SUITE_DIGEST = "cf36ba756025fbe02463d3dbc005e08dc8c4eae0517b6269c28ac64f2a4795ff"
V1_DIGEST = "9d5644576f05e8a3915bc561fabf2c463426e1fe7af787341af9beaa42b1f6d0"  # train + heldout
# val + heldout-templates, as before held-out grew to 310
V2_DIGEST = "82f55bb949431cb5782cf993eb2e07cb593d7eba42046b56cbfd54c03806627d"
# held-out at 310 tasks, as before val grew to 310
HELDOUT_DIGEST = "0bbb37c6780d05ace61476ddbbe12b689d4d09dc9fc2a799baecf941eca41326"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Task]]:
    # Module-scoped fixtures run before the autouse one: set the cache here too, or the
    # records would point into the user's real cache.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLEETRL_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield load_tasks(suite="micro")


def _digest(tasks: list[Task]) -> str:
    # `facts` came later and is empty on micro tasks: left out, the pinned digests stay.
    records = [{**dataclasses.asdict(t), "repo": ""} for t in tasks]
    for record in records:
        assert record.pop("facts") == []
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def test_sizes_kinds_and_templates(suite: list[Task]) -> None:
    splits = Counter(task.split for task in suite)
    assert splits == {"train": 440, "heldout": 310, "val": 310, "heldout-templates": 60}
    assert len({task.instance_id for task in suite}) == len(suite) >= 500
    assert len(TEMPLATES) >= 15 and len(UNSEEN_TEMPLATES) >= 5
    assert {task.kind for task in suite} == set(KINDS) - {"feature_deletion"}
    assert all(2 <= len(t.bugs) <= 4 for t in TEMPLATES + UNSEEN_TEMPLATES)
    for split in splits:  # each split cycles through every template/bug pair it draws from
        pairs = {(t.name, kind) for t in micro.templates_of(split) for kind in t.bugs}
        assert {(t.origin, t.kind) for t in suite if t.split == split} == pairs


def test_growing_splits_kept_every_earlier_task(suite: list[Task]) -> None:
    # The shipped base model was trained on v1's train split: adding splits kept it and v1's
    # 100 held-out tasks; growing held-out to 310 kept those and val and heldout-templates;
    # growing val to 310 kept its first 62 (the temperature sweep's) and everything else.
    heldout = [t for t in suite if t.split == "heldout"]
    val = [t for t in suite if t.split == "val"]
    unseen = [t for t in suite if t.split == "heldout-templates"]
    assert _digest([t for t in suite if t.split == "train"] + heldout[:100]) == V1_DIGEST
    assert _digest(val[:62] + unseen) == V2_DIGEST
    assert _digest(heldout) == HELDOUT_DIGEST
    for split, tasks in (("heldout", heldout), ("val", val)):
        assert all(t.instance_id == f"micro-{split}-{i:04d}" for i, t in enumerate(tasks))


def test_splits_share_no_function_constant_letter_or_unseen_template(suite: list[Task]) -> None:
    specs = micro._specs()
    by_split = {s: [x for x in specs if x.split == s] for s in micro.SPLIT_SIZES}
    functions = {s: {x.function for x in by_split[s]} for s in by_split}
    assert sum(len(f) for f in functions.values()) == len(specs)  # unique in the whole suite
    assert not {x.correct for x in by_split["train"]} & {
        x.correct for s in ("heldout", "val", "heldout-templates") for x in by_split[s]
    }
    unseen = {t.name for t in UNSEEN_TEMPLATES}
    assert {x.template for x in by_split["heldout-templates"]} == unseen
    assert not unseen & {x.template for x in specs if x.split != "heldout-templates"}
    for task in suite:
        side = micro.constants_side(task.split)
        assert side == ("train" if task.split == "train" else "heldout")
        constants = micro.constants_of(task)
        assert not any(field.endswith("_next") for field in constants)
        for value in constants.values():
            if isinstance(value, int):
                assert micro.split_of_int(value) == side
            else:  # one letter, or the three letters of `{cs}`
                assert all(micro.split_of_letter(c) == side for c in value)


def test_problem_statements_are_short_and_name_the_call(suite: list[Task]) -> None:
    for task in suite:
        function = task.test_files[0].removeprefix("test_").removesuffix(".py")
        assert task.problem_statement.startswith(f"`{function}(")
        assert len(task.problem_statement) < 200
        assert "should return" in task.problem_statement


def test_suite_is_deterministic_and_pinned(suite: list[Task]) -> None:
    micro._specs.cache_clear()
    micro._spec_by_id.cache_clear()
    again = load_tasks(suite="micro")
    assert _digest(again) == _digest(suite) == SUITE_DIGEST


def _countdown(x: int) -> int:
    """A halving loop with its halving dropped by a bug: it never ends when x > 2."""
    n = 0
    while x > 2:
        n += 1
    return n


def test_a_call_that_never_ends_stops_at_the_step_limit_and_tracing_is_restored() -> None:
    before = sys.gettrace()
    assert micro._outcome(_countdown, (9,)) == (False, "StepLimitExceeded")
    assert micro._outcome(_countdown, (1,)) == (True, 0)
    assert sys.gettrace() is before


def _halving(bug: tuple[str, str]) -> Template:
    return Template(
        name="halving",
        source="def {f}({x}):\n    {n} = 0\n    while {x} > 2:\n        {n} += 1\n"
        "        {x} = {x} // 2\n    return {n}\n",
        bugs={"comparison_flip": bug},
        args=lambda r, _p: (r.randint(-10, 20),),
    )


def test_tests_never_call_the_bug_where_it_never_ends() -> None:
    # `x < 2` halves a small x forever (0 // 2 == 0): only calls that skip the loop end.
    flipped = _halving(("    while {x} > 2:\n", "    while {x} < 2:\n"))
    spec = micro._make("t-0", "train", flipped, "comparison_flip", random.Random(0), micro._Names())
    calls = [
        int(line.split("(")[1].split(")")[0]) for line in spec.tests.splitlines() if "==" in line
    ]
    assert len(calls) == micro.TESTS_PER_TASK and all(x >= 2 for x in calls)
    # Dropping the halving never ends on any call that enters the loop, and every call
    # that skips it returns the same: no test can tell that bug apart.
    dropped = _halving(("        {x} = {x} // 2\n", ""))
    with pytest.raises(RuntimeError, match="no call tells the bug"):
        micro._make("t-1", "train", dropped, "comparison_flip", random.Random(0), micro._Names())
