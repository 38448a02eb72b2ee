"""The graded run's setup: a Python without pytest refuses to grade. The graded run itself
(shadowing, secrets, rewriting the hidden tests, introspection) is tested for real in
tests/env/envs/verifier/test_runner.py."""

import pytest


def test_a_python_without_pytest_refuses_to_grade_instead_of_scoring_zero(monkeypatch):
    # A runtime-only install once lacked pytest: every grading "failed" and every reward was
    # 0 with no flag, as if the agents were wrong.
    import importlib.util

    from fleetrl.envs.verifier import runner

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a)
    )
    runner._runner_source.cache_clear()
    try:
        with pytest.raises(runner.GraderUnavailable, match="pip install pytest"):
            runner.runner_dir()
    finally:
        runner._runner_source.cache_clear()
