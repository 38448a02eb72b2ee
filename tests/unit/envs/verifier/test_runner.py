"""The graded run's setup: a Python without pytest refuses to grade. The graded run itself
(shadowing, secrets, rewriting the hidden tests, introspection) is tested for real in
tests/env/envs/verifier/test_runner.py."""

import pytest


def test_a_python_without_pytest_refuses_to_grade_instead_of_scoring_zero(without_pytest):
    # A runtime-only install once lacked pytest: every grading "failed" and every reward was
    # 0 with no flag, as if the agents were wrong.
    with pytest.raises(without_pytest.GraderUnavailable, match="pip install pytest"):
        without_pytest.runner_dir()
