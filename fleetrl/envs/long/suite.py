"""The bundled `long` suite: two-file fixes that need more context than the window holds.

Every task is read the same way: one big file (about 680 tokens as `read_file` shows it),
then one small file (about 285), then the fix. Both reads do not fit a 1024-token window
beside the prompt, so an agent that keeps reading whole files must carry what the big file
said (a line, a name, a number, a path: the task's `facts`) across a summary into a fresh
context, where it reads the small file and edits. Three kinds:

- `value`: a value defined in one module and used wrongly in another. The big file holds
  `def f(a): v = W  # C in d.py` with a wrong literal W; `d.py` defines `C = R` among other
  constants. Fix: `v = R`. Facts: the line `v = W`, the name C, the path d.py.
- `chain`: a failing function whose cause is in the module it calls. The big file defines
  `C = R  # what g adds` and `f(a)` returning `g(a) * 2`, `g` imported from `h.py`, where
  `g` adds a wrong W. Fix in h.py. Facts: the number R, the name g, the path h.py.
- `multi`: a fix that needs edits in both files. The big file's `f` adds `v = W  # C, as in
  h.py` to `g(a)` from `h.py`, which defines `C = R` and multiplies by its own wrong `u = W`.
  Fix: both lines. Facts: the line `v = W`, the path h.py.

The problem statement is the first failing call (`f(3)` in m.py should return ..., but it
returns ...), so it names the big file and nothing the facts hold.

Splits: 600 `train`, 100 `val`, 200 `heldout`, disjoint in names (every module, function,
local and constant name is unique in the suite) and constants (every integer of an
evaluation task is 3 mod 4, of a train task not: micro's rule). Built deterministically
from LONG_VERSION; repositories are written under `cache_dir()/suites/long/<version>` on
first use. The sizes are pinned by tests (tests/unit/envs/long): the prompt and both
reads, as the model sees them, overflow WINDOW (by 38 tokens at least), and the expert's
second window stays under the `long` preset's summary threshold.

Not covered: tasks needing more than one summary; facts spread over more than two files.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetrl.envs.micro.names import RESERVED_FUNCTION_NAMES, RESERVED_NAMES, fresh_name
from fleetrl.envs.micro.suite import constants_side, split_of_int
from fleetrl.envs.tasks.git import flat_commit_sha, unified_diff
from fleetrl.files import cache_dir
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.types import Task

LONG_VERSION = "v2"  # v1 named constants in upper case, which the 3.4 M models could not copy
SPLIT_SIZES = {"train": 600, "val": 100, "heldout": 200}  # generated in this order
KINDS = ("value", "chain", "multi")
WINDOW = 1024  # the context window the suite is made for (`fleetrl/configs/long.toml`)
BIG_TOKENS = (650, 710)  # tokens of the first file as read_file shows it
SMALL_TOKENS = (260, 310)  # ... and of the second
TESTS_PER_TASK = 3


@dataclass(frozen=True)
class Edit:
    """One edit of the gold fix: `old` occurs once in the file at `path`."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class LongSpec:
    """Everything a long task is made of; the scripted expert reads it too."""

    instance_id: str
    split: str
    kind: str
    files: tuple[tuple[str, str], ...]  # the base tree: (path, text) in reading order
    edits: tuple[Edit, ...]  # the gold fix, in the order the expert makes it
    call: str  # the failing call, e.g. "kzqw(3)"
    function: str  # the function it calls
    module: str  # the big file's module, which defines `function`
    expected: int
    got: int  # what the buggy code returns
    tests: str  # the hidden test file
    test_file: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    facts: tuple[str, ...]  # what the summary must keep
    summary: str  # the scripted expert's summary
    terse: str  # the same summary less the one fact the fix cannot do without
    fixed: tuple[tuple[str, str], ...]  # the files the gold fix changes, fixed

    @property
    def first(self) -> str:
        """The big file, read before the summary."""
        return self.files[0][0]

    @property
    def second(self) -> str:
        """The small file, read after it."""
        return self.files[1][0]

    @property
    def statement(self) -> str:
        """The problem statement."""
        return (
            f"`{self.call}` in {self.first} should return {self.expected}, "
            f"but it returns {self.got}."
        )


