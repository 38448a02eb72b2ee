"""The function templates of the `micro` suite, each with the bugs that can be put in it.

A template is a small correct Python function written as a `str.format` pattern:

- `{f}` (and `{g}` for a helper) become random-letter function names, unique in the suite;
- other bare fields (`{xs}`, `{v}`, ...) become random-letter local names;
- fields listed in `ints` become integer constants, those in `chars` single letters, and
  `{cs}` (where present) a string of three distinct letters; for every int field `k`,
  `{k_next}` is `k + 1` (used by constant-change bugs).

A bug is `(fragment, replacement)`: a fragment of the rendered correct source that occurs
exactly once, and what the buggy source has instead. `args` draws one random valid argument
tuple; the suite runs both versions on such tuples to pick tests that tell them apart.
No bug here can loop forever, since the suite runs buggy code in-process to pick tests.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field

Args = tuple[object, ...]


@dataclass(frozen=True)
class Template:
    """One correct function pattern and the bugs the suite may put into it."""

    name: str  # short readable name, recorded as Task.origin
    source: str  # the correct module, a str.format pattern (see module docstring)
    bugs: dict[str, tuple[str, str]]  # bug kind -> (fragment, buggy replacement)
    args: Callable[[random.Random, dict[str, int | str]], Args]  # one valid argument tuple
    ints: dict[str, tuple[int, int]] = field(default_factory=dict)  # field -> inclusive range
    chars: tuple[str, ...] = ()  # fields that hold one letter each (all distinct)


def random_ints(r: random.Random, n_min: int, n_max: int, lo: int, hi: int) -> list[int]:
    """A list of n_min..n_max integers in lo..hi: a template argument."""
    return [r.randint(lo, hi) for _ in range(r.randint(n_min, n_max))]


def random_word(r: random.Random, n_min: int, n_max: int, extra: str = "") -> str:
    """A word of n_min..n_max lowercase letters, drawn mostly from `extra` when given so
    that the template's characters occur: a template argument."""
    pool = string.ascii_lowercase + extra * 8
    return "".join(r.choice(pool) for _ in range(r.randint(n_min, n_max)))


def _clamp_args(r: random.Random, p: dict[str, int | str]) -> Args:
    lo = r.randint(-10, 10)
    hi = lo + r.randint(1, 20)
    return (r.randint(lo - 10, hi + 10), lo, hi)


def _between_args(r: random.Random, p: dict[str, int | str]) -> Args:
    lo = r.randint(0, 7)
    return (random_ints(r, 3, 6, 0, 15), lo, lo + r.randint(1, 8))


def _maybe_sorted(r: random.Random, p: dict[str, int | str]) -> Args:
    xs = random_ints(r, 2, 5, 0, 20)
    return (sorted(xs) if r.random() < 0.5 else xs,)


def _padded(r: random.Random, p: dict[str, int | str]) -> Args:
    word = random_word(r, 1, 5, str(p["c"]) + str(p["d"]))
    return (" " * r.randint(0, 2) + word + " " * r.randint(0, 2),)


