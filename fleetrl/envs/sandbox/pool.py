"""A pool of ready sandboxes over one base directory, refilled in the background.

    caller ── acquire() ──▶ ready deque ──pop──▶ sandbox (used once, closed on release)
                               ▲
    refill thread ── open_sandbox() while len(ready) < size

A sandbox is never reused: each `acquire` hands out a fresh, untouched copy, so one
episode cannot leave anything behind for the next. When the deque is empty (a burst
larger than the pool), `acquire` creates a sandbox on the spot instead of waiting, so a
burst of any size succeeds; it is only slower per sandbox. Thread-safe; asyncio code uses
`acquire_async`.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from fleetrl.envs.sandbox.base import Sandbox
from fleetrl.envs.sandbox.types import Limits, SandboxError

# After a failed background creation, wait this long before trying again.
_RETRY_S = 0.5


@dataclass
class PoolStats:
    """Counters of a pool since it was created."""

    served_warm: int = 0  # acquisitions served from the ready deque
    served_cold: int = 0  # acquisitions that had to create a sandbox on the spot
    refill_errors: int = 0  # background creations that failed (see `last_error`)
    last_error: str = ""  # message of the latest failed background creation


class SandboxPool:
    """Keeps `size` sandboxes of `base_dir` ready; see the module docstring."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        size: int = 8,
        backend: str = "auto",
        limits: Limits | None = None,
        ro_paths: Sequence[str] | None = None,
    ) -> None:
        from fleetrl.envs.sandbox import open_sandbox

        if size < 0:
            raise ValueError(f"SandboxPool size must be >= 0, got {size}")
        self.size = size
        self.stats = PoolStats()
        self._open = lambda: open_sandbox(base_dir, backend, limits, ro_paths)
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        # The first sandbox is made here, so a bad base_dir or backend fails the caller
        # instead of the background thread.
        if size:
            self._ready.append(self._open())
        self._thread = threading.Thread(target=self._refill, name="sandbox-pool", daemon=True)
        self._thread.start()

    @property
    def ready(self) -> int:
        """Sandboxes waiting to be acquired right now."""
        return len(self._ready)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the pool is full (or `timeout` passes); True if it is full."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._ready) >= self.size, timeout)

    def take(self) -> Sandbox:
        """A fresh sandbox, warm if one is ready; the caller must `close()` it."""
        with self._cond:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            if self._ready:
                self.stats.served_warm += 1
                sandbox = self._ready.popleft()
                self._cond.notify_all()
                return sandbox
            self.stats.served_cold += 1
        return self._open()

    @contextmanager
    def acquire(self) -> Iterator[Sandbox]:
        """A fresh sandbox for the duration of a `with` block, closed afterwards."""
        sandbox = self.take()
        try:
            yield sandbox
        finally:
            sandbox.close()

    @asynccontextmanager
    async def acquire_async(self) -> AsyncIterator[Sandbox]:
        """`acquire` for asyncio: creation and teardown run in worker threads."""
        sandbox = await asyncio.to_thread(self.take)
        try:
            yield sandbox
        finally:
            await asyncio.to_thread(sandbox.close)

    def _refill(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or len(self._ready) < self.size)
                if self._closed:
                    return
            try:
                sandbox = self._open()
            except Exception as err:  # keep serving (cold); the stats tell what went wrong
                self.stats.refill_errors += 1
                self.stats.last_error = str(err)
                time.sleep(_RETRY_S)
                continue
            with self._cond:
                if not self._closed:
                    self._ready.append(sandbox)
                    self._cond.notify_all()
                    continue
            sandbox.close()
            return

    def close(self) -> None:
        """Stop refilling and tear down the sandboxes still waiting (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        while self._ready:
            self._ready.popleft().close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