class _Names:
    """Identifiers unique across the suite: modules, functions, locals, constants (all lower
    case: the shipped models' code never had upper-case names, and they cannot copy them)."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def lower(self, rng: random.Random, lengths: tuple[int, int]) -> str:
        return fresh_name(rng, lengths, self.taken, RESERVED_FUNCTION_NAMES)


@functools.cache
def _side_ints(lo: int, hi: int, side: str) -> tuple[int, ...]:
    return tuple(n for n in range(lo, hi + 1) if split_of_int(n) == side)


class _Draw:
    """The random choices of one task: names and integers of its split's side."""

    def __init__(self, rng: random.Random, names: _Names, split: str) -> None:
        self.rng, self.names, self.side = rng, names, constants_side(split)
        self.args: set[str] = set()  # the filler functions' parameters: unique in the task

    def int(self, lo: int = 10, hi: int = 99, avoid: tuple[int, ...] = ()) -> int:
        pool = [n for n in _side_ints(lo, hi, self.side) if n not in avoid]
        return self.rng.choice(pool)

    def module(self) -> str:
        return self.names.lower(self.rng, (3, 4))

    def function(self) -> str:
        return self.names.lower(self.rng, (4, 5))

    def local(self) -> str:
        return self.names.lower(self.rng, (3, 4))

    def constant(self) -> str:
        return self.names.lower(self.rng, (3, 4))

    def filler_function(self) -> str:
        name = self.function()
        arg = fresh_name(self.rng, (1, 2), self.args, RESERVED_NAMES | {"a"})
        op = self.rng.choice(["+", "-", "*"])
        return (
            f"def {name}({arg}):\n    return {arg} {op} {self.int()}\n"
            if self.rng.random() < 0.5
            else f"def {name}({arg}):\n    {arg} = {arg} {op} {self.int()}\n"
            f"    return {arg} * {self.int(2, 9)}\n"
        )

    def filler_constant(self) -> str:
        return f"{self.constant()} = {self.int()}\n"


def _numbered_tokens(text: str) -> int:
    """Tokens of `text` as read_file shows it (numbered lines), by the bundled tokenizer."""
    numbered = "\n".join(f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1))
    return len(_tokenizer().encode(numbered))


@functools.cache
def _tokenizer() -> Tokenizer:
    return bundled_tokenizer()


def _pad(
    draw: _Draw, head: list[str], body: list[str], size: tuple[int, int], make: Callable[[], str]
) -> str:
    """`head` + filler blocks around `body` (the blocks that matter, kept in order), grown
    until the file's read_file form is `size` tokens: first by each block's own count, to
    80 under, then by the whole file's (a block is under 60 tokens, the range wider)."""
    blocks = list(body)

    def text() -> str:
        return "".join(head) + "\n".join(blocks)

    estimate = _numbered_tokens(text())
    while estimate < size[0] - 80:
        block = make()
        blocks.insert(draw.rng.randint(0, len(blocks)), block)
        estimate += _numbered_tokens("\n" + block)
    while (tokens := _numbered_tokens(text())) < size[0]:
        blocks.insert(draw.rng.randint(0, len(blocks)), make())
    if tokens > size[1]:
        raise ValueError(f"a file of {tokens} tokens, over {size[1]}")
    return text()


