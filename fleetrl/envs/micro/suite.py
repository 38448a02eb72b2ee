"""The bundled `micro` suite: 872 one-function Python bug fixes a tiny model can learn.

Each task is a repository holding one module `<f>.py` (2-10 lines, one function, sometimes
a helper) with one bug in it, and a hidden test file `test_<f>.py` of three one-assert
tests. The problem statement is the first failing assertion, e.g.

    `qzvk([3, 1, 2])` should return [3, 3, 3], but it returns [].

so a whole episode (statement, file, fix) fits in a few hundred tokens.

How it is made (`fleetrl.envs.micro.templates` has the templates):

- 20 function templates x 2-4 bug kinds each (62 template/bug pairs) over 8 kinds:
  operator swap, comparison flip, off-by-one, constant change, dropped statement, swapped
  arguments, negated condition, wrong return value. Each split cycles through all pairs.
- Function names are random letters (4-5), unique across the suite; local names random
  letters (1-3). Random letters tokenise into pieces seen in training, unlike unseen English
  words, so names carry no meaning to memorise and none to trip over.
- Splits, generated in this order: 440 `train`, 310 `heldout`, 310 `val` and 60
  `heldout-templates`. Train, held-out and validation share the templates and bug kinds
  but no function: every function name differs, every template integer constant of a
  held-out or validation task is congruent to 3 mod 4 and of a train task is not, and
  every template letter of a held-out or validation task comes from HELDOUT_LETTERS and of
  a train task does not. Validation is where hyperparameters and temperatures are chosen;
  held-out (unseen instances of known bug patterns) only reports. `heldout-templates`
  uses five templates (UNSEEN_TEMPLATES) no other split has, with held-out constants: it
  measures fixing a function of a shape never trained on. Train and the first 100
  held-out tasks are byte for byte those of version v1 (the seeds stay "v1"), so models
  trained on v1 stay valid.
- Held-out is 310 tasks, five instances of each pair: at 100 a 95% interval over tasks
  spanned about 18 points around a pass@1 of 0.7, too wide to tell a ten-point gain from
  noise; at 310 it spans about 10. Its tasks 100-309 continue the same draw, after which
  every other split's tasks came out unchanged.
- Validation is 310 tasks too, so that a choice between two settings a few points apart
  can be made on it. Its first 62 (one instance of each pair) are the earlier `val`, the
  rest continue its draw, and every other split came out unchanged; the temperature sweep
  of every evaluation still runs on those first 62 (`eval.sweep_tasks`).
- Tests: the correct and the buggy function run in-process on random arguments; the three
  tests are distinct calls, at least one of which the bug changes (FAIL_TO_PASS), the
  others may still pass (PASS_TO_PASS). A call runs at most STEP_LIMIT lines; one where
  the bug never ends is not drawn as a test.
- Deterministic: seeded from MICRO_VERSION and the split name, so the same code gives the
  same suite byte for byte (base-commit shas included). Change MICRO_VERSION whenever a
  task's record changes; cached repositories live under a folder named after it.

Records are built in memory (well under a second); a task's repository is written under
`cache_dir()/suites/micro/<version>/<instance_id>` on first use (`workspace.ensure_repo`
calls `materialise`, found through the registry, `fleetrl.envs.tasks.suites`). The statement's
wording lives in `fleetrl.envs.micro.statement`, beside its parser.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetrl.envs.micro.names import RESERVED_FUNCTION_NAMES, RESERVED_NAMES, fresh_name
from fleetrl.envs.micro.statement import write_statement
from fleetrl.envs.micro.templates import TEMPLATES, UNSEEN_TEMPLATES, Template
from fleetrl.envs.tasks.git import flat_commit_sha, unified_diff
from fleetrl.files import cache_dir
from fleetrl.types import Task

MICRO_VERSION = "v2"
SEED_VERSION = "v1"  # in the splits' seeds: unchanged, so train and heldout stay as in v1
SPLIT_SIZES = {"train": 440, "heldout": 310, "val": 310, "heldout-templates": 60}  # in order
HELDOUT_LETTERS = "dhkpuwz"  # template letters of evaluation tasks; train tasks use the rest
TESTS_PER_TASK = 3
STEP_LIMIT = 10_000  # lines one call of a micro function may run; they run under a hundred
PRODUCT_TRAIN_SIZE = 440  # train tasks of the `product` suite (`build_product_suite`)
PRODUCT_SEED = "fleetrl-micro-control-v1"  # its draw: the positive control's, the same tasks


def split_of_int(value: int) -> str:
    """The side a template integer constant belongs to: "heldout" (3 mod 4, the constants
    of every evaluation split) or "train"."""
    return "heldout" if value % 4 == 3 else "train"


def split_of_letter(letter: str) -> str:
    """The side a template letter belongs to: "heldout" (every evaluation split) or "train"."""
    return "heldout" if letter in HELDOUT_LETTERS else "train"


def constants_side(split: str) -> str:
    """Which constants and letters a split's tasks draw: "train" for train, "heldout" for
    the evaluation splits (validation included, so it resembles held-out)."""
    return "train" if split == "train" else "heldout"


def templates_of(split: str) -> list[Template]:
    """The templates a split draws from: the unseen ones for `heldout-templates`."""
    return UNSEEN_TEMPLATES if split == "heldout-templates" else TEMPLATES


@dataclass(frozen=True)
class _Spec:
    """Everything a micro task is made of, before paths and diffs are attached."""

    instance_id: str
    split: str
    template: str
    kind: str
    function: str  # name of the function with the bug (= module name)
    constants: tuple[tuple[str, int | str], ...]  # the template's int and letter fields
    buggy: str  # the module at the base commit
    correct: str  # the module after the gold fix
    tests: str  # the hidden test file
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    statement: str


class _Names:
    """Random-letter identifiers; function names never repeat within the whole suite."""

    def __init__(self) -> None:
        self.functions: set[str] = set()

    def function(self, rng: random.Random) -> str:
        return fresh_name(rng, (4, 5), self.functions, RESERVED_FUNCTION_NAMES)

    def local(self, rng: random.Random, taken: set[str]) -> str:
        # 1-3 letters: never one of the 4-5 letter function names.
        return fresh_name(rng, (1, 3), taken, RESERVED_NAMES)


def _fields(template: Template) -> list[str]:
    patterns = [template.source] + [part for bug in template.bugs.values() for part in bug]
    found = {name for text in patterns for _, name, _, _ in string.Formatter().parse(text) if name}
    return sorted(found)


def _params(template: Template, split: str, rng: random.Random) -> dict[str, int | str]:
    params: dict[str, int | str] = {}
    side = constants_side(split)
    for name, (lo, hi) in template.ints.items():
        value = rng.choice([n for n in range(lo, hi + 1) if split_of_int(n) == side])
        params[name], params[f"{name}_next"] = value, value + 1
    letters = [c for c in string.ascii_lowercase if split_of_letter(c) == side]
    letter_set = 3 if "{cs}" in template.source else 0  # `{cs}`: three distinct letters
    picked = rng.sample(letters, len(template.chars) + letter_set)  # all distinct
    for name in template.chars:
        params[name] = picked.pop()
    if letter_set:
        params["cs"] = "".join(sorted(picked))
    return params


def _load(source: str, function: str) -> Callable[..., object]:
    namespace: dict[str, object] = {}
    exec(compile(source, f"{function}.py", "exec"), namespace)
    return namespace[function]  # type: ignore[return-value]


class StepLimitExceeded(Exception):
    """A call ran more than STEP_LIMIT lines: a bug that makes a loop never end."""


def _outcome(fn: Callable[..., object], args: tuple[object, ...]) -> tuple[bool, object]:
    """(True, return value) or (False, exception class name) of calling `fn`. A call that
    runs more than STEP_LIMIT lines stops with StepLimitExceeded, so a bug that drops a
    `while` loop's increment cannot hang task generation; counting lines, not seconds,
    keeps the suite the same on any machine."""
    steps = 0

    def count(frame: object, event: str, arg: object) -> object:
        nonlocal steps
        if event == "line":
            steps += 1
            if steps > STEP_LIMIT:
                raise StepLimitExceeded  # raised inside the traced call, which it ends
        return count

    previous = sys.gettrace()
    sys.settrace(count)
    try:
        return True, fn(*copy.deepcopy(args))
    except Exception as err:  # any exception is a failing test, recorded by name
        return False, type(err).__name__
    finally:
        sys.settrace(previous)


def _passes(expected: object, outcome: tuple[bool, object]) -> bool:
    return outcome[0] and outcome[1] == expected  # the test's own `assert got == expected`


def _call(function: str, args: tuple[object, ...]) -> str:
    return f"{function}({', '.join(repr(a) for a in args)})"


def _make(
    instance_id: str, split: str, template: Template, kind: str, rng: random.Random, names: _Names
) -> _Spec:
    params = _params(template, split, rng)
    for _ in range(50):  # retry names until the bug's fragment is unambiguous
        mapping: dict[str, int | str] = dict(params)
        taken: set[str] = set()
        for field in _fields(template):
            if field in ("f", "g"):
                mapping[field] = names.function(rng)
            elif field not in mapping:
                mapping[field] = names.local(rng, taken)
        correct = template.source.format(**mapping)
        old, new = (part.format(**mapping) for part in template.bugs[kind])
        if correct.count(old) == 1:
            break
        names.functions.difference_update({mapping["f"], mapping.get("g")})
    else:
        raise RuntimeError(f"template {template.name}: fragment of {kind} is never unique")
    buggy = correct.replace(old, new)
    function = str(mapping["f"])

    # Draw calls until three distinct ones include at least one the bug changes.
    right, wrong = _load(correct, function), _load(buggy, function)
    cases: list[tuple[tuple[object, ...], object, tuple[bool, object]]] = []
    for _ in range(500):
        args = template.args(rng, params)
        ok, expected = _outcome(right, args)
        if not ok or any(repr(args) == repr(seen) for seen, _, _ in cases):
            continue
        outcome = _outcome(wrong, args)
        if outcome == (False, StepLimitExceeded.__name__):
            continue  # a hidden test must end, with the bug too
        cases.append((args, expected, outcome))
        failing = [c for c in cases if not _passes(c[1], c[2])]
        if failing and len(cases) >= TESTS_PER_TASK:
            break
    else:
        raise RuntimeError(f"{instance_id}: no call tells the bug in {template.name} apart")
    first_failing = failing[0]
    others = [c for c in cases if c is not first_failing][: TESTS_PER_TASK - 1]
    chosen = [first_failing, *others]
    rng.shuffle(chosen)

    test_file = f"test_{function}.py"
    lines = [f"from {function} import {function}\n"]
    f2p, p2p, statement = [], [], ""
    for number, (args, expected, outcome) in enumerate(chosen, start=1):
        call = _call(function, args)
        lines.append(f"\n\ndef test_{number}():\n    assert {call} == {expected!r}\n")
        node = f"{test_file}::test_{number}"
        if _passes(expected, outcome):
            p2p.append(node)
            continue
        f2p.append(node)
        if not statement:
            statement = write_statement(call, expected, outcome)
    return _Spec(
        instance_id=instance_id,
        split=split,
        template=template.name,
        kind=kind,
        function=function,
        constants=tuple(sorted((k, v) for k, v in params.items() if not k.endswith("_next"))),
        buggy=buggy,
        correct=correct,
        tests="".join(lines),
        fail_to_pass=tuple(f2p),
        pass_to_pass=tuple(p2p),
        statement=statement,
    )


@functools.cache
def _specs() -> tuple[_Spec, ...]:
    """Every task of the suite, train first; cached because it never changes in a process."""
    names = _Names()
    specs = []
    for split, size in SPLIT_SIZES.items():
        rng = random.Random(f"fleetrl-micro-{SEED_VERSION}-{split}")
        order = [(t, kind) for t in templates_of(split) for kind in sorted(t.bugs)]
        rng.shuffle(order)
        for index in range(size):
            template, kind = order[index % len(order)]
            instance_id = f"micro-{split}-{index:04d}"
            specs.append(_make(instance_id, split, template, kind, rng, names))
    return tuple(specs)


@functools.cache
def _spec_by_id() -> dict[str, _Spec]:
    return {spec.instance_id: spec for spec in _specs()}


def constants_of(task: Task) -> dict[str, int | str]:
    """The template constants (integers and letters) a micro task was drawn with, by field:
    the symbols that tell an evaluation task's instances from train's."""
    return dict(_spec_by_id()[task.instance_id].constants)


def suite_root() -> Path:
    """The folder this version's task repositories are written under."""
    return cache_dir() / "suites" / "micro" / MICRO_VERSION


