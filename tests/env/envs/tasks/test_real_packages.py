"""`fleetrl tasks make` on the sdists of real PyPI packages, as a new user would run it: it
keeps tasks, and the verifier scores each kept task's gold fix 1 and its unchanged checkout
0. Their suites do what honest suites do (a doctest runner restoring the trace function, a
process pool ending its workers, 765 tests with 21,000 subtests).

The sdists are downloaded by pip once (into pytest's cache, when it is on); without PyPI
the tests skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from fleetrl.envs.tasks.git import apply_patch
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import checkout
from fleetrl.envs.verifier import OutcomeCache, cache, verify_workspace
from tests.unit.cli.test_tasks import _cache, _ok  # noqa: F401  (_cache: autouse)

# (distribution, version, the package it installs, tasks to make): small, pure Python, a suite
# pytest runs (more-itertools': 765 tests, 21,000 subtests, 20 s a run; one task is enough).
PACKAGES = [
    ("toolz", "1.2.0", "toolz", 2),
    ("more-itertools", "11.2.1", "more_itertools", 1),
]


@pytest.fixture(scope="session")
def sdists(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the downloaded sdists are kept: pytest's cache, else a fresh folder."""
    if getattr(request.config, "cache", None) is not None:
        return Path(request.config.cache.mkdir("pypi-sdists"))
    return tmp_path_factory.mktemp("pypi-sdists")


def download_sdist(folder: Path, name: str, version: str) -> Path:
    """The sdist of `name==version`, downloaded by pip into `folder` unless it is there."""
    stems = {f"{name}-{version}", f"{name.replace('-', '_')}-{version}"}
    found = [p for p in folder.glob("*.tar.gz") if p.name.removesuffix(".tar.gz") in stems]
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        try:
            run = subprocess.run(
                [*command, f"{name}=={version}", "-d", str(folder)],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"cannot download the sdist of {name}=={version}: PyPI did not answer")
        found = [p for p in folder.glob("*.tar.gz") if p.name.removesuffix(".tar.gz") in stems]
        if run.returncode != 0 or not found:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(
                f"cannot download the sdist of {name}=={version} (PyPI unreachable?): {last}"
            )
    return found[0]


def unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "version", "package", "n"), PACKAGES, ids=[p[0] for p in PACKAGES]
)
def test_tasks_made_from_a_real_package_grade(
    sdists, tmp_path, monkeypatch, name, version, package, n
):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here: the grader would import it, not the task's")
    source = unpack(download_sdist(sdists, name, version), tmp_path / "src")
    out = tmp_path / "tasks"
    start = time.monotonic()
    make = ["make", str(source), "--out", str(out), "--max-tasks", str(n), "--jobs", str(n)]
    make += ["--json", "--no-progress", "--pytest-arg=-p", "--pytest-arg=no:hypothesispytest"]
    report = json.loads(_ok(*make))
    made_s = time.monotonic() - start
    tasks = load_tasks(tasks_dir=out)
    assert report["tasks"] == len(tasks) == n, report
    assert report["tried"] == sum(k["tried"] for k in report["by_kind"].values())
    # Graded again from a checkout, as an agent's work is: no outcome carried over.
    monkeypatch.setattr(cache, "OUTCOMES", OutcomeCache())
    for task in tasks:
        workspace = checkout(task, tmp_path / task.instance_id)
        unchanged = verify_workspace(task, workspace, timeout=300)
        assert unchanged.reward == 0 and "failed" in unchanged.tests.values(), unchanged.flags
        apply_patch(workspace, task.patch)
        fixed = verify_workspace(task, workspace, timeout=300)
        assert fixed.reward == 1 and not fixed.flags, (task.instance_id, fixed.flags)
        assert set(fixed.tests.values()) == {"passed"}
    print(f"{name} {version}: {len(tasks)} tasks of {report['tried']} tried in {made_s:.0f} s")
