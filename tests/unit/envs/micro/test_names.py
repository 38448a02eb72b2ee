"""Renaming touches only the names a module binds (renamed copies of whole tasks, fixed
and graded for real: tests/env/envs/micro); fresh names avoid reserved ones."""

import random

from fleetrl.envs.anticheat.episode import episode_flags
from fleetrl.envs.micro.expert import Example, check_command
from fleetrl.envs.micro.names import (
    RESERVED_FUNCTION_NAMES,
    RESERVED_NAMES,
    fresh_name,
    rename,
)


def test_rename_touches_bound_names_only():
    source = "def f(a):\n    s = 'a'\n    a.a(len(s))  # a\n    return a\n"
    renamed = rename(source, {"f": "gh", "a": "b", "s": "t"})
    assert renamed == "def gh(b):\n    t = 'a'\n    b.a(len(t))  # a\n    return b\n"


class _Scripted(random.Random):
    """Draws the given words, in order, whatever the lengths asked for."""

    def __init__(self, words: list[str]) -> None:
        super().__init__(0)
        self.words = words

    def randint(self, a: int, b: int) -> int:
        return len(self.words[0])

    def choices(self, population, k=1, **_):  # type: ignore[override]
        return list(self.words.pop(0))


def test_a_function_is_never_named_after_a_network_program():
    """The check command imports the function by name: there `ping` is a word of Python
    code, which the episode checks read as no command, and the names are still kept apart
    from network programs, so a command line never names one."""
    example = Example("ping", "ping", "ping([1])", "1")
    assert episode_flags([("run", {"command": check_command(example)})]) == set()
    rng = _Scripted(["ping", "abcd"])
    assert fresh_name(rng, (4, 5), set(), RESERVED_FUNCTION_NAMES) == "abcd"
    assert fresh_name(_Scripted(["ssh"]), (1, 3), set(), RESERVED_NAMES) == "ssh"  # a local
