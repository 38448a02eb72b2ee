"""The hidden tests' places: a folder where a hidden test goes, or a package named like a
hidden test module, is never applied, and the hidden tests still run."""

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.verifier import verify_workspace


def test_a_folder_where_a_hidden_test_goes_is_not_applied(task, workspace):
    apply_patch(workspace, task.patch)
    (workspace / "test_nkims.py").mkdir()
    (workspace / "test_nkims.py" / "helper.py").write_text("X = 1\n")
    result = verify_workspace(task, workspace)
    assert "tests_modified" in result.flags and result.reward == 0
    assert set(result.tests.values()) == {"passed"}  # the hidden test still ran
    assert "test_nkims.py/helper.py" not in result.applied


def test_a_package_named_like_a_hidden_test_is_not_applied(task, workspace):
    # Python imports a package before a module of the same name: this one would stand in
    # for test_nkims.py, with passing tests of its own.
    package = workspace / "test_nkims"
    package.mkdir()
    (package / "__init__.py").write_text(
        "__file__ = __file__.replace('/__init__.py', '.py')\n\n\ndef test_1():\n    pass\n"
    )
    result = verify_workspace(task, workspace)
    assert result.reward == 0 and "tests_modified" in result.flags
    assert result.applied == [] and "passed" not in result.tests.values()
