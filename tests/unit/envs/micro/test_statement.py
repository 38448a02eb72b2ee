"""The statement's wording and its parser: every task of the suite round-trips."""

from __future__ import annotations

import ast

import pytest

from fleetrl.envs.micro import suite as micro
from fleetrl.envs.micro.statement import parse_statement, rename_function, write_statement


def test_every_statement_parses_back_to_its_call_and_expected_value() -> None:
    """The parsed call and value are exactly those of the task's first failing test."""
    specs = micro._specs()
    assert len(specs) == sum(micro.SPLIT_SIZES.values())
    for spec in specs:
        parsed = parse_statement(spec.statement)
        assert parsed.function == spec.function, spec.instance_id
        assert parsed.call.startswith(f"{spec.function}(")
        number = spec.fail_to_pass[0].rsplit("_", 1)[1]
        assertion = f"def test_{number}():\n    assert {parsed.call} == {parsed.expected}\n"
        assert assertion in spec.tests, spec.instance_id
        ast.literal_eval(parsed.expected)  # a Python literal, as the expert reads it


def test_write_and_parse_both_outcomes() -> None:
    returned = write_statement("f([1, 2])", [2, 1], (True, []))
    assert returned == "`f([1, 2])` should return [2, 1], but it returns []."
    raised = write_statement("g('a, b')", "b, a", (False, "IndexError"))
    assert raised == "`g('a, b')` should return 'b, a', but it raises IndexError."
    parsed = parse_statement(raised)
    assert (parsed.call, parsed.function, parsed.expected) == ("g('a, b')", "g", "'b, a'")
    with pytest.raises(ValueError, match="not a micro problem statement"):
        parse_statement("the tests fail")


def test_rename_function_keeps_the_rest() -> None:
    text = write_statement("f(3)", 4, (True, 5))
    assert rename_function(text, "f", "qzvk") == "`qzvk(3)` should return 4, but it returns 5."
    with pytest.raises(ValueError):
        rename_function(text, "g", "qzvk")
