"""Function shapes drawn at random: training tasks beyond the suite's twenty templates.

A 3.4 M-parameter model trained on the twenty hand-written templates learns their lines
by heart. On a function of another shape (`heldout-templates`) it writes a trained
template's line into `edit_file` instead of copying the file's, and its edit is refused.
Copying is what transfers to a new shape, and a model only has to copy once the lines it
edits stop being few enough to memorise. `random_template` draws a new shape from a small
grammar of common idioms: a loop over a list (plain, by index, with `enumerate`, or over
a `zip` of two lists; an accumulator, a condition, an else branch, a `break` or
`continue`, a helper function), a list comprehension, a tally in a dict, a loop over a
string, an early-return search, a `while` loop (a scan of a list, or an integer counted
down), or branches on integers. A bug that makes a `while` loop never end is caught by
the suite's step limit, and such a call is never a test. Its bugs come from the
syntax-tree mutations of `fleetrl.envs.tasks.mutations`, one changed line each, and it is
returned as a `Template`, so the suite's own machinery (names, constants, tests,
statement, demonstrations) makes tasks of it.

The grammar's lines are still few (about 140 distinct ones in 300 shapes, names and
constants blanked), so a model can learn them by heart too. `random_template(rng,
open_lines)` opens a share of them (`open_line`): an int-valued name in a condition, a
return, an assignment or an append is wrapped in a small random expression, for about
2.5 times as many distinct lines (about 360 in 300 shapes at 0.7).

A shape is never within one line of an UNSEEN_TEMPLATES function, compared with names,
constants and letters blanked (`skeleton`), so `heldout-templates` stays unseen.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Callable
from pathlib import Path

from fleetrl.envs.micro.suite import _make, _Names, _specs
from fleetrl.envs.micro.templates import (
    UNSEEN_TEMPLATES,
    Args,
    Template,
    random_ints,
    random_word,
)
from fleetrl.envs.tasks.mutations import KINDS, find_mutations
from fleetrl.types import Task
from lab.folders import write_fresh

BUG_KINDS = tuple(kind for kind in KINDS if kind != "feature_deletion")  # micro's eight
INT_RANGE = (2, 9)  # every int field `{k}`; >= 2 so that `% {k}` never divides by zero
_FIELD = re.compile(r"\{([a-z]+)\}")
_MARKER = re.compile(r"QQ([a-z]+)")  # a field rendered as a plain identifier

# The grammar's pieces, as str.format patterns (see fleetrl.envs.micro.templates).
_LIST_CONDITIONS = (
    "{v} > {k}",
    "{v} < {t}",
    "{v} % {k} == 0",
    "{v} != {t}",
    "{v} % 2 == 1",
    "{v} >= {k}",
    "{v} < 0",
    "{v} > {t}",
)
_NUMBER_INITS = ("0", "1", "{k}", "{xs}[0]")
_NUMBER_UPDATES = (
    "{acc} += {v}",
    "{acc} += 1",
    "{acc} -= {v}",
    "{acc} = {v}",
    "{acc} += {v} * {k}",
    "{acc} = max({acc}, {v})",
    "{acc} = min({acc}, {v} + {k})",
    "{acc} = {g}({acc}, {v})",
)
_NUMBER_ELSES = ("{acc} -= 1", "{acc} += {k}", "{acc} = 0")
_NUMBER_RETURNS = ("{acc}", "{acc} * {k}", "{acc} + 1", "{acc} - {t}")
_LIST_UPDATES = (
    "{acc}.append({v})",
    "{acc}.append({v} * {k})",
    "{acc}.append({v} - {t})",
    "{acc}.append({v} + 1)",
    "{acc}.append({g}({v}, {k}))",
    "{acc}.insert(0, {v})",
)
_LIST_ELSES = ("{acc}.append(0)", "{acc}.append(-{v})")
_LIST_RETURNS = ("{acc}", "len({acc})", "{acc}[::-1]")
_HELPERS = (
    ("    return {a} + {b}\n",),
    ("    return {a} - {b}\n",),
    ("    return {a} * 2 + {b}\n",),
    ("    if {a} > {b}:\n", "        return {a}\n", "    return {b}\n"),
)
_PAIR_CONDITIONS = ("{xs}[{i}] > {xs}[{i} - 1]", "{xs}[{i}] == {xs}[{i} - 1]", "{xs}[{i}] < {t}")
_PAIR_UPDATES = ("{acc} += 1", "{acc}.append({xs}[{i}] - {xs}[{i} - 1])", "{acc}.append({i})")
_SEARCH_CONDITIONS = ("== {t}", "> {t}", "% {k} == 0", "< {k}")
_SEARCH_FOUND = ("{i}", "{xs}[{i}]", "{i} + 1")
_SEARCH_MISSING = ("-1", "len({xs})", "0", "None")
_STRING_CONDITIONS = (
    "{ch} == '{c}'",
    "{ch} != '{c}'",
    "{ch} in '{cs}'",
    "{ch} not in '{cs}'",
    "{ch} > '{c}'",
)
_STRING_UPDATES = ("{out} += {ch}", "{out} = {ch} + {out}", "{out} += {ch} * 2", "{out} += '{c}'")
_COUNT_UPDATES = ("{out} += 1", "{out} += 2", "{out} -= 1")
_MAPPED = ("{v} * {k}", "{v} + 1", "{v} - {t}", "-{v}", "{v} % {k}")
_INT_CONDITIONS = ("{x} > {k}", "{x} < {y}", "{x} % {k} == 0", "{x} >= {y} + {k}", "{x} < 0")
_INT_RESULTS = ("{x} + {k}", "{x} - {y}", "{y}", "{x} * 2", "{k}", "0", "{x}", "{y} - {x}")


def _list_loop(r: random.Random) -> list[str]:
    numeric = r.random() < 0.55
    acc_init = r.choice(_NUMBER_INITS) if numeric else "[]"
    update = r.choice(_NUMBER_UPDATES if numeric else _LIST_UPDATES)
    lines = [f"    {{acc}} = {acc_init}\n", "    for {v} in {xs}:\n"]
    if r.random() < 0.75:
        lines += [f"        if {r.choice(_LIST_CONDITIONS)}:\n", f"            {update}\n"]
        if r.random() < 0.35:
            other = r.choice(_NUMBER_ELSES if numeric else _LIST_ELSES)
            lines += ["        else:\n", f"            {other}\n"]
    else:
        lines.append(f"        {update}\n")
    lines.append(f"    return {r.choice(_NUMBER_RETURNS if numeric else _LIST_RETURNS)}\n")
    return lines


def _pair_loop(r: random.Random) -> list[str]:
    update = r.choice(_PAIR_UPDATES)
    acc_init = "0" if update.endswith("+= 1") else "[]"
    return [
        f"    {{acc}} = {acc_init}\n",
        "    for {i} in range(1, len({xs})):\n",
        f"        if {r.choice(_PAIR_CONDITIONS)}:\n",
        f"            {update}\n",
        "    return {acc}\n",
    ]


def _search(r: random.Random) -> list[str]:
    return [
        "    for {i} in range(len({xs})):\n",
        f"        if {{xs}}[{{i}}] {r.choice(_SEARCH_CONDITIONS)}:\n",
        f"            return {r.choice(_SEARCH_FOUND)}\n",
        f"    return {r.choice(_SEARCH_MISSING)}\n",
    ]


def _string_loop(r: random.Random) -> list[str]:
    counting = r.random() < 0.4
    lines = [
        f"    {{out}} = {'0' if counting else repr('')}\n",
        "    for {ch} in {s}:\n",
        f"        if {r.choice(_STRING_CONDITIONS)}:\n",
        f"            {r.choice(_COUNT_UPDATES if counting else _STRING_UPDATES)}\n",
    ]
    if r.random() < 0.35:
        other = "{out} -= 1" if counting else "{out} += {ch}"
        lines += ["        else:\n", f"            {other}\n"]
    result = r.choice(("{out}", "{out} * 2") if counting else ("{out}", "len({out})"))
    return [*lines, f"    return {result}\n"]


def _branches(r: random.Random) -> list[str]:
    first, second = r.sample(_INT_CONDITIONS, 2)
    lines = [f"    if {first}:\n", f"        return {r.choice(_INT_RESULTS)}\n"]
    if r.random() < 0.5:
        lines += [f"    if {second}:\n", f"        return {r.choice(_INT_RESULTS)}\n"]
    return [*lines, f"    return {r.choice(_INT_RESULTS)}\n"]


def _comprehension(r: random.Random) -> list[str]:
    condition = f" if {r.choice(_LIST_CONDITIONS)}" if r.random() < 0.6 else ""
    lines = [f"    {{out}} = [{r.choice(_MAPPED)} for {{v}} in {{xs}}{condition}]\n"]
    return [*lines, f"    return {r.choice(('{out}', 'len({out})', 'sum({out})'))}\n"]


def _stop_early(r: random.Random) -> list[str]:
    update = r.choice(_NUMBER_UPDATES[:3])
    return [
        "    {acc} = 0\n",
        "    for {v} in {xs}:\n",
        f"        if {r.choice(_LIST_CONDITIONS)}:\n",
        f"            {r.choice(('break', 'continue'))}\n",
        f"        {update}\n",
        f"    return {r.choice(_NUMBER_RETURNS)}\n",
    ]


def _enumerate_loop(r: random.Random) -> list[str]:
    condition = r.choice(("{i} % 2 == 0", "{v} > {i}", "{i} < {k}", "{v} == {i}"))
    update = r.choice(("{acc} += {v}", "{acc} += {i}", "{acc} += {v} * {i}", "{acc} = {i}"))
    return [
        f"    {{acc}} = {r.choice(('0', '-1'))}\n",
        "    for {i}, {v} in enumerate({xs}):\n",
        f"        if {condition}:\n",
        f"            {update}\n",
        "    return {acc}\n",
    ]


def _zip_loop(r: random.Random) -> list[str]:
    condition = r.choice(("{v} > {w}", "{v} == {w}", "{v} + {w} > {k}", "{v} != {w}"))
    update = r.choice(("{acc} += 1", "{acc} += {v} - {w}", "{acc}.append({v} * {w})"))
    acc_init = "[]" if "append" in update else "0"
    return [
        f"    {{acc}} = {acc_init}\n",
        "    for {v}, {w} in zip({xs}, {ys}):\n",
        f"        if {condition}:\n",
        f"            {update}\n",
        "    return {acc}\n",
    ]


def _tally(r: random.Random) -> list[str]:
    key = r.choice(("{v}", "{v} % {k}", "{v} > {t}"))
    result = r.choice(("len({out})", "{out}.get({t}, 0)", "max({out}.values())"))
    return [
        "    {out} = dict()\n",
        "    for {v} in {xs}:\n",
        f"        {{out}}[{key}] = {{out}}.get({key}, 0) + 1\n",
        f"    return {result}\n",
    ]


def _while_scan(r: random.Random) -> list[str]:
    condition = r.choice(_LIST_CONDITIONS).replace("{v}", "{xs}[{i}]")
    return [
        "    {i} = 0\n",
        f"    while {{i}} < len({{xs}}) and {condition}:\n",
        "        {i} += 1\n",
        f"    return {r.choice(('{i}', 'len({xs}) - {i}', '{xs}[:{i}]'))}\n",
    ]


def _while_countdown(r: random.Random) -> list[str]:
    update = r.choice(("{acc} += 1", "{acc} += {x}", "{acc} = {acc} * 2 + 1"))
    step = r.choice(("{x} = {x} // 2", "{x} -= {k}", "{x} = {x} // {k}"))
    return [
        f"    {{acc}} = {r.choice(('0', '1'))}\n",
        f"    while {{x}} {r.choice(('>', '>='))} {{k}}:\n",
        f"        {update}\n",
        f"        {step}\n",
        f"    return {r.choice(('{acc}', '{acc} + {x}'))}\n",
    ]


_BODIES: tuple[Callable[[random.Random], list[str]], ...] = (
    _list_loop,
    _list_loop,
    _pair_loop,
    _search,
    _comprehension,
    _string_loop,
    _branches,
    _stop_early,
    _enumerate_loop,
    _zip_loop,
    _tally,
    _while_scan,
    _while_countdown,
)


def _signature(body: str) -> list[str]:
    """The parameters a body uses, in a fixed order (its first one always)."""
    used = set(_FIELD.findall(body))
    first = next(p for p in ("xs", "s", "x") if p in used)
    return [first, *(p for p in ("ys", "t", "y") if p in used)]


def _arguments(params: list[str]) -> Callable[[random.Random, dict[str, int | str]], Args]:
    def draw(r: random.Random, p: dict[str, int | str]) -> Args:
        values = {
            "xs": lambda: random_ints(r, 1, 6, -5, 15),
            "ys": lambda: random_ints(r, 1, 6, -5, 15),
            "s": lambda: random_word(r, 1, 7, str(p.get("c", "")) + str(p.get("cs", ""))),
            "x": lambda: r.randint(-10, 20),
            "t": lambda: r.randint(-2, 10),
            "y": lambda: r.randint(-10, 20),
        }
        return tuple(values[name]() for name in params)

    return draw


def skeleton(source: str) -> list[str]:
    """A template's lines with every field blanked by what it stands for (function name,
    integer, letter or local name): how shapes are compared with UNSEEN_TEMPLATES."""
    blank = {"f": "F", "g": "F", "k": "K", "c": "C", "cs": "C"}
    return [_FIELD.sub(lambda m: blank.get(m.group(1), "N"), line) for line in source.splitlines()]


def _near_unseen(source: str) -> bool:
    """True when `source` differs from some unseen template by at most one line."""
    mine = skeleton(source)
    for template in UNSEEN_TEMPLATES:
        theirs = skeleton(template.source)
        if len(theirs) == len(mine) and sum(a != b for a, b in zip(mine, theirs, strict=True)) <= 1:
            return True
    return False


def _unmark(text: str) -> str:
    """Marked source text back as a pattern: `QQxs` -> `{xs}`."""
    return _MARKER.sub(r"{\1}", text)


def _one_line_bugs(source: str) -> list[tuple[str, tuple[str, str]]]:
    """(kind, (fragment, replacement)) for every mutation of `source` that changes one line
    into one line or into nothing, as patterns over the same fields."""
    marked = _FIELD.sub(lambda m: f"QQ{m.group(1)}", source)
    lines = marked.splitlines(keepends=True)
    bugs = []
    for mutation in find_mutations("shape.py", marked, BUG_KINDS):
        mutated = mutation.apply(marked).splitlines(keepends=True)
        changed = [i for i, line in enumerate(lines) if i >= len(mutated) or mutated[i] != line]
        if not changed:
            continue
        at = changed[0]
        if mutated == lines[:at] + lines[at + 1 :]:
            new = ""
        elif len(mutated) == len(lines) and len(changed) == 1:
            new = mutated[at]
        else:
            continue  # a block dropped, or several lines changed
        bugs.append((mutation.kind, (_unmark(lines[at]), _unmark(new))))
    for line in source.splitlines(keepends=True):
        if "{k}" in line:  # the template constant off by one, as the suite's constant bugs
            bugs.append(("constant_change", (line, line.replace("{k}", "{k_next}", 1))))
    return bugs


# An expression line: a condition or a return (after the keyword), the right side of an
# assignment to a plain name, or what is appended to a list. Only these are opened; loop
# heads, subscripts and subscripted targets stay.
_EXPRESSION_LINE = re.compile(
    r"^(\s*(?:if |return |\{[a-z]+\} (?:\+=|-=|=) |\{[a-z]+\}\.(?:append|insert)\())(.*)$"
)
_WRAPS = (
    "({e} + {c})",
    "({e} - {c})",
    "{e} * {c}",
    "abs({e})",
    "max({e}, {c})",
    "min({e}, {c})",
    "{e} // 2",
    "{e} % {{k}}",
    "({e} - {{t}})",
)
_WRAP_CONSTANTS = ("1", "2", "{k}")
_INT_FIELDS = frozenset({"v", "w", "x", "y", "i"})  # list elements, indices, int parameters


def open_line(line: str, rng: random.Random) -> str:
    """`line` with one of its int-valued names (`_INT_FIELDS`) wrapped once or twice in a
    small random expression (`{v}` -> `max({v} * 2, {k})`), or `line` unchanged where it
    has none in an expression. The grammar's own lines are few enough to learn by heart;
    opened lines are not, so a model trained on them has to copy what the file says."""
    match = _EXPRESSION_LINE.match(line.rstrip("\n"))
    if match is None:
        return line
    head, expression = match.groups()
    atoms = [
        m
        for m in _FIELD.finditer(expression)
        if m.group(1) in _INT_FIELDS and not expression[: m.start()].endswith(("for ", "["))
    ]
    if not atoms:
        return line
    atom = rng.choice(atoms)
    wrapped = atom.group(0)
    for _ in range(rng.randint(1, 2)):
        wrapped = rng.choice(_WRAPS).format(e=wrapped, c=rng.choice(_WRAP_CONSTANTS))
    expression = expression[: atom.start()] + wrapped + expression[atom.end() :]
    return head + expression + "\n"


def random_template(
    rng: random.Random, open_lines: float = 0.0
) -> tuple[Template, list[tuple[str, tuple[str, str]]]]:
    """A new function shape and every one-line bug that can be put into it. The returned
    Template has no bugs of its own: the caller picks one and sets `bugs` to it. With
    `open_lines` > 0 each expression line is opened (`open_line`) with that probability."""
    while True:
        lines = rng.choice(_BODIES)(rng)
        if open_lines > 0:
            lines = [open_line(line, rng) if rng.random() < open_lines else line for line in lines]
        body = "".join(lines)
        helper = ""
        if "{g}" in body:
            helper = "def {g}({a}, {b}):\n" + "".join(rng.choice(_HELPERS)) + "\n\n"
        params = _signature(body)
        source = helper + f"def {{f}}({', '.join('{' + p + '}' for p in params)}):\n" + body
        if _near_unseen(source):
            continue
        bugs = _one_line_bugs(source)
        if not bugs:
            continue
        fields = set(_FIELD.findall(source))
        name = "shape-" + hashlib.sha256(source.encode()).hexdigest()[:8]
        template = Template(
            name=name,
            source=source,
            bugs={},
            args=_arguments(params),
            ints={"k": INT_RANGE} if "k" in fields else {},
            chars=("c",) if "c" in fields else (),
        )
        return template, bugs


def fresh_shape_tasks(
    size: int,
    seed: str,
    prefix: str,
    repos: Path,
    split: str = "train",
    avoid: frozenset[str] = frozenset(),
    draw_as: str | None = None,
    open_lines: float = 0.0,
) -> list[Task]:
    """`size` tasks of function shapes drawn at random (this module), with
    the eight bug kinds cycled and function names no suite task uses; ids
    `<prefix>-<index>`, repositories written under `repos`, filed under `split`, whose side
    gives the constants and letters (`constants_side`) unless `draw_as` names another
    split to draw them like (train tasks in the evaluation symbols). Every task is a shape
    no other task has and none in `avoid` (shape names, a task's `origin`), so a model
    trained on them cannot memorise the lines it edits, and tasks of unseen shapes can be
    drawn for evaluation. `open_lines` is `random_template`'s."""
    names = _Names()
    names.functions |= {spec.function for spec in _specs()}
    rng = random.Random(seed)
    tasks: list[Task] = []
    drawn = set(avoid)
    while len(tasks) < size:
        kind = BUG_KINDS[len(tasks) % len(BUG_KINDS)]
        template, bugs = random_template(rng, open_lines)
        of_kind = [bug for bug_kind, bug in bugs if bug_kind == kind]
        if not of_kind or template.name in drawn:
            continue
        template = dataclasses.replace(template, bugs={kind: rng.choice(of_kind)})
        try:
            spec = _make(f"{prefix}-{len(tasks):04d}", draw_as or split, template, kind, rng, names)
        except RuntimeError:  # no call tells this bug apart, or its line is never unique
            continue
        tasks.append(write_fresh(spec, repos, split))
        drawn.add(template.name)
    return tasks
