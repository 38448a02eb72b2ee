"""Sandboxes: an isolated copy-on-write copy of a repository where an agent's tools run.

    with open_sandbox("/data/repos/flask") as sb:        # overlay over the repo, ~ms
        result = sb.exec("python -m pytest -q", timeout=60)
        sb.write_file("src/app.py", new_source)
        patch = sb.diff()                                  # git-style, vs the repo

Backends: "bwrap" (the default and the only isolated one; see `bwrap`) and "local"
(an unconfined temporary copy, development only, used only when asked for by name).
`SandboxPool` keeps sandboxes ready for bursts; `cleanup_stale` removes the per-command
cgroups of owners that crashed (their mounts vanish with them); docs/sandbox.md has the
isolation guarantees and `fleetrl.bench.sandbox.run_sandbox_bench` the figures.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from fleetrl.envs.sandbox.base import Sandbox
from fleetrl.envs.sandbox.cgroups import cleanup_stale
from fleetrl.envs.sandbox.pool import SandboxPool
from fleetrl.envs.sandbox.types import (
    Change,
    ExecResult,
    Limits,
    SandboxError,
    SandboxUnavailable,
    UnsafeSandboxWarning,
)

BACKENDS = ("auto", "bwrap", "local")

__all__ = [
    "BACKENDS",
    "Change",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxUnavailable",
    "UnsafeSandboxWarning",
    "cleanup_stale",
    "open_sandbox",
]


def open_sandbox(
    base_dir: str | os.PathLike[str],
    backend: str = "auto",
    limits: Limits | None = None,
    ro_paths: Sequence[str] | None = None,
) -> Sandbox:
    """Create a sandbox over `base_dir`; use it as a context manager so it is torn down.

    `backend="auto"` means bwrap and never falls back to the unsafe local copy: when
    bwrap cannot run, SandboxUnavailable says why and how to fix it. `ro_paths` are
    host directories bound read-only at the same path (bwrap only; default: this
    interpreter's prefixes, so commands can run `python -m pytest`). `base_dir` must not
    change while sandboxes over it are open (overlayfs reads it live).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS}")
    path = os.path.realpath(os.fspath(base_dir))
    if not os.path.exists(path):
        raise FileNotFoundError(f"sandbox base_dir does not exist: {os.fspath(base_dir)}")
    if not os.path.isdir(path):
        raise NotADirectoryError(f"sandbox base_dir is not a directory: {os.fspath(base_dir)}")
    limits = limits or Limits()
    if backend == "local":
        from fleetrl.envs.sandbox.local import LocalSandbox

        return LocalSandbox(path, limits)
    from fleetrl.envs.sandbox.bwrap import BwrapSandbox

    if ro_paths is not None:
        for p in ro_paths:
            if not os.path.isabs(p) or not os.path.isdir(p):
                raise ValueError(f"ro_paths entries must be existing absolute directories: {p}")
    return BwrapSandbox(path, limits, ro_paths)
