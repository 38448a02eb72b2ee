"""Fresh inputs for calls mode: values like the tests' own, never equal to a recorded call,
and answers compared as the hidden tests would compare them."""

from __future__ import annotations

import itertools
import random

from fleetrl.envs.verifier.call_fresh import MAX_FRESH, PER_CALL, fresh_inputs, same, vary


def test_vary_keeps_type_shape_and_sign():
    rng = random.Random(0)
    for _ in range(200):
        assert vary(None, rng) is None and vary(True, rng) is True
        n = vary(5, rng)
        assert type(n) is int and 2 <= n <= 8
        assert vary(0, rng) >= 0 and vary(-4, rng) <= -1
        text = vary("abcab", rng)
        assert len(text) == 5 and set(text) <= set("abcab")
        assert type(vary(b"xyz", rng)) is bytes
        pair = vary((3, "ab"), rng)
        assert type(pair) is tuple and len(pair) == 2 and type(pair[1]) is str
        row = vary([1, 4, 9, 16], rng)
        assert len(row) == 4 and row == sorted(row)  # a sorted list stays sorted
        table = vary({"a": 2, "b": [1.5]}, rng)
        assert set(table) == {"a", "b"} and type(table["b"][0]) is float
        assert type(vary(frozenset({2, 3}), rng)) is frozenset


def test_an_unsorted_list_is_varied_in_place():
    rng = random.Random(1)
    shapes = {tuple(a < b for a, b in itertools.pairwise(r))
              for r in (vary([9, 1, 5], rng) for _ in range(50))}  # fmt: skip
    assert len(shapes) > 1  # not forced into order


def test_fresh_inputs_are_new_bounded_and_shared_among_functions():
    calls = [("m", ["f"], [n], {}) for n in range(2, 400, 10)] + [("m", ["g"], ["ab", 3], {})]
    fresh = fresh_inputs(calls, random.Random(2))
    assert len(fresh) == MAX_FRESH
    assert not any(call in calls for call in fresh)
    assert any(call[1] == ["g"] for call in fresh)  # the function with one call gets a turn
    assert sum(call[1] == ["g"] for call in fresh) <= PER_CALL
    assert all(call[2][0] != "ab" or call[2][1] != 3 for call in fresh if call[1] == ["g"])


def test_arguments_keep_their_order():
    fresh = fresh_inputs([("m", ["f"], [2, 50], {})], random.Random(3))
    assert fresh and all(a < b for _, _, (a, b), _ in fresh)  # 2±3 never passes 50±3


def test_same_compares_as_a_test_would_with_float_tolerance():
    assert same([1, (2, 3)], [1, (2, 3)]) and not same([1, 2], (1, 2))
    assert same(0.1 + 0.2, 0.3) and not same(0.3, 0.31)
    assert same(float("nan"), float("nan")) and same({"a": [1.0]}, {"a": [1]})
    assert same(2, 2.0) and same(True, 1.0) and not same("1", 1)  # as `==` has it
    assert not same({"a": 1}, {"a": 1, "b": 2}) and same({1, 2}, {2, 1})
