"""The unit tier runs pure code in this process: no process starts and no socket is bound.

An autouse guard makes both fail loudly, so a test that needs git, pytest, a sandbox or a
server cannot slip into the quick loop (`make test-fast`): such a test belongs in
tests/env (or tests/integration when it trains or serves).

The guard is module-scoped so that it also covers module-scoped fixtures (a fixture that
generates tasks with pytest in subprocesses is caught like a test); it is undone when the
module ends, so the other tiers of the same run are untouched.

matplotlib (the run report's charts) asks `fc-list` for the system fonts the first time it
is imported on a machine; that happens before the guard, so a fresh machine's first report
test is not refused for the library's own setup.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest


class ImpureUnitTest(AssertionError):
    """A unit test (or one of its fixtures) tried to start a process or bind a socket."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        __tracebackhide__ = True
        raise ImpureUnitTest(
            f"unit tests are pure: {what} refused, move this test to tests/env "
            "(tests/integration if it trains or serves)"
        )

    return refuse


@pytest.fixture(scope="module", autouse=True)
def _no_processes_or_servers() -> Iterator[None]:
    import matplotlib.font_manager  # noqa: F401  (its font cache, built once per machine)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _refuse("starting a process"))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                patch.setattr(os, name, _refuse(f"os.{name}"))
        patch.setattr(socket.socket, "bind", _refuse("binding a socket (a server)"))
        yield
