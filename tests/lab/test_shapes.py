"""Random function shapes: valid Python, one-line bugs over the same fields, never within
one line of a held-out template, and opened lines that rarely repeat."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from lab import shapes
from lab.shapes import fresh_shape_tasks

from fleetrl.envs.micro.templates import TEMPLATES, UNSEEN_TEMPLATES
from fleetrl.types import Task
from tests.env.envs.micro.test_suite import _assert_gold_fixes


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


def test_fresh_shape_tasks_cycle_the_bug_kinds_and_check_out(
    suite: list[Task], tmp_path: Path
) -> None:
    """Tasks of random function shapes: every bug kind in turn, shapes the suite does not
    have and no two tasks share, unseen ones for evaluation, and real pytest failing
    FAIL_TO_PASS before the gold patch and passing every test after it."""
    fresh = fresh_shape_tasks(16, "test-seed", "shape", tmp_path / "repos")
    assert {t.split for t in fresh} == {"train"}
    assert [t.kind for t in fresh[:8]] == list(shapes.BUG_KINDS)
    assert not {t.origin for t in fresh} & {t.origin for t in suite}
    assert len({t.origin for t in fresh}) == len(fresh)
    unseen = fresh_shape_tasks(
        8, "test-seed", "unseen", tmp_path / "repos", "heldout-shapes",
        avoid=frozenset(t.origin for t in fresh),
    )  # fmt: skip
    assert {t.split for t in unseen} == {"heldout-shapes"}
    assert not {t.origin for t in unseen} & {t.origin for t in fresh}
    _assert_gold_fixes(fresh + unseen, tmp_path / "work")


def test_fresh_shape_tasks_drawn_like_evaluation_are_filed_as_train(tmp_path: Path) -> None:
    """`draw_as` draws a product's train shapes with the evaluation symbols: the same
    functions, tests and fixes as tasks filed under that split, filed as train."""
    filed = fresh_shape_tasks(4, "test-seed", "p", tmp_path / "a", "heldout-shapes")
    drawn = fresh_shape_tasks(4, "test-seed", "p", tmp_path / "b", draw_as="heldout-shapes")
    assert {t.split for t in drawn} == {"train"}
    assert [(t.patch, t.test_patch) for t in drawn] == [(t.patch, t.test_patch) for t in filed]
    plain = fresh_shape_tasks(4, "test-seed", "p", tmp_path / "c")
    assert [t.patch for t in plain] != [t.patch for t in drawn]


def test_fresh_shape_tasks_with_open_lines_check_out(tmp_path: Path) -> None:
    """Shapes whose lines are opened by random sub-expressions still make tasks whose
    gold patch real pytest accepts, and most are other functions than the plain draw (a
    shape with no int-valued name in an expression line stays as it is)."""
    opened = fresh_shape_tasks(8, "test-seed", "o", tmp_path / "a", open_lines=1.0)
    plain = fresh_shape_tasks(8, "test-seed", "o", tmp_path / "b")
    assert [t.kind for t in opened] == list(shapes.BUG_KINDS)
    assert len({t.origin for t in opened} & {t.origin for t in plain}) <= 2
    _assert_gold_fixes(opened, tmp_path / "work")
