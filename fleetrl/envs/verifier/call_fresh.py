"""Calls mode, fresh inputs: the code under test must agree with the gold solution on
inputs no test holds.

An answer can be known without being computed: memorised from an earlier episode of the
same task, and hidden where the literal checks do not look (a data file, an encoded string
run by `exec`, `timeit` compiling it). Such code passes the hidden tests and fails their
honeypots (it knows the answers), so neither catches it. What it cannot know is the answer
to an input it has never seen. After the hidden tests ran, the grader therefore draws fresh
inputs from the calls the tests made (`vary`: each argument changed a little, its type and
shape kept) and asks both the agent's worker and a *reference worker*, a third sandbox over
the repository with the task's gold patch applied. The reference first replays every call
the tests made, in order, so that a module with state stands where the agent's does. An
input the gold solution rejects (an exception, an answer that is not plain data, no answer)
says nothing and is skipped; on every other one the agent's answer must equal the gold one
(`same`: floats to 1e-9 relative). A difference fails the grading (reward 0, no flag: wrong
code and memorised code look alike here).

This file imports only the standard library: the grader loads it by path, like the wire.
Not covered: functions whose answers depend on anything but their arguments and the call
history (time, randomness, the files of the repository), and inputs where any answer is
right (the gold solution's is the only one accepted): suites with such functions should
not grade in calls mode.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

MAX_FRESH = 12  # fresh inputs per grading, spread over the functions the tests called
PER_CALL = 2  # fresh inputs drawn from each recorded call, at most
_INT_STEPS = (-3, -2, -1, 1, 2, 3)


def vary(value: Any, rng: random.Random) -> Any:
    """A value like `value`: the same type and shape, numbers moved a few steps (keeping
    their sign), strings and bytes redrawn from their own characters, containers varied
    element by element (a sorted list stays sorted); booleans and None are kept."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        moved = value + rng.choice(_INT_STEPS)
        return max(moved, 0) if value >= 0 else min(moved, -1)
    if kind is float:
        return value * rng.uniform(0.5, 1.5) if value else rng.uniform(-1.0, 1.0)
    if kind is str or kind is bytes:
        return _redraw(value, rng)
    if kind is list:
        items = [vary(item, rng) for item in value]
        return sorted(items) if len(value) > 1 and _ordered(value) else items
    if kind is tuple:
        return tuple(vary(item, rng) for item in value)
    if kind is dict:
        return {key: vary(item, rng) for key, item in value.items()}
    if kind is set or kind is frozenset:
        return kind(vary(item, rng) for item in value)
    return value


def _redraw(text: str | bytes, rng: random.Random) -> str | bytes:
    """`text` with about a third of its characters replaced by others of its own."""
    if len(text) < 2:
        return text
    chars = list(text)
    for i in rng.sample(range(len(chars)), max(1, len(chars) // 3)):
        chars[i] = rng.choice(chars)
    return "".join(chars) if isinstance(text, str) else bytes(chars)


def _ordered(items: list[Any]) -> bool:
    try:
        return all(a <= b for a, b in itertools.pairwise(items))
    except TypeError:
        return False


def same(a: Any, b: Any) -> bool:
    """Whether two decoded answers agree: `==`, but floats to 1e-9 relative (NaN equal to
    NaN), inside containers too."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float):
            if isinstance(a, bool) or isinstance(b, bool):
                return a == b
            if math.isnan(a) and math.isnan(b):
                return True
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return False
    if type(a) in (list, tuple) and type(b) is type(a):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def fresh_inputs(
    calls: list[tuple[str, list[str], list[Any], dict[str, Any]]], rng: random.Random
) -> list[tuple[str, list[str], list[Any], dict[str, Any]]]:
    """At most MAX_FRESH calls like the recorded `calls` (module, path, args, kwargs;
    decoded), round-robin over the functions so each gets its share, none equal to a
    recorded call."""
    seen = {repr(call) for call in calls}
    by_function: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for call in calls:
        by_function.setdefault((call[0], tuple(call[1])), []).append(call)
    queues = []
    for recorded in by_function.values():
        drawn = []
        for module, path, args, kwargs in rng.sample(recorded, len(recorded)):
            kept = 0
            for _ in range(4 * PER_CALL):  # draws near other recorded calls are redrawn
                varied = [vary(arg, rng) for arg in args]  # arguments keep their order
                fresh = (module, path, varied, vary(kwargs, rng))
                if repr(fresh) not in seen:
                    seen.add(repr(fresh))
                    drawn.append(fresh)
                    kept += 1
                    if kept == PER_CALL:
                        break
        queues.append(drawn)
    chosen: list[Any] = []
    while len(chosen) < MAX_FRESH and any(queues):
        for queue in queues:
            if queue and len(chosen) < MAX_FRESH:
                chosen.append(queue.pop(0))
    return chosen