TEMPLATES: list[Template] = [
    Template(
        name="clamp",
        source=(
            "def {f}({x}, {lo}, {hi}):\n"
            "    if {x} < {lo}:\n"
            "        return {lo}\n"
            "    if {x} > {hi}:\n"
            "        return {hi}\n"
            "    return {x}\n"
        ),
        bugs={
            "comparison_flip": ("if {x} < {lo}:", "if {x} > {lo}:"),
            "wrong_return_value": ("        return {hi}\n", "        return {lo}\n"),
            "negated_condition": ("if {x} > {hi}:", "if not {x} > {hi}:"),
        },
        args=_clamp_args,
    ),
    Template(
        name="count_chars",
        source=(
            "def {f}({s}):\n"
            "    {n} = 0\n"
            "    for {ch} in {s}:\n"
            "        if {ch} in '{cs}':\n"
            "            {n} += 1\n"
            "    return {n}\n"
        ),
        bugs={
            "constant_change": ("{n} = 0", "{n} = 1"),
            "negated_condition": ("if {ch} in", "if {ch} not in"),
            "operator_swap": ("{n} += 1", "{n} -= 1"),
        },
        args=lambda r, p: (random_word(r, 3, 8, str(p["cs"])),),
    ),
    Template(
        name="running_max",
        source=(
            "def {f}({xs}):\n"
            "    {best} = {xs}[0]\n"
            "    {out} = []\n"
            "    for {v} in {xs}:\n"
            "        if {v} > {best}:\n"
            "            {best} = {v}\n"
            "        {out}.append({best})\n"
            "    return {out}\n"
        ),
        bugs={
            "comparison_flip": ("if {v} > {best}", "if {v} < {best}"),
            "off_by_one": ("{best} = {xs}[0]", "{best} = {xs}[1]"),
            "dropped_statement": ("        {out}.append({best})\n", ""),
            "wrong_return_value": ("return {out}", "return {best}"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, -9, 20),),
    ),
    Template(
        name="sum_multiples",
        source=(
            "def {f}({xs}):\n"
            "    {t} = 0\n"
            "    for {v} in {xs}:\n"
            "        if {v} % {k} == 0:\n"
            "            {t} += {v}\n"
            "    return {t}\n"
        ),
        bugs={
            "comparison_flip": ("% {k} == 0", "% {k} != 0"),
            "constant_change": ("% {k} ==", "% {k_next} =="),
            "operator_swap": ("{t} += {v}", "{t} -= {v}"),
        },
        args=lambda r, p: (random_ints(r, 3, 6, 0, 40),),
        ints={"k": (2, 9)},
    ),
    Template(
        name="horner",
        source=(
            "def {g}({a}, {b}):\n"
            "    return {a} * {k} + {b}\n"
            "\n"
            "\n"
            "def {f}({ds}):\n"
            "    {t} = 0\n"
            "    for {d} in {ds}:\n"
            "        {t} = {g}({t}, {d})\n"
            "    return {t}\n"
        ),
        bugs={
            "swapped_arguments": ("{g}({t}, {d})", "{g}({d}, {t})"),
            "operator_swap": ("{a} * {k} + {b}", "{a} * {k} - {b}"),
            "constant_change": ("{t} = 0", "{t} = 1"),
        },
        args=lambda r, p: (random_ints(r, 2, 4, 0, int(p["k"]) - 1),),
        ints={"k": (2, 9)},
    ),
    Template(
        name="power_sum",
        source=(
            "def {f}({n}):\n"
            "    {t} = 0\n"
            "    for {i} in range(1, {n} + 1):\n"
            "        {t} += pow({i}, {k})\n"
            "    return {t}\n"
        ),
        bugs={
            "swapped_arguments": ("pow({i}, {k})", "pow({k}, {i})"),
            "off_by_one": ("{n} + 1", "{n}"),
            "operator_swap": ("{t} += pow", "{t} *= pow"),
        },
        args=lambda r, p: (r.randint(1, 6),),
        ints={"k": (2, 5)},
    ),
    Template(
        name="pad_left",
        source=(
            "def {f}({s}, {w}):\n"
            "    if len({s}) >= {w}:\n"
            "        return {s}\n"
            "    return '{c}' * ({w} - len({s})) + {s}\n"
        ),
        bugs={
            "comparison_flip": (") >= {w}", ") <= {w}"),
            "operator_swap": ("({w} - len", "({w} + len"),
            "wrong_return_value": ("        return {s}\n", "        return ''\n"),
        },
        args=lambda r, p: (random_word(r, 1, 5), r.randint(0, 8)),
        chars=("c",),
    ),
    Template(
        name="first_above",
        source=(
            "def {f}({xs}, {lim}):\n"
            "    for {i}, {v} in enumerate({xs}):\n"
            "        if {v} > {lim}:\n"
            "            return {i}\n"
            "    return -1\n"
        ),
        bugs={
            "comparison_flip": ("{v} > {lim}", "{v} < {lim}"),
            "wrong_return_value": ("return -1", "return 0"),
            "off_by_one": ("return {i}\n", "return {i} + 1\n"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, 0, 20), r.randint(0, 20)),
    ),
    Template(
        name="product_from",
        source=(
            "def {f}({n}):\n"
            "    {p} = 1\n"
            "    for {i} in range({k}, {n} + 1):\n"
            "        {p} *= {i}\n"
            "    return {p}\n"
        ),
        bugs={
            "off_by_one": ("{n} + 1", "{n}"),
            "constant_change": ("{p} = 1", "{p} = 2"),
            "operator_swap": ("{p} *= {i}", "{p} += {i}"),
        },
        args=lambda r, p: (r.randint(int(p["k"]), 7),),
        ints={"k": (1, 4)},
    ),
    Template(
        name="mean_or_default",
        source=(
            "def {f}({xs}):\n"
            "    if not {xs}:\n"
            "        return {k}\n"
            "    return sum({xs}) // len({xs})\n"
        ),
        bugs={
            "operator_swap": (") // len", ") % len"),
            "wrong_return_value": ("        return {k}\n", "        return {xs}\n"),
            "negated_condition": ("if not {xs}:", "if {xs}:"),
        },
        args=lambda r, p: ([] if r.random() < 0.25 else random_ints(r, 1, 5, 0, 30),),
        ints={"k": (0, 9)},
    ),
    Template(
        name="shift_letters",
        source=(
            "def {f}({s}):\n"
            "    {out} = ''\n"
            "    for {ch} in {s}:\n"
            "        {out} += chr((ord({ch}) - 97 + {k}) % 26 + 97)\n"
            "    return {out}\n"
        ),
        bugs={
            "operator_swap": ("- 97 + {k}", "- 97 - {k}"),
            "constant_change": ("% 26", "% 25"),
            "off_by_one": ("% 26 + 97", "% 26 + 98"),
        },
        args=lambda r, p: (random_word(r, 2, 5),),
        ints={"k": (1, 9)},
    ),
    Template(
        name="count_between",
        source=(
            "def {f}({xs}, {lo}, {hi}):\n"
            "    {n} = 0\n"
            "    for {v} in {xs}:\n"
            "        if {lo} <= {v} < {hi}:\n"
            "            {n} += 1\n"
            "    return {n}\n"
        ),
        bugs={
            "off_by_one": ("{v} < {hi}", "{v} <= {hi}"),
            "comparison_flip": ("{lo} <= {v}", "{lo} >= {v}"),
            "negated_condition": ("if {lo} <=", "if not {lo} <="),
        },
        args=_between_args,
    ),
    Template(
        name="argmin",
        source=(
            "def {f}({xs}):\n"
            "    {j} = 0\n"
            "    for {i} in range(1, len({xs})):\n"
            "        if {xs}[{i}] < {xs}[{j}]:\n"
            "            {j} = {i}\n"
            "    return {j}\n"
        ),
        bugs={
            "comparison_flip": ("] < {xs}", "] > {xs}"),
            "off_by_one": ("len({xs}))", "len({xs}) - 1)"),
            "wrong_return_value": ("return {j}", "return {xs}[{j}]"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, 0, 30),),
    ),
    Template(
        name="is_sorted",
        source=(
            "def {f}({xs}):\n"
            "    for {i} in range(len({xs}) - 1):\n"
            "        if {xs}[{i}] > {xs}[{i} + 1]:\n"
            "            return False\n"
            "    return True\n"
        ),
        bugs={
            "comparison_flip": ("] > {xs}", "] < {xs}"),
            "off_by_one": ("len({xs}) - 1)", "len({xs}) - 2)"),
            "wrong_return_value": ("return True", "return False"),
            "negated_condition": ("if {xs}[{i}] >", "if not {xs}[{i}] >"),
        },
        args=_maybe_sorted,
    ),
    Template(
        name="prefix_sums",
        source=(
            "def {f}({xs}):\n"
            "    {out} = []\n"
            "    {t} = {k}\n"
            "    for {v} in {xs}:\n"
            "        {t} += {v}\n"
            "        {out}.append({t})\n"
            "    return {out}\n"
        ),
        bugs={
            "dropped_statement": ("        {t} += {v}\n", ""),
            "operator_swap": ("{t} += {v}", "{t} -= {v}"),
            "constant_change": ("{t} = {k}\n", "{t} = {k_next}\n"),
        },
        args=lambda r, p: (random_ints(r, 2, 5, 0, 20),),
        ints={"k": (0, 9)},
    ),
    Template(
        name="label",
        source=(
            "def {f}({n}):\n"
            "    if {n} % {m} == 0:\n"
            "        return '{c}'\n"
            "    if {n} % {k} == 0:\n"
            "        return '{d}'\n"
            "    return str({n})\n"
        ),
        bugs={
            "wrong_return_value": ("return '{d}'", "return '{c}'"),
            "constant_change": ("% {m} ==", "% {m_next} =="),
            "negated_condition": ("if {n} % {k}", "if not {n} % {k}"),
        },
        args=lambda r, p: (r.randint(1, 40),),
        ints={"k": (2, 5), "m": (6, 9)},
        chars=("c", "d"),
    ),
    Template(
        name="strip_replace",
        source=("def {f}({s}):\n    {s} = {s}.strip()\n    return {s}.replace('{c}', '{d}')\n"),
        bugs={
            "swapped_arguments": ("('{c}', '{d}')", "('{d}', '{c}')"),
            "dropped_statement": ("    {s} = {s}.strip()\n", ""),
        },
        args=_padded,
        chars=("c", "d"),
    ),
    Template(
        name="divmod_mix",
        source=(
            "def {f}({a}, {b}):\n    {q}, {r} = divmod({a}, {b})\n    return {q} * {k} + {r}\n"
        ),
        bugs={
            "swapped_arguments": ("divmod({a}, {b})", "divmod({b}, {a})"),
            "operator_swap": ("* {k} +", "* {k} -"),
            "constant_change": ("* {k} +", "* {k_next} +"),
        },
        args=lambda r, p: (r.randint(1, 60), r.randint(1, 9)),
        ints={"k": (2, 9)},
    ),
    Template(
        name="mean_above",
        source=(
            "def {f}({xs}):\n"
            "    {t} = 0\n"
            "    {n} = 0\n"
            "    for {v} in {xs}:\n"
            "        if {v} > {k}:\n"
            "            {t} += {v}\n"
            "            {n} += 1\n"
            "    if {n} == 0:\n"
            "        return 0\n"
            "    return {t} // {n}\n"
        ),
        bugs={
            "dropped_statement": ("            {n} += 1\n", ""),
            "comparison_flip": ("{v} > {k}", "{v} < {k}"),
            "wrong_return_value": ("return {t} // {n}", "return {t}"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, 0, 20),),
        ints={"k": (0, 9)},
    ),
    Template(
        name="digit_sum",
        source=(
            "def {f}({n}):\n"
            "    {t} = 0\n"
            "    while {n} > 0:\n"
            "        {t} += {n} % 10\n"
            "        {n} //= 10\n"
            "    return {t}\n"
        ),
        bugs={
            "operator_swap": ("{n} % 10", "{n} // 10"),
            "comparison_flip": ("{n} > 0", "{n} < 0"),
            "constant_change": ("{t} = 0", "{t} = 1"),
        },
        args=lambda r, p: (r.randint(10, 999),),
    ),
]


