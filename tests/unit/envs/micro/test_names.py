"""Renaming touches only the names a module binds (renamed copies of whole tasks, fixed
and graded for real: tests/env/envs/micro)."""

from fleetrl.envs.micro.names import rename


def test_rename_touches_bound_names_only():
    source = "def f(a):\n    s = 'a'\n    a.a(len(s))  # a\n    return a\n"
    renamed = rename(source, {"f": "gh", "a": "b", "s": "t"})
    assert renamed == "def gh(b):\n    t = 'a'\n    b.a(len(t))  # a\n    return b\n"