def _task(spec: _Spec, repo: Path) -> Task:
    """The Task record of a spec whose repository is (to be) at `repo`."""
    module = f"{spec.function}.py"
    test_file = f"test_{spec.function}.py"
    return Task(
        instance_id=spec.instance_id,
        repo=str(repo),
        base_commit=flat_commit_sha({module: spec.buggy.encode()}),
        problem_statement=spec.statement,
        patch=unified_diff(module, spec.buggy, spec.correct),
        test_patch=unified_diff(test_file, None, spec.tests),
        FAIL_TO_PASS=list(spec.fail_to_pass),
        PASS_TO_PASS=list(spec.pass_to_pass),
        suite="micro",
        split=spec.split,
        test_files=[test_file],
        language="python",
        kind=spec.kind,
        origin=spec.template,
    )


def build_suite() -> list[Task]:
    """All micro tasks as fresh Task records (in SPLIT_SIZES order), repositories not written."""
    root = suite_root()
    return [_task(spec, root / spec.instance_id) for spec in _specs()]


def _fresh_specs(size: int, draw_as: str, seed: str, prefix: str) -> list[_Spec]:
    """`size` specs beyond the suite, drawn like `draw_as` tasks (its templates, constants
    and letters; bug kinds cycled) from `seed`, with function names no suite task uses."""
    names = _Names()
    names.functions |= {spec.function for spec in _specs()}
    rng = random.Random(seed)
    order = [(t, kind) for t in templates_of(draw_as) for kind in sorted(t.bugs)]
    rng.shuffle(order)
    specs = []
    for index in range(size):
        template, kind = order[index % len(order)]
        specs.append(_make(f"{prefix}-{index:04d}", draw_as, template, kind, rng, names))
    return specs


