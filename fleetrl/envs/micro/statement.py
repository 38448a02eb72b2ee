"""The wording of a micro problem statement, and its parser, side by side.

The statement is the first failing assertion of a task's hidden tests, e.g.

    `qzvk([3, 1, 2])` should return [3, 3, 3], but it returns [].
    `wnrys([])` should return 'ab', but it raises ZeroDivisionError.

The suite writes it (`write_statement`); the scripted expert reads the call and the
expected value back (`parse_statement`), as a model reads them from its prompt; a renamed
copy of a task names another function (`rename_function`). A test pins the round trip over
every task of the suite, so the wording cannot drift away from its reader.

Not covered: statements of tasks from other suites or task folders (free-form text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STATEMENT = re.compile(
    r"^`(?P<call>(?P<function>\w+)\(.*\))` should return (?P<expected>.*), "
    r"but it (?:returns .*|raises \w+)\.$",
    re.DOTALL,
)


@dataclass(frozen=True)
class Statement:
    """What a micro problem statement says."""

    call: str  # the failing call as Python source, e.g. "nkims([4, 8])"
    function: str  # the function it calls, which is also its module's name
    expected: str  # repr of the value the call should return, e.g. "44" or "'ab'"


def write_statement(call: str, expected: object, outcome: tuple[bool, object]) -> str:
    """The statement of a failing test `assert CALL == EXPECTED`; `outcome` is what the
    buggy function did: (True, return value) or (False, exception class name)."""
    ok, got = outcome
    result = f"it returns {got!r}" if ok else f"it raises {got}"
    return f"`{call}` should return {expected!r}, but {result}."


def parse_statement(text: str) -> Statement:
    """The call and expected value of a statement `write_statement` wrote; ValueError if
    `text` is not one."""
    match = _STATEMENT.match(text)
    if match is None:
        raise ValueError(f"not a micro problem statement: {text!r}")
    return Statement(match["call"], match["function"], match["expected"])


def rename_function(text: str, function: str, new: str) -> str:
    """The statement with its call's function `function` renamed to `new`."""
    if not text.startswith(f"`{function}("):
        raise ValueError(f"not a micro problem statement calling {function}: {text!r}")
    return f"`{new}" + text[len(function) + 1 :]