# Templates of the `heldout-templates` split only: no training, validation or held-out task
# uses them, so that split measures fixing bugs in functions of a shape never trained on.
# Same eight bug kinds as above.
UNSEEN_TEMPLATES: list[Template] = [
    Template(
        name="count_equal",
        source=(
            "def {f}({xs}, {t}):\n"
            "    {n} = 0\n"
            "    for {v} in {xs}:\n"
            "        if {v} == {t}:\n"
            "            {n} += 1\n"
            "    return {n}\n"
        ),
        bugs={
            "negated_condition": ("if {v} == {t}:", "if not {v} == {t}:"),
            "operator_swap": ("{n} += 1", "{n} -= 1"),
            "constant_change": ("{n} = 0", "{n} = 1"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, 0, 4), r.randint(0, 4)),
    ),
    Template(
        name="last_index",
        source=(
            "def {f}({xs}, {t}):\n"
            "    {i} = len({xs}) - 1\n"
            "    while {i} >= 0:\n"
            "        if {xs}[{i}] == {t}:\n"
            "            return {i}\n"
            "        {i} -= 1\n"
            "    return -1\n"
        ),
        bugs={
            "off_by_one": ("{i} = len({xs}) - 1", "{i} = len({xs}) - 2"),
            "comparison_flip": ("while {i} >= 0:", "while {i} > 0:"),
            "wrong_return_value": ("    return -1\n", "    return 0\n"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, 0, 5), r.randint(0, 5)),
    ),
    Template(
        name="scale_add",
        source=(
            "def {f}({xs}):\n"
            "    {out} = []\n"
            "    for {v} in {xs}:\n"
            "        {out}.append({v} * {k} + 1)\n"
            "    return {out}\n"
        ),
        bugs={
            "constant_change": ("{v} * {k}", "{v} * {k_next}"),
            "operator_swap": ("* {k} + 1", "* {k} - 1"),
            "wrong_return_value": ("return {out}", "return {xs}"),
        },
        args=lambda r, p: (random_ints(r, 1, 5, -5, 9),),
        ints={"k": (2, 9)},
    ),
    Template(
        name="pair_diffs",
        source=(
            "def {g}({a}, {b}):\n"
            "    return {a} - {b}\n"
            "\n"
            "\n"
            "def {f}({xs}):\n"
            "    return [{g}({xs}[{i}], {xs}[{i} - 1]) for {i} in range(1, len({xs}))]\n"
        ),
        bugs={
            "swapped_arguments": ("{g}({xs}[{i}], {xs}[{i} - 1])", "{g}({xs}[{i} - 1], {xs}[{i}])"),
            "off_by_one": ("range(1, len({xs}))", "range(2, len({xs}))"),
            "operator_swap": ("return {a} - {b}", "return {a} + {b}"),
        },
        args=lambda r, p: (random_ints(r, 2, 6, -5, 9),),
    ),
    Template(
        name="drop_letter",
        source=(
            "def {f}({s}):\n"
            "    {out} = ''\n"
            "    for {ch} in {s}:\n"
            "        if {ch} != '{c}':\n"
            "            {out} += {ch}\n"
            "    return {out}\n"
        ),
        bugs={
            "comparison_flip": ("if {ch} != '{c}':", "if {ch} == '{c}':"),
            "dropped_statement": ("            {out} += {ch}\n", "            pass\n"),
            "wrong_return_value": ("return {out}", "return {s}"),
        },
        args=lambda r, p: (random_word(r, 2, 7, str(p["c"])),),
        chars=("c",),
    ),
]
