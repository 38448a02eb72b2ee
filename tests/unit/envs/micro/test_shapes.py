"""Random function shapes: valid Python, one-line bugs over the same fields, never within
one line of a held-out template, and opened lines that rarely repeat."""

from __future__ import annotations

import ast
import random

import pytest

from fleetrl.envs.micro import shapes
from fleetrl.envs.micro.templates import TEMPLATES, UNSEEN_TEMPLATES


def _render(source: str) -> str:
    """A pattern with every field bound to a valid name or value."""
    values = {"k": 5, "k_next": 6, "c": "q", "cs": "abc"}
    fields = {name for name in shapes._FIELD.findall(source)} | {"k_next"}
    return source.format(**{name: values.get(name, f"n_{name}") for name in fields})


@pytest.mark.parametrize("open_lines", [0.0, 0.7])
def test_drawn_shapes_parse_and_their_bugs_change_one_line(open_lines: float) -> None:
    rng = random.Random(0)
    kinds = set()
    for _ in range(200):
        template, bugs = shapes.random_template(rng, open_lines)
        ast.parse(_render(template.source))
        assert bugs
        for kind, (fragment, replacement) in bugs:
            kinds.add(kind)
            assert kind in shapes.BUG_KINDS
            assert fragment.endswith("\n") and fragment.count("\n") == 1
            assert replacement == "" or replacement.count("\n") == 1
            assert fragment in template.source and replacement != fragment
            ast.parse(_render(template.source.replace(fragment, replacement)))
    assert kinds == set(shapes.BUG_KINDS)  # the grammar reaches every kind


@pytest.mark.parametrize("open_lines", [0.0, 0.7])
def test_no_shape_is_within_one_line_of_a_held_out_template(open_lines: float) -> None:
    rng = random.Random(1)
    unseen = [shapes.skeleton(t.source) for t in UNSEEN_TEMPLATES]
    for _ in range(300):
        template, _ = shapes.random_template(rng, open_lines)
        mine = shapes.skeleton(template.source)
        for theirs in unseen:
            if len(mine) == len(theirs):
                assert sum(a != b for a, b in zip(mine, theirs, strict=True)) >= 2


def test_near_unseen_catches_one_changed_line_and_spares_trained_templates() -> None:
    count_equal = UNSEEN_TEMPLATES[0].source
    assert shapes._near_unseen(count_equal)
    assert shapes._near_unseen(count_equal.replace("{n} += 1", "{n} += {v}"))  # one line
    assert not shapes._near_unseen(
        count_equal.replace("{n} += 1", "{n} += {v}").replace("{n} = 0", "{n} = {k}")
    )
    assert not any(shapes._near_unseen(t.source) for t in TEMPLATES)


def test_arguments_follow_the_signature() -> None:
    rng = random.Random(2)
    for _ in range(50):
        template, _ = shapes.random_template(rng)
        params = {"k": 5, "c": "q", "cs": "abc"}
        args = template.args(rng, params)
        signature = next(
            line for line in template.source.splitlines() if line.startswith("def {f}(")
        )
        assert len(args) == signature.count("{") - 1, signature


def test_opening_a_line_widens_its_expression_only() -> None:
    rng = random.Random(3)
    for _ in range(50):
        opened = shapes.open_line("        {acc} += {v}\n", rng)
        assert opened.startswith("        {acc} += ") and opened.endswith("\n")
        assert opened != "        {acc} += {v}\n" and "{v}" in opened
        ast.parse(_render(opened.strip()))
    # Loop heads, subscripts and comprehension targets stay; so do names that may not
    # hold an int (an accumulator may be a list).
    for line in (
        "    for {v} in {xs}:\n",
        "        if {xs}[{i}] > {t}:\n",
        "    {out} = [{k} for {v} in {xs}]\n",
        "    return {acc}\n",
    ):
        assert shapes.open_line(line, rng) == line


def test_open_lines_make_lines_rarely_repeat() -> None:
    def distinct_lines(open_lines: float) -> int:
        rng = random.Random(4)
        lines = set()
        for _ in range(300):
            template, _ = shapes.random_template(rng, open_lines)
            lines |= set(shapes.skeleton(template.source))
        return len(lines)

    assert distinct_lines(0.7) > 2 * distinct_lines(0.0)
