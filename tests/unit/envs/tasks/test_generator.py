"""The task generator's pure parts: the seeded candidate order and what counts as a test
file. Generation itself (pytest and git in subprocesses) is tested in
tests/env/envs/tasks/test_generator.py."""

from __future__ import annotations

from fleetrl.envs.tasks.generator import candidate_order, is_test_path
from fleetrl.envs.tasks.mutations import find_mutations
from tests.unit.envs.tasks.test_mutations import CORE, TEXT


def test_candidate_order_is_seeded_and_interleaves_kinds() -> None:
    mutations = find_mutations("m.py", CORE + "\n\n" + TEXT)
    first = candidate_order(mutations, seed=0)
    assert candidate_order(mutations, seed=0) == first
    assert candidate_order(mutations, seed=1) != first
    assert sorted(first, key=id) == sorted(mutations, key=id)
    kinds = {m.kind for m in mutations}
    assert {m.kind for m in first[: len(kinds)]} == kinds


def test_test_paths() -> None:
    assert is_test_path("tests/util.py") and is_test_path("pkg/test_x.py")
    assert is_test_path("pkg/x_test.py") and is_test_path("conftest.py")
    assert is_test_path("tests/data/table.bin")
    assert not is_test_path("pkg/testing_helpers.py") and not is_test_path("latest.py")