@functools.cache
def _product_specs() -> dict[str, _Spec]:
    """The `product` suite's train tasks by id: drawn like `val` (`build_product_suite`)."""
    specs = _fresh_specs(PRODUCT_TRAIN_SIZE, "val", PRODUCT_SEED, "product-train")
    return {spec.instance_id: dataclasses.replace(spec, split="train") for spec in specs}


def build_product_suite() -> list[Task]:
    """The bundled `product` suite: the product-specialisation case, as Task records.

    Its `train` split is PRODUCT_TRAIN_SIZE new instances of the micro templates written in
    the product's conventions (every template integer 3 mod 4, letters from
    HELDOUT_LETTERS): the conventions of micro's evaluation splits, which micro's own
    `train` never uses, so a model SFT'd on micro `train` (the shipped bases) has never
    written them. Its `val`, `heldout` and `heldout-templates` are micro's, unchanged.
    So the product has hidden tests for its tasks but no demonstrations: RL on them is
    what specialises the generic model to the product. Repositories are written on first
    use under `cache_dir()/suites/product/<version>`.
    """
    root = cache_dir() / "suites" / "product" / MICRO_VERSION
    train = [
        dataclasses.replace(_task(spec, root / spec.instance_id), suite="product")
        for spec in _product_specs().values()
    ]
    return train + [task for task in build_suite() if task.split != "train"]


def materialise_product(task: Task, dest: Path) -> None:
    """Write a `product` train task's base tree into the empty folder `dest`."""
    _write_base(_product_specs()[task.instance_id], dest)


def materialise(task: Task, dest: Path) -> None:
    """Write a micro task's base tree (the buggy module only) into the empty folder `dest`."""
    _write_base(_spec_by_id()[task.instance_id], dest)


def _write_base(spec: _Spec, dest: Path) -> None:
    """A task's base tree: the buggy module only."""
    (dest / f"{spec.function}.py").write_text(spec.buggy, encoding="utf-8")
