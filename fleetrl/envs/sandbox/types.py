"""Structs and errors at the sandbox boundary: what a caller passes in and gets back.

`Limits` goes in (validated when built, errors name the field), `ExecResult` and `Change`
come out. All plain dataclasses of builtins, so they pickle and serialise unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


class SandboxError(RuntimeError):
    """A sandbox could not be created, used or torn down."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot run on this machine (missing tool, privilege, cgroup)."""


class UnsafeSandboxWarning(UserWarning):
    """Emitted when a sandbox without isolation (the `local` backend) is opened."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox; every command run in it gets them afresh."""

    wall_s: float = 120.0  # default per-command wall-clock timeout; `exec(timeout=)` overrides
    memory_mb: int = 2048  # RAM of one command, all its processes together (memory cgroup)
    max_procs: int = 256  # tasks (processes + threads) of one command at once, bwrap's 2 included
    max_output_bytes: int = 1 << 20  # stdout and stderr each keep this much (head + tail)
    disk_mb: int = 1024  # size of the writable layer (workspace changes + /tmp), a tmpfs

    def __post_init__(self) -> None:
        for name in ("wall_s", "memory_mb", "max_procs", "max_output_bytes", "disk_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        # Below this the sandbox's own bookkeeping processes (bwrap, shell) cannot start.
        if self.max_procs < 4:
            raise ValueError(f"Limits.max_procs must be >= 4, got {self.max_procs}")
        if self.memory_mb < 16:
            raise ValueError(f"Limits.memory_mb must be >= 16, got {self.memory_mb}")


@dataclass
class ExecResult:
    """Outcome of one command run in a sandbox."""

    exit_code: int  # as a shell reports it: the status, or 128 + N when killed by signal N
    stdout: str  # UTF-8 (invalid bytes replaced); when truncated, head + marker + tail
    stderr: str  # same treatment as stdout
    timed_out: bool  # killed because it ran past its timeout (exit_code is then 137)
    output_truncated: bool  # stdout or stderr exceeded Limits.max_output_bytes
    duration_s: float  # wall-clock seconds from start to exit (or to the kill)
    oom_killed: bool = False  # the kernel killed a process of this command for memory

    @property
    def ok(self) -> bool:
        """True when the command exited 0 on its own."""
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class Change:
    """One file that differs between a sandbox's workspace and its base directory."""

    path: str  # POSIX path relative to the workspace root, e.g. "pkg/mod.py"
    kind: Literal["added", "modified", "deleted"]
    binary: bool = False  # content is not UTF-8 text: `diff()` names it but carries no bytes
