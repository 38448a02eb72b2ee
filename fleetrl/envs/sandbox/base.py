"""The seam every sandbox backend implements: run commands, touch files, report changes.

A sandbox is a private, writable view of a base directory (the task's repository). The
caller sees paths relative to the workspace root; `workdir` is where that root appears to
commands. Methods are safe to call from several threads; `exec` blocks, so asyncio code
calls it through `asyncio.to_thread`. `close` ends running commands and removes every
trace; it is idempotent and also runs on leaving a `with` block.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType

from fleetrl.envs.sandbox.types import Change, ExecResult, Limits


def command_argv(cmd: str | Sequence[str], timeout: float | None) -> list[str]:
    """The argv `exec` runs (a string goes through bash), after checking its arguments."""
    argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ValueError("exec needs a non-empty command")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"exec timeout must be > 0 seconds, got {timeout!r}")
    return argv


class Sandbox(ABC):
    """A private copy-on-write workspace over a base directory, with a place to run tools."""

    backend: str  # registry name: "bwrap" or "local"
    isolated: bool  # False when commands can reach the host (never use for rewards)
    workdir: str  # the workspace root as commands see it (also their cwd)
    limits: Limits

    @abstractmethod
    def exec(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        *,
        pass_fds: Sequence[int] = (),
    ) -> ExecResult:
        """Run `cmd` (a bash string, or an argv list) in the workspace; `timeout` defaults
        to `limits.wall_s`; `env` adds variables to the sandbox's fixed environment;
        `pass_fds` are descriptors of the caller that the command inherits under the same
        numbers (pipes to another process: the verifier's calls mode)."""

    @abstractmethod
    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a regular file in the workspace (symlinks may not leave it)."""

    @abstractmethod
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Create or replace a file in the workspace, creating parent directories."""

    @abstractmethod
    def list_dir(self, path: str = ".") -> list[str]:
        """Sorted entry names of a workspace directory; directories end with '/'."""

    @abstractmethod
    def changes(self) -> list[Change]:
        """Files added, modified or deleted vs the base (caches and .git excluded)."""

    @abstractmethod
    def diff(self, paths: Iterable[str] | None = None) -> str:
        """Git-style unified diff of the changes vs the base, limited to `paths` if given."""

    @abstractmethod
    def close(self) -> None:
        """Kill running commands, unmount and delete everything; safe to call twice."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
