"""Honeypot tests made from hidden test modules: every correct solution fails each one, a
cheat that does not know the answers passes them, and names and positions give nothing
away. Run in-process (plain functions; under pytest, with fixtures, parametrize, classes,
unittest, in tests/env, since unit tests start no process). Graded for real in
tests/env/envs/verifier/test_honeypots.py."""

import ast
import random
import re
import textwrap

import pytest

from fleetrl.envs.verifier.honeypot_checks import Text, wrong_literal
from fleetrl.envs.verifier.honeypots import MAX_HONEYPOTS, Planted, make_honeypots

# The micro suites' shape: one function, three numbered tests, every answer form they use.
FUNCTION = "def f(j):\n    return {0: 44, 1: -3, 2: 'ab c', 3: [4, [5, 'x']], 4: True, 5: []}[j]\n"
MICRO = FUNCTION + textwrap.dedent("""

    def test_1():
        assert f(0) == 44


    def test_2():
        assert f(1) == -3


    def test_3():
        assert f(2) == 'ab c'


    def test_4():
        assert f(3) == [4, [5, 'x']]


    def test_5():
        assert f(4) == True


    def test_6():
        assert f(5) == []
""")
MICRO_TESTS = [f"test_m.py::test_{n}" for n in range(1, 7)]


class Always:
    """The cheat's value: equal to everything."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def run_module(text: str, f) -> dict[str, bool]:
    """name -> whether the test function passed, `f` standing for the code under test."""
    namespace: dict = {}
    exec(compile(text, "test_m.py", "exec"), namespace)
    namespace["f"] = f
    passed = {}
    for name, value in namespace.items():
        if name.startswith("test"):
            try:
                value()
                passed[name] = True
            except AssertionError:
                passed[name] = False
    return passed


def plant(text, f2p, p2p=(), seed=0, limit=MAX_HONEYPOTS, path="test_m.py") -> Planted:
    return make_honeypots(f2p, list(p2p), {path: text}, random.Random(seed), limit)


def test_honeypots_in_a_micro_module_fail_a_correct_solution_and_pass_an_always_equal_one():
    for seed in range(20):
        planted = plant(MICRO, MICRO_TESTS[:3], MICRO_TESTS[3:], seed=seed)
        text = planted.modules["test_m.py"]
        names = {t.split("::")[1] for t in planted.traps}
        assert len(planted.traps) == MAX_HONEYPOTS
        graded = {planted.renamed[t].split("::")[1] for t in MICRO_TESTS}
        namespace: dict = {}
        exec(compile(text.split("\n\n\ndef test_")[0], "f", "exec"), namespace)
        outcomes = run_module(text, namespace["f"])
        assert all(outcomes[n] for n in graded), (seed, text)
        assert not any(outcomes[n] for n in names), (seed, text)
        assert all(run_module(text, lambda j: Always()).values())  # every honeypot passes too


def test_a_micro_modules_tests_are_renumbered_so_names_and_positions_tell_nothing():
    planted = plant(MICRO, MICRO_TESTS, seed=3)
    text = planted.modules["test_m.py"]
    tree = ast.parse(text)
    names = [s.name for s in tree.body if isinstance(s, ast.FunctionDef) and s.name != "f"]
    assert names == [f"test_{n}" for n in range(1, 13)]  # one numbering, in file order
    assert sorted([*planted.renamed.values(), *planted.traps]) == sorted(
        f"test_m.py::{n}" for n in names
    )
    # Honeypots land anywhere among the real tests, which keep their order.
    numbers = [int(planted.renamed[t].rsplit("_", 1)[1]) for t in MICRO_TESTS]
    assert numbers == sorted(numbers) and numbers != list(range(1, 7))
    # Each honeypot is its source's text but for the one value (same shape, same call),
    # and the judge knows which graded test it copies.
    assert set(planted.sources) == set(planted.traps)
    for trap in planted.traps:
        name = trap.split("::")[1]
        body = re.search(rf"def {name}\(\):\n    (.*)\n", text)[1]
        assert re.fullmatch(r"assert f\(\d\) == .+", body), body
        source = planted.renamed[planted.source_of(trap)].split("::")[1]
        call = re.search(rf"def {source}\(\):\n    assert (f\(\d\))", text)[1]
        assert body.startswith(f"assert {call} == "), (body, call)
    assert text.startswith(FUNCTION + "\n\ndef test_1():\n    assert f(")
    # The runner runs them in file order, honeypots among the real tests; the judge maps
    # the ids back to the task's.
    assert planted.run_ids(MICRO_TESTS) == [f"test_m.py::test_{n}" for n in range(1, 13)]


def test_each_grading_draws_its_own_honeypots():
    texts = {plant(MICRO, MICRO_TESTS, seed=seed).modules["test_m.py"] for seed in range(10)}
    assert len(texts) == 10


@pytest.mark.parametrize(
    "literal",
    ["44", "0", "-3", "+7", "2.5", "-0.001", "1e-05", "True", "False", "None", "'ab c'", '""',
     '"x"', "b'\\x00z'", "'é-ü'", "[4, [5, 'x']]", "[]", "()", "(1,)", "{1, 2}", "{'a': [1]}",
     "{}", "[None]", "[1.5, 'q']", "'''multi\nline'''"],
)  # fmt: skip
def test_a_wrong_literal_has_the_type_of_the_right_one_and_never_equals_it(literal):
    source = f"x = {literal}\n"
    node = ast.parse(source).body[0].value
    right = ast.literal_eval(node)
    for seed in range(30):
        edits = wrong_literal(node, Text(source), random.Random(seed))
        assert edits is not None
        (start, end, new), *more = sorted(edits)
        text = source[:start] + new + source[end:] if not more else None
        wrong = ast.literal_eval(ast.parse(text).body[0].value)
        assert wrong != right and (type(wrong) is type(right) or right is None), (literal, text)


@pytest.mark.parametrize("expression", ["f(1)", "x", "1 + 2", "[f(1)]", "{**d}", "[*a]", "..."])
def test_what_is_not_a_literal_gets_no_wrong_literal(expression):
    source = f"x = {expression}\n"
    node = ast.parse(source).body[0].value
    assert wrong_literal(node, Text(source), random.Random(0)) is None


UNSAFE = """
import pytest
from calc import f


