"""UNSAFE development backend: a plain temporary copy of the base, commands run on the host.

For laptops without bubblewrap or root only. Nothing is isolated: commands see the whole
host, its network and its files, run as the calling user, and only the wall-clock
timeout and the output cap apply (no memory, process or disk limits). It is never chosen
by `backend="auto"`, warns (`UnsafeSandboxWarning`) every time it is opened, and reports
`isolated = False` so the verifier can refuse it. Creating one copies the whole tree.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence

from fleetrl.envs.sandbox import changes, fs
from fleetrl.envs.sandbox.base import Sandbox, command_argv
from fleetrl.envs.sandbox.process import run_captured
from fleetrl.envs.sandbox.types import (
    Change,
    ExecResult,
    Limits,
    SandboxError,
    UnsafeSandboxWarning,
)


class LocalSandbox(Sandbox):
    """A temporary copy of `base_dir`; commands run unconfined on the host (UNSAFE)."""

    backend = "local"
    isolated = False

    def __init__(self, base_dir: str, limits: Limits) -> None:
        warnings.warn(
            "backend='local' is NOT a sandbox: commands run on the host with its network "
            "and files and no resource limits; use it for development only",
            UnsafeSandboxWarning,
            stacklevel=3,
        )
        self.base_dir = base_dir
        self.limits = limits
        self.dir = tempfile.mkdtemp(prefix="fleetrl-local-sandbox-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)
        self.workdir = os.path.join(self.dir, "workspace")
        shutil.copytree(base_dir, self.workdir, symlinks=True)
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def exec(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        *,
        pass_fds: Sequence[int] = (),
    ) -> ExecResult:
        """Run `cmd` on the host with the copy as cwd (no isolation)."""
        argv = command_argv(cmd, timeout)
        with self._lock:
            if self._closed:
                raise SandboxError("sandbox is closed")
        try:
            return run_captured(
                argv,
                timeout=self.limits.wall_s if timeout is None else timeout,
                max_output_bytes=self.limits.max_output_bytes,
                kill=_kill_group,
                env={
                    **os.environ,
                    "HOME": self.dir,
                    "PYTHONDONTWRITEBYTECODE": "1",  # see BwrapSandbox: no stale .pyc
                    **(env or {}),
                },
                cwd=self.workdir,
                pass_fds=pass_fds,
                on_start=self._started,
            )
        finally:
            with self._lock:
                self._running = {p for p in self._running if p.poll() is None}

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.add(proc)
            if self._closed:
                _kill_group(proc)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a file in the copy (symlinks may not leave it)."""
        return fs.read_beneath(self.workdir, fs.relative_path(path, self.workdir), max_bytes)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file in the copy, creating parent directories."""
        payload = data.encode() if isinstance(data, str) else data
        fs.write_beneath(self.workdir, fs.relative_path(path, self.workdir), payload, mode)

    def list_dir(self, path: str = ".") -> list[str]:
        """Entries of a directory of the copy."""
        return fs.list_beneath(self.workdir, fs.relative_path(path, self.workdir))

    def changes(self) -> list[Change]:
        """Changed files, by comparing every path of both trees."""
        return changes.compute_changes(self.base_dir, self.workdir, self._candidates())

    def diff(self, paths: Iterable[str] | None = None) -> str:
        """Git-style patch of the copy vs the base."""
        candidates = self._candidates()
        if paths is not None:
            wanted = {fs.relative_path(p, self.workdir) for p in paths}
            candidates = [c for c in candidates if c in wanted]
        return changes.unified_diff(self.base_dir, self.workdir, candidates)

    def _candidates(self) -> list[str]:
        return [*changes.walk_files(self.base_dir), *changes.walk_files(self.workdir)]

    def close(self) -> None:
        """Kill running commands' process groups and delete the copy (idempotent)."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            _kill_group(proc)
        self._finalizer()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # start_new_session made the command a group leader; its group holds its children
    # (unless they started their own sessions: no isolation here, see the docstring).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