def _value(draw: _Draw) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    m, d, f, v, c = draw.module(), draw.module(), draw.function(), draw.local(), draw.constant()
    right = draw.int()
    wrong = draw.int(avoid=(right,))
    target = f"def {f}(a):\n    {v} = {wrong}  # {c} in {d}.py\n    return a + {v}\n"
    big = _pad(draw, [], [target], BIG_TOKENS, draw.filler_function)
    small = _pad(draw, [], [f"{c} = {right}\n"], SMALL_TOKENS, draw.filler_constant)
    fixed_big = big.replace(f"{v} = {wrong}  #", f"{v} = {right}  #")
    return (
        [(f"{m}.py", big), (f"{d}.py", small)],
        [(f"{m}.py", fixed_big)],
        {
            "function": f,
            "module": m,
            "edits": (Edit(f"{m}.py", f"{v} = {wrong}", f"{v} = {right}"),),
            "facts": (f"{v} = {wrong}", c, f"{d}.py"),
            "summary": f"{m}.py has `{v} = {wrong}`; it must be {c} from {d}.py. "
            f"Next: read {d}.py.",
            "terse": f"{m}.py has `{v} = {wrong}`; it must come from {d}.py. Next: read {d}.py.",
            "right": lambda a: a + right,
            "wrong": lambda a: a + wrong,
        },
    )


def _chain(draw: _Draw) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    m, h, f, g, c = draw.module(), draw.module(), draw.function(), draw.function(), draw.constant()
    right = draw.int()
    wrong = draw.int(avoid=(right,))
    head = [f"from {h} import {g}\n\n"]
    body = [f"{c} = {right}  # what {g} adds\n", f"def {f}(a):\n    return {g}(a) * 2\n"]
    big = _pad(draw, head, body, BIG_TOKENS, draw.filler_function)
    helper = f"def {g}(a):\n    return a + {wrong}\n"
    small = _pad(draw, [], [helper], SMALL_TOKENS, draw.filler_function)
    fixed_small = small.replace(f"return a + {wrong}\n", f"return a + {right}\n")
    return (
        [(f"{m}.py", big), (f"{h}.py", small)],
        [(f"{h}.py", fixed_small)],
        {
            "function": f,
            "module": m,
            "edits": (Edit(f"{h}.py", f"return a + {wrong}", f"return a + {right}"),),
            "facts": (str(right), g, f"{h}.py"),
            "summary": f"{c} = {right} is what {g} in {h}.py must add. Next: read {h}.py.",
            "terse": f"{c} is what {g} in {h}.py must add. Next: read {h}.py.",
            "right": lambda a: (a + right) * 2,
            "wrong": lambda a: (a + wrong) * 2,
        },
    )


def _multi(draw: _Draw) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    m, h, f, g = draw.module(), draw.module(), draw.function(), draw.function()
    v, u, c = draw.local(), draw.local(), draw.constant()
    right = draw.int(2, 19)
    wrong = draw.int(2, 19, avoid=(right,))
    head = [f"from {h} import {g}\n\n"]
    target = f"def {f}(a):\n    {v} = {wrong}  # {c}, as in {h}.py\n    return {g}(a) + {v}\n"
    big = _pad(draw, head, [target], BIG_TOKENS, draw.filler_function)
    helper = f"def {g}(a):\n    {u} = {wrong}  # {c}\n    return a * {u}\n"
    small = _pad(draw, [], [f"{c} = {right}\n", helper], SMALL_TOKENS, draw.filler_constant)
    fixed_big = big.replace(f"{v} = {wrong}  #", f"{v} = {right}  #")
    fixed_small = small.replace(f"{u} = {wrong}  #", f"{u} = {right}  #")
    return (
        [(f"{m}.py", big), (f"{h}.py", small)],
        [(f"{m}.py", fixed_big), (f"{h}.py", fixed_small)],
        {
            "function": f,
            "module": m,
            "edits": (
                Edit(f"{h}.py", f"{u} = {wrong}", f"{u} = {right}"),
                Edit(f"{m}.py", f"{v} = {wrong}", f"{v} = {right}"),
            ),
            "facts": (f"{v} = {wrong}", f"{h}.py"),
            "summary": f"{m}.py has `{v} = {wrong}`; it must be {c} from {h}.py. "
            f"Next: read {h}.py.",
            "terse": f"{m}.py has `{v} = {wrong}`; it must be {c}. Next: read the module it "
            "imports.",
            "right": lambda a: a * right + right,
            "wrong": lambda a: a * wrong + wrong,
        },
    )