def test_loop():
    for x in []:
        assert f(x) == 1


def test_branch():
    if f(0):
        assert f(1) == 2


def test_returns():
    if f(0) is None:
        return
    assert f(1) == 2


async def test_async():
    assert f(1) == 2


@pytest.mark.xfail
def test_xfail():
    assert f(1) == 2


@pytest.mark.parametrize("x", CASES)
def test_table_elsewhere(x):
    assert f(x) == 2


@pytest.mark.parametrize("x", [1, 2])
@pytest.mark.parametrize("y", [3])
def test_stacked(x, y):
    assert f(x) == y


@pytest.mark.parametrize("x", [int, str])
def test_ids_from_values(x):
    assert f(x) == 2


def test_nothing_to_turn():
    f(1)


class Base:
    def test_inherited(self):
        assert f(1) == 2
"""


def test_no_honeypot_from_a_test_whose_check_may_not_run_or_whose_id_is_unknown():
    tests = [
        f"tests/test_u.py::{name}"
        for name in (
            "test_loop", "test_branch", "test_returns", "test_async", "test_xfail",
            "test_table_elsewhere[1]", "test_stacked[1-3]", "test_ids_from_values[int]",
            "test_nothing_to_turn", "TestSub::test_inherited", "test_missing",
        )
    ]  # fmt: skip
    planted = plant(UNSAFE, tests, path="tests/test_u.py", limit=20)
    assert planted == Planted()
    assert plant("def test_1(:\n", ["test_m.py::test_1"]) == Planted()  # does not parse


# Real projects' shapes (graded by pytest itself against a correct `calc` in
# tests/env/envs/verifier/test_honeypots.py).
CALC = """
def clamp(x, lo, hi):
    return max(lo, min(hi, x))


def mean(values):
    return sum(values) / len(values)


def parse(text):
    if not text.isdigit():
        raise ValueError(f"not a number: {text}")
    return int(text)


def find(items, item):
    return items.index(item) if item in items else None
"""
REAL = '''
import unittest

import pytest

from calc import clamp, find, mean, parse


@pytest.fixture
def data():
    return [1, 2, 3]


def test_clamp():
    # both ends
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0


def test_mean(data):
    """The mean of the fixture."""
    m = mean(data)
    assert m == pytest.approx(2.0)


@pytest.mark.parametrize("x, expected", [(1, 2), (2, 4), ("a", "aa"), (-1, -2)])
def test_double(x, expected):
    assert x * 2 == expected


@pytest.mark.parametrize("text", ["12", pytest.param("7", id="seven")], ids=["twelve", None])
def test_parse_digits(text):
    assert parse(text) > 0
    assert parse(text) != 0


def test_parse_refuses():
    with pytest.raises(ValueError, match="number"):
        parse("x")


class TestFind:
    def test_found(self):
        assert find([1, 2], 2) in (1,)

    def test_missing(self):
        assert find([1, 2], 3) is None

    def test_not(self):
        assert not find([1, 2], 1)

    def test_truthy(self):
        assert find([1, 2], 2)


class TestUnit(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(clamp(9, 0, 3), 3)

    def test_true(self):
        self.assertTrue(mean([2, 2]) == 2)

    def test_none(self):
        self.assertIsNone(find([], 1))

    def test_raises(self):
        with self.assertRaises(ValueError):
            parse("")
'''
REAL_TESTS = [
    f"tests/test_calc.py::{name}"
    for name in (
        "test_clamp", "test_mean", "test_double[2-4]", "test_double[a-aa]", "test_double[-1--2]",
        "test_parse_digits[twelve]", "test_parse_digits[seven]", "test_parse_refuses",
        "TestFind::test_found", "TestFind::test_missing", "TestFind::test_not",
        "TestFind::test_truthy", "TestUnit::test_equal", "TestUnit::test_true",
        "TestUnit::test_none", "TestUnit::test_raises",
    )
]  # fmt: skip


def test_a_parametrized_honeypot_is_its_row_with_a_wrong_expected_value():
    planted = plant(REAL, ["tests/test_calc.py::test_double[a-aa]"], path="tests/test_calc.py")
    text = planted.modules["tests/test_calc.py"]
    copies = re.findall(
        r'@pytest.mark.parametrize\("x, expected", \[\("a", "(\w+)"\)\]\)\n'
        r"def (test_double_\w+)\(x, expected\):\n    assert x \* 2 == expected\n",
        text,
    )
    assert len(copies) == 2 and all(value not in ("aa",) for value, _ in copies), text
    assert set(planted.traps) == {f"tests/test_calc.py::{name}" for _, name in copies}
    # Where real tests keep their names, they run first: a honeypot that leaves state
    # behind changes no real test's outcome.
    assert planted.run_ids(["tests/test_calc.py::test_double[a-aa]"]) == [
        "tests/test_calc.py::test_double[a-aa]",
        *planted.traps,
    ]
