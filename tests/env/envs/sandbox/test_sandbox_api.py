"""The sandbox API on both backends: commands, files, changes and diffs, errors, threads.

Real bwrap, real overlay mounts, real processes. A machine without bubblewrap fails these
tests (SandboxUnavailable) instead of skipping them: CI installs it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
import warnings
from pathlib import Path

import pytest

from fleetrl.envs.sandbox import (
    Change,
    Limits,
    SandboxError,
    SandboxUnavailable,
    UnsafeSandboxWarning,
    open_sandbox,
)
from fleetrl.envs.sandbox.bwrap import host_tools


@pytest.fixture
def base(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(
        "from pkg.calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (repo / "README").write_text("no newline at the end")
    (repo / "gone.txt").write_text("delete me\n")
    (repo / "olddir").mkdir()
    (repo / "olddir" / "a.txt").write_text("a\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho run\n")
    (repo / "link").symlink_to("README")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    return repo


def _open(base: Path, backend: str):
    if backend == "local":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsafeSandboxWarning)
            return open_sandbox(base, backend="local")
    return open_sandbox(base, backend=backend)


@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_exec_runs_commands_in_the_workspace(base: Path, backend: str) -> None:
    with _open(base, backend) as sb:
        result = sb.exec("pwd; echo out; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (
            3,
            f"{sb.workdir}\nout\n",
            "err\n",
        )
        assert not result.timed_out and not result.output_truncated and not result.ok
        assert 0 < result.duration_s < 10
        argv = sb.exec(["python", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME"])
        assert argv.ok and argv.stdout == "['a b', '$HOME']\n"
        assert sb.exec("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"
        # The host's Python and the project's pytest are usable inside.
        failing = sb.exec("python -m pytest -q -p no:cacheprovider tests")
        assert failing.exit_code == 1 and "1 failed" in failing.stdout
        # No bytecode is cached: a same-size edit within the same second must not run stale.
        assert sb.exec("find . -name '*.pyc'").stdout == ""
        sb.write_file("pkg/calc.py", "def add(a, b):\n    return a + b\n")
        assert sb.exec("python -m pytest -q -p no:cacheprovider tests").ok


@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_exec_passes_descriptors_under_their_numbers(base: Path, backend: str) -> None:
    # The verifier's calls mode joins two commands by pipes this way.
    read_end, write_end = os.pipe()
    try:
        with _open(base, backend) as sb:
            script = f"import os; os.write({write_end}, b'through the pipe')"
            assert sb.exec(["python", "-c", script], pass_fds=(write_end,)).ok
            os.close(write_end)
            write_end = -1
            assert os.read(read_end, 100) == b"through the pipe"
            # Without it, the command has no such descriptor.
            assert not sb.exec(["python", "-c", f"import os; os.fstat({read_end})"]).ok
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


def test_exec_state_persists_between_commands_but_not_processes(base: Path) -> None:
    with open_sandbox(base) as sb:
        sb.exec("echo 1 > /workspace/state; echo 2 > /tmp/scratch; export GONE=1")
        assert sb.exec("cat state /tmp/scratch; echo ${GONE:-unset}").stdout == "1\n2\nunset\n"
        assert sb.exec("echo $$").stdout == "2\n"  # a fresh PID namespace per command


@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_file_api(base: Path, backend: str) -> None:
    with _open(base, backend) as sb:
        sb.write_file("new/deep/file.txt", "hello")
        assert sb.read_file("new/deep/file.txt") == b"hello"
        assert sb.read_file(f"{sb.workdir}/new/./deep/file.txt", max_bytes=2) == b"he"
        assert sb.exec("cat new/deep/file.txt").stdout == "hello"
        assert sb.list_dir() == sorted(
            [
                "README",
                "blob.bin",
                "gone.txt",
                "link",
                "new/",
                "olddir/",
                "pkg/",
                "run.sh",
                "tests/",
            ]
        )
        assert sb.list_dir("/new") == ["deep/"]
        with pytest.raises(FileNotFoundError):
            sb.read_file("missing.txt")
        with pytest.raises(IsADirectoryError):
            sb.read_file("pkg")
    assert not (base / "new").exists()


@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_changes_and_diff_apply_to_a_pristine_copy(
    base: Path, tmp_path: Path, backend: str
) -> None:
    with _open(base, backend) as sb:
        assert sb.changes() == [] and sb.diff() == ""
        script = (
            "sed -i 's/a - b/a + b/' pkg/calc.py && rm gone.txt && rm -r olddir && "
            "echo more >> README && chmod +x pkg/__init__.py && mkdir -p src && "
            "printf 'x\\r\\ny\\fz' > src/crlf.txt && touch src/empty && ln -sf pkg link && "
            "printf '\\0\\1' > blob.bin && mkdir -p pkg/__pycache__ && "
            "touch pkg/__pycache__/c.pyc stray.pyc && python -c 'import pkg.calc'"
        )
        assert sb.exec(script).ok
        changes = {c.path: c for c in sb.changes()}
        assert changes == {
            "README": Change("README", "modified"),
            "blob.bin": Change("blob.bin", "modified", binary=True),
            "gone.txt": Change("gone.txt", "deleted"),
            "link": Change("link", "modified"),
            "olddir/a.txt": Change("olddir/a.txt", "deleted"),
            "pkg/__init__.py": Change("pkg/__init__.py", "modified"),
            "pkg/calc.py": Change("pkg/calc.py", "modified"),
            "src/crlf.txt": Change("src/crlf.txt", "added"),
            "src/empty": Change("src/empty", "added"),
            "stray.pyc": Change("stray.pyc", "added"),  # imported without a source: a change
        }
        patch = sb.diff([p for p in changes if p != "blob.bin"])
        assert "Binary files" in sb.diff(["blob.bin"])
        assert "\\ No newline at end of file" in patch and "old mode 100644" in patch
        # The verifier's path: apply the patch to a pristine copy with git.
        copy = tmp_path / "pristine"
        shutil.copytree(base, copy, symlinks=True)
        subprocess.run(["git", "apply", "-"], cwd=copy, input=patch.encode(), check=True)
        for rel, change in changes.items():
            applied = copy / rel
            if change.kind == "deleted":
                assert not applied.exists() and not applied.is_symlink()
            elif rel == "link":
                assert os.readlink(applied) == "pkg"
            elif not change.binary:
                assert applied.read_bytes() == sb.read_file(rel), rel
        assert os.access(copy / "pkg" / "__init__.py", os.X_OK)
    assert (base / "gone.txt").exists() and "a - b" in (base / "pkg" / "calc.py").read_text()


def test_threads_and_asyncio_share_one_sandbox(base: Path) -> None:
    with open_sandbox(base) as sb:
        results: list[str] = []

        def work(i: int) -> None:
            results.append(sb.exec(f"echo {i} > f{i}; cat f{i}").stdout)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [f"{i}\n" for i in range(8)]

        async def gather() -> list[str]:
            runs = [asyncio.to_thread(sb.exec, f"sleep 0.2; echo {i}") for i in range(4)]
            return [r.stdout for r in await asyncio.gather(*runs)]

        start = time.monotonic()
        assert asyncio.run(gather()) == [f"{i}\n" for i in range(4)]
        assert time.monotonic() - start < 2.0  # they ran concurrently


def test_clear_errors(base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_sandbox(tmp_path / "nope")
    with pytest.raises(NotADirectoryError):
        open_sandbox(base / "README")
    with pytest.raises(ValueError, match="unknown sandbox backend 'docker'"):
        open_sandbox(base, backend="docker")
    with pytest.raises(ValueError, match=r"Limits.memory_mb"):
        Limits(memory_mb=0)
    with pytest.warns(UnsafeSandboxWarning, match="NOT a sandbox"):
        local = open_sandbox(base, backend="local")
    assert not local.isolated
    local.close()
    # auto never falls back to the unsafe copy: without bwrap it refuses, saying why.
    monkeypatch.setenv("FLEETRL_BWRAP", str(tmp_path / "no-bwrap"))
    host_tools.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="backend='local'"):
            open_sandbox(base)
    finally:
        monkeypatch.undo()
        host_tools.cache_clear()
    sb = open_sandbox(base)
    assert sb.isolated and sb.backend == "bwrap"
    sb.close()
    sb.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")
    with pytest.raises(ValueError):
        open_sandbox(base, ro_paths=["relative/path"])