_KINDS = {"value": _value, "chain": _chain, "multi": _multi}


def _make(instance_id: str, split: str, kind: str, draw: _Draw) -> LongSpec:
    files, fixed, parts = _KINDS[kind](draw)
    for edit in parts["edits"]:
        text = dict(files)[edit.path]
        if text.count(edit.old) != 1:
            raise ValueError(f"{instance_id}: {edit.old!r} is not unique in {edit.path}")
    f, module = parts["function"], parts["module"]
    args = draw.rng.sample(range(2, 10), TESTS_PER_TASK)
    test_file = f"test_{f}.py"
    lines = [f"from {module} import {f}\n"]
    for number, a in enumerate(args, start=1):
        lines.append(f"\n\ndef test_{number}():\n    assert {f}({a}) == {parts['right'](a)}\n")
    nodes = tuple(f"{test_file}::test_{n}" for n in range(1, TESTS_PER_TASK + 1))
    return LongSpec(
        instance_id=instance_id,
        split=split,
        kind=kind,
        files=tuple(files),
        edits=parts["edits"],
        call=f"{f}({args[0]})",
        function=f,
        module=module,
        expected=parts["right"](args[0]),
        got=parts["wrong"](args[0]),
        tests="".join(lines),
        test_file=test_file,
        fail_to_pass=nodes,  # the wrong value changes every call
        pass_to_pass=(),
        facts=parts["facts"],
        summary=parts["summary"],
        terse=parts["terse"],
        fixed=tuple(fixed),
    )


@functools.cache
def _specs() -> tuple[LongSpec, ...]:
    """Every task of the suite, train first; cached because it never changes in a process."""
    names = _Names()
    specs = []
    for split, size in SPLIT_SIZES.items():
        rng = random.Random(f"fleetrl-long-{LONG_VERSION}-{split}")
        for index in range(size):
            kind = KINDS[index % len(KINDS)]
            draw = _Draw(rng, names, split)
            specs.append(_make(f"long-{split}-{index:04d}", split, kind, draw))
    return tuple(specs)


@functools.cache
def _spec_by_id() -> dict[str, LongSpec]:
    return {spec.instance_id: spec for spec in _specs()}


def spec_of(task: Task) -> LongSpec:
    """The spec of a long task; ValueError for any other task."""
    spec = _spec_by_id().get(task.instance_id)
    if spec is None or task.suite != "long":
        raise ValueError(f"{task.instance_id} is no task of the long suite")
    return spec


def _task(spec: LongSpec, repo: Path) -> Task:
    base = {path: text.encode() for path, text in spec.files}
    patch = "".join(unified_diff(path, dict(spec.files)[path], text) for path, text in spec.fixed)
    return Task(
        instance_id=spec.instance_id,
        repo=str(repo),
        base_commit=flat_commit_sha(base),
        problem_statement=spec.statement,
        patch=patch,
        test_patch=unified_diff(spec.test_file, None, spec.tests),
        FAIL_TO_PASS=list(spec.fail_to_pass),
        PASS_TO_PASS=list(spec.pass_to_pass),
        suite="long",
        split=spec.split,
        test_files=[spec.test_file],
        language="python",
        kind=spec.kind,
        origin=f"{spec.module}.py::{spec.function}",
        facts=list(spec.facts),
    )


def build_suite() -> list[Task]:
    """All long tasks as fresh Task records (in SPLIT_SIZES order), repositories not written."""
    root = cache_dir() / "suites" / "long" / LONG_VERSION
    return [_task(spec, root / spec.instance_id) for spec in _specs()]


def materialise(task: Task, dest: Path) -> None:
    """Write a long task's base tree (its two modules) into the empty folder `dest`."""
    for path, text in spec_of(task).files:
        (dest / path).write_text(text, encoding="utf-8")
