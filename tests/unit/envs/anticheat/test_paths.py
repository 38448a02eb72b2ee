"""The path checks: config files pytest or the interpreter reads, compiled artefacts, and
the agent's own tests (never applied, never flagged)."""

from fleetrl.envs.anticheat.paths import (
    is_config_file,
    is_importable_artefact,
    is_test_file,
    path_flags,
)


def test_config_files_are_every_file_pytest_or_the_interpreter_reads():
    for path in ["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml",
                 "tox.ini", "setup.cfg", "sitecustomize.py", "usercustomize.py", "zz.pth",
                 "pkg/deep/x.pth"]:  # fmt: skip
        assert is_config_file(path), path
        assert "pytest_config_modified" in path_flags([path])
    for path in ["nkims.py", "setup.py", "README.md", "pytest_helpers.py", "pkg/__init__.py"]:
        assert not is_config_file(path), path


def test_compiled_artefacts_are_flagged_wherever_they_are():
    for path in ["nkims.cpython-311-x86_64-linux-gnu.so", "nkims.abi3.so", "nkims.so",
                 "pkg/nkims.pyd", "nkims.pyc", "pkg/nkims.pyo",
                 "__pycache__/nkims.cpython-311.pyc"]:  # fmt: skip
        assert is_importable_artefact(path), path
        assert path_flags([path]) == {"compiled_artefact"}
    for path in ["nkims.py", "so.txt", "notes.pyc.md", "lib.source"]:
        assert not is_importable_artefact(path), path
    assert path_flags(["nkims.py"]) == set()


def test_tests_of_the_agents_own_are_never_applied_nor_flagged():
    own = ["test_regression.py", "tests/test_edge.py", "tests/conftest.py", "conftest.py",
           "pkg/nkims_test.py", "testing/helpers.py"]  # fmt: skip
    for path in own:
        assert is_test_file(path), path
    assert is_config_file("tests/conftest.py")  # never applied: pytest would load it
    assert path_flags(own) == set()


def test_a_shared_config_file_is_flagged_only_when_its_pytest_part_changes():
    toml = (
        b'[project]\nname = "x"\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    )
    bumped = toml.replace(b"dependencies = []", b'dependencies = ["attrs"]')
    assert path_flags(["pyproject.toml"], {"pyproject.toml": (toml, bumped)}) == set()
    added = toml + b"python_files = ['*.py']\n"
    assert path_flags(["pyproject.toml"], {"pyproject.toml": (toml, added)}) != set()
    assert path_flags(["pyproject.toml"], {"pyproject.toml": (toml, b"[broken")}) != set()
    fresh = b'[project]\nname = "x"\n'
    assert path_flags(["pyproject.toml"], {"pyproject.toml": (None, fresh)}) == set()
    cfg = b"[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n"
    renamed = cfg.replace(b"name = x", b"name = y")
    assert path_flags(["setup.cfg"], {"setup.cfg": (cfg, renamed)}) == set()
    assert path_flags(["setup.cfg"], {"setup.cfg": (cfg, cfg + b"testpaths = t\n")}) != set()
    assert path_flags(["tox.ini"], {"tox.ini": (None, b"[pytest]\naddopts = -x\n")}) != set()
    assert path_flags(["pytest.ini"], {"pytest.ini": (b"[pytest]\n", b"[pytest]\n\n")}) != set()
