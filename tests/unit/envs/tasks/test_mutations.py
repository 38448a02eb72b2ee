"""The mutations of the task generator (fleetrl/envs/tasks/mutations.py), on source strings: each
kind makes a one-line change, deletions keep the file valid, UTF-8 columns and CRLF survive.

`CORE` and `TEXT` are the sources of the small `calc` repository that the generator's tests
write (tests/env/envs/tasks/test_generator.py); tests/unit/envs/tasks/test_generator.py orders their
mutations."""

from __future__ import annotations

import ast

import pytest

from fleetrl.envs.tasks.mutations import find_mutations

CORE = '''"""Small numeric helpers."""


def clamp(x, lo, hi):
    """Limit x to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        return 0
    total = 0
    for x in xs:
        total += x
    return total / len(xs)


def window_sums(xs, k):
    out = []
    for i in range(len(xs) - k + 1):
        out.append(sum(xs[i:i + k]))
    return out


def power(base, exp):
    return pow(base, exp)
'''
TEXT = """def shout(s, times=1):
    words = s.split()
    result = " ".join(w.upper() for w in words)
    return result + "!" * times


def initials(name):
    parts = name.split()
    if len(parts) >= 2:
        return parts[0][0] + parts[-1][0]
    return parts[0][0]
"""


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    pairs = zip(before.splitlines(), after.splitlines(), strict=False)
    return [(a.strip(), b.strip()) for a, b in pairs if a != b]


@pytest.mark.parametrize(
    ("kind", "before", "after"),
    [
        ("operator_swap", 'return result + "!" * times', 'return result - "!" * times'),
        ("comparison_flip", "if x < lo:", "if x > lo:"),
        ("off_by_one", "for i in range(len(xs) - k + 1):", "for i in range(len(xs) - k):"),
        ("constant_change", "total = 0", "total = 1"),
        ("swapped_arguments", "return pow(base, exp)", "return pow(exp, base)"),
        ("negated_condition", "if not xs:", "if xs:"),
        ("wrong_return_value", "return hi", "return lo"),
    ],
)
def test_each_kind_makes_a_one_line_change(kind: str, before: str, after: str) -> None:
    source = CORE + "\n\n" + TEXT
    changes = [_changed_lines(source, m.apply(source)) for m in find_mutations("m.py", source)]
    assert [(before, after)] in changes
    for mutation in find_mutations("m.py", source, [kind]):
        mutated = mutation.apply(source)
        ast.parse(mutated)
        assert mutated != source and mutation.kind == kind


def test_dropped_statement_and_feature_deletion_keep_the_file_valid() -> None:
    dropped = find_mutations("m.py", TEXT, ["dropped_statement"])
    assert {m.function for m in dropped} == {"shout", "initials"}
    assert TEXT.replace("    words = s.split()\n", "") in [m.apply(TEXT) for m in dropped]
    deleted = {
        m.function: m.apply(CORE) for m in find_mutations("m.py", CORE, ["feature_deletion"])
    }
    assert sorted(deleted) == ["clamp", "mean", "window_sums"]  # `power` is a one-liner
    assert '    """Limit x to [lo, hi]."""\n    raise NotImplementedError\n' in deleted["clamp"]


def test_mutations_respect_utf8_columns_crlf_and_skip_code_outside_functions() -> None:
    source = 'LIMIT = 1 + 2\n\n\ndef f(a):\n    return "é" + str(a) + "ü"\n'
    mutated = {m.apply(source) for m in find_mutations("m.py", source, ["operator_swap"])}
    assert mutated == {
        'LIMIT = 1 + 2\n\n\ndef f(a):\n    return "é" - str(a) + "ü"\n',
        'LIMIT = 1 + 2\n\n\ndef f(a):\n    return "é" + str(a) - "ü"\n',
    }
    with pytest.raises(ValueError, match="unknown mutation kinds"):
        find_mutations("m.py", source, ["typo"])
    crlf = CORE.replace("\n", "\r\n")  # Windows line endings survive every mutation
    kinds = set()
    for mutation in find_mutations("m.py", crlf):
        kinds.add(mutation.kind)
        assert "\n" not in mutation.apply(crlf).replace("\r\n", ""), mutation
    assert {"dropped_statement", "feature_deletion"} <= kinds
